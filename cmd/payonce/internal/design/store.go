package design

import "strings"

// The stores the document maps the logical record onto, by the user's
// database answer (docs/design.md, "Stores: one logical model, four
// mappings"). StoreUnknown gets the logical model and its three atomic
// decisions, technology-agnostic.
const (
	StorePostgres = "postgresql"
	StoreMySQL    = "mysql"
	StoreRedis    = "redis"
	StoreDynamo   = "dynamodb"
	StoreMongo    = "mongodb"
	StoreUnknown  = ""
)

// StoreOf reads the database answer.
func StoreOf(database string) string {
	d := strings.ToLower(strings.TrimSpace(database))
	switch {
	case strings.Contains(d, "postgres") || d == "pg" || strings.Contains(d, "aurora postgres") || strings.Contains(d, "cockroach"):
		return StorePostgres
	case strings.Contains(d, "mysql") || strings.Contains(d, "mariadb") || strings.Contains(d, "aurora mysql"):
		return StoreMySQL
	case strings.Contains(d, "redis") || strings.Contains(d, "valkey"):
		return StoreRedis
	case strings.Contains(d, "dynamo"):
		return StoreDynamo
	case strings.Contains(d, "mongo"):
		return StoreMongo
	}
	return StoreUnknown
}

// storeName is the store as people write it.
func storeName(kind string) string {
	switch kind {
	case StorePostgres:
		return "PostgreSQL"
	case StoreMySQL:
		return "MySQL (InnoDB)"
	case StoreRedis:
		return "Redis"
	case StoreDynamo:
		return "DynamoDB"
	case StoreMongo:
		return "MongoDB"
	}
	return "your database"
}

// localEffects says how an action's own writes and its COMPLETED record
// reach the same fate on the store.
func localEffects(kind string, goCode bool) string {
	switch kind {
	case StorePostgres:
		if goCode {
			return "Effects commit in the same transaction as the COMPLETED record (Executor.DoTx): a crash leaves either both or neither."
		}
		return "Effects commit in the same transaction as the COMPLETED record (the fenced UPDATE of section D2 inside it): a crash leaves either both or neither."
	case StoreMySQL:
		return "Effects commit in the same InnoDB transaction as the COMPLETED record (the fenced UPDATE of section D2 inside it): a crash leaves either both or neither."
	case StoreDynamo:
		return "Effects and the COMPLETED record go in one TransactWriteItems (the record's Update conditioned on its lock_version): both or neither."
	case StoreMongo:
		return "Effects and the COMPLETED record go in one multi-document transaction (a replica set), the record's update filtered on its lock version: both or neither."
	case StoreRedis:
		return "Redis joins no transaction of your other writes: each effect must be idempotent by itself (written under a key derived from the idempotency key, e.g. SET NX), so that the re-run after a crash between the effect and COMPLETED finds it done."
	}
	return "If your database has transactions, commit the effects in the same transaction as the COMPLETED record; if not, make each effect idempotent by itself (keyed by the idempotency key), so that a re-run after a crash finds it done."
}

// outboxWhere says where an outbox row is written on the store.
func outboxWhere(kind string) string {
	switch kind {
	case StorePostgres, StoreMySQL:
		return "an outbox row in the same transaction as the COMPLETED record"
	case StoreDynamo:
		return "an outbox item in the same TransactWriteItems as the COMPLETED record"
	case StoreMongo:
		return "an outbox document in the same transaction as the COMPLETED record"
	case StoreRedis:
		return "an outbox stream entry (XADD; under Cluster a stream key with the record's {scope} hash tag) in the same script as the COMPLETED record"
	}
	return "an outbox record committed with the COMPLETED record"
}
