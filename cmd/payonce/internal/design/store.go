package design

import (
	"strings"
	"time"

	"github.com/payonce/payonce/migrations"
)

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

// storeIdentity is how the store makes (scope, key) unique.
func storeIdentity(kind string) string {
	switch kind {
	case StorePostgres, StoreMySQL:
		return "the primary key (idempotency_key, user_id)"
	case StoreRedis:
		return "the Redis key idem:{<scope>}:<key> (the hash tag keeps a scope in one Cluster slot)"
	case StoreDynamo:
		return "the partition key r#<scope>#<key>"
	case StoreMongo:
		return "the document id {k: <key>, s: <scope>} (the unique _id index)"
	}
	return "a uniqueness constraint on (scope, key) that your database enforces"
}

// storeClaim is the claim, one atomic step on the store.
func storeClaim(kind string) string {
	switch kind {
	case StorePostgres:
		return "one INSERT ... ON CONFLICT DO NOTHING on the primary key"
	case StoreMySQL:
		return "one INSERT ... ON DUPLICATE KEY UPDATE on the primary key, then SELECT ... FOR UPDATE of the row in the same short transaction"
	case StoreRedis:
		return "one Lua script (SET NX PX of the lease, the server's TIME for expiry), which Redis runs with no other command in between"
	case StoreDynamo:
		return "one PutItem conditioned on attribute_not_exists(pk)"
	case StoreMongo:
		return "one findOneAndUpdate with upsert: true on the _id, its update a pipeline deciding on $$NOW"
	}
	return "one atomic create-if-absent on (scope, key)"
}

// the logical model, as docs/design.md defines it.
func logicalModel() Block {
	return table([]string{"part of the record", "what it decides"}, [][]string{
		{"identity: scope + key", "whose request this is; the scope comes from authentication, so no tenant can take another's key"},
		{"fingerprint", "the significant fields (section 3), compared in constant time: another request under the same key is refused"},
		{"status", "PROCESSING, COMPLETED or FAILED"},
		{"lease: lease end + lock version", "who may run the action now; only the holder of the current version may record an outcome (fencing)"},
		{"response", "replayed byte for byte to every retry (or its hash only, where a full replay is not needed)"},
		{"expiry", "after it the key is new again; an expired record is never replayed"},
		{"clock", "one clock decides every lease and expiry: the server's where it has one"},
	})
}

// threeDecisions are the atomic steps a store must offer.
func threeDecisions() Block {
	return list(
		"Create if absent: of many concurrent contenders for one (scope, key), exactly one creates the record and holds the lease.",
		"Take over if the lease seen is still the one there: a compare-and-swap on the lock version and the lease end, so that exactly one contender reclaims an orphaned lease.",
		"Record an outcome only if the version is still the holder's (fencing): a holder that lost its lease changes nothing.",
	)
}

// storeBlocks is deliverable D2: the record on the user's store.
func storeBlocks(d *Document) []Block {
	goCode := d.Answers.Stack.IsGo()
	b := []Block{p("The record is defined by what it must decide, not by a table. This is the logical model, then its mapping onto %s.", storeName(d.Store)), logicalModel(),
		p("A store is correct when three decisions are each one atomic step on the engine:"), threeDecisions()}
	lease := human(maxLease(d))
	ret := human(d.Retention)
	switch d.Store {
	case StorePostgres:
		if goCode {
			sql, lines := payonceSchema(d)
			b = append(b, p("payonce's schema for the components you use (lines %s), as payonce migrate up applies it; `payonce migrate print` prints it for your own migration tool. idempotency_store follows the reference DDL (PRIMARY KEY (idempotency_key, user_id), CHECK on status, lock_version, locked_until, expires_at NOT NULL, the expiry and orphan-lock partial indexes); pgstore runs the statements, with now() as the only clock.", lines),
				code("sql", sql))
		} else {
			b = append(b, p("The reference DDL: one table, idempotency_store, and nothing else. Every instant comes from now(), the server's clock."),
				code("sql", referenceDDL()),
				p("The three decisions, one statement each (lease %s, retention %s):", lease, ret), code("sql", claimSQL))
		}
	case StoreMySQL:
		b = append(b, p("InnoDB, MySQL 8.0.16+ or MariaDB 10.2+ (both enforce CHECK). Keys compare byte for byte (ascii_bin): under a case-insensitive collation two different keys would be one record. Every instant is NOW(6), the server's clock; set the session's time_zone to '+00:00', since DATETIME keeps no zone."),
			code("sql", mysqlDDL), p("The three decisions (lease %s = %d s, retention %s = %d s):", lease, int(maxLease(d).Seconds()), ret, int(d.Retention.Seconds())), code("sql", mysqlSQL))
	case StoreRedis:
		b = append(b, p("Two keys per record, in one hash slot by the {scope} hash tag: the record, a hash, and its lease, a string holding the lock version whose PX the server's clock ends. Each decision is one Lua script: Redis runs no other command between its read and its write. Expiry instants come from the server's TIME inside the script, never from the application's clock."),
			code("text", redisLayout), code("lua", redisClaimLua), code("lua", redisCompleteLua),
			p("Durability is the engine's: a primary acknowledges a write before any replica has it, so a failover can lose an acknowledged claim and let a second holder run. Run with appendonly yes, and WAIT for a replica after a claim where that matters."))
		if goCode {
			b = append(b, p("In Go, use payonce's redisstore (redisstore.New(client, nil)) rather than these scripts: it makes the same three decisions, one script each, with the lease end kept in the record and compared with the server's TIME, and passes payonce's conformance suite on a real redis-server. The scripts above are the mapping for a store of your own."))
		}
	case StoreDynamo:
		b = append(b, p("One item per (scope, key), partition key pk = r#<scope>#<key>, no sort key, no index; billed on demand. The table as infrastructure code (not SQL: DynamoDB has none):"),
			code("text", dynamoTable), p("Each decision is one conditional write, applied atomically to the item; a write whose condition fails is decided again on a strongly consistent GetItem:"), code("text", dynamoWrites),
			p("Clock and skew: DynamoDB's expressions have no clock, so the application's decides every lease end and expiry. The skew buffer (2 s by default) is the bound the deployment promises on its hosts' clock differences: a lease is taken over only once it ended that long ago by the claimant's clock. Choose a store with a server clock where hosts' clocks cannot be trusted within a few seconds. Expiry: the TTL attribute purge (epoch seconds) lets DynamoDB delete an item some time after it passes, not at once, so every read checks ea itself."))
		if goCode {
			b = append(b, p("In Go, payonce's dynamostore implements this model (dynamostore.CreateTable, dynamostore.New; Config.SkewBuffer) and passes payonce's conformance suite on a real dynalite."))
		}
	case StoreMongo:
		b = append(b, p("One document per (scope, key), _id: {k, s}, so the _id index is the unique index on (key, scope). The claim decides on the server's clock, $$NOW (the same value for all members of the deployment), in an update pipeline (MongoDB 4.2+). Write with writeConcern {w: 'majority', j: true}: a w: 1 claim can be rolled back in a failover."),
			code("javascript", mongoJS))
	default:
		b = append(b, p("Your database is not named (or not one this document maps: PostgreSQL, MySQL, Redis, DynamoDB, MongoDB), so the design stays technology-agnostic: map each part of the model onto a record of your store, and each decision onto one atomic operation of it (a unique insert, a conditional update, a compare-and-swap). A store that cannot do the three atomically cannot protect an action: no check-then-insert, no in-process lock."),
			table([]string{"decision", "what the operation must guarantee"}, [][]string{
				{"create if absent", "atomic on (scope, key): of concurrent creators exactly one succeeds, the others see the record"},
				{"take over", "conditioned on status PROCESSING, the lock version seen and a lease end past by the store's clock; the version grows by one"},
				{"record an outcome", "conditioned on status PROCESSING and the holder's version; nothing changes otherwise"},
			}))
	}
	return b
}

func maxLease(d *Document) time.Duration {
	lt := minLock
	for _, x := range d.Actions {
		lt = max(lt, x.LockTimeout)
	}
	return lt
}

// payonceSchema is payonce's own schema for the lines a Go user's
// components need: the idempotency line, payments (with the ledger) when
// payments are involved, sagas when an action has several steps.
func payonceSchema(d *Document) (string, string) {
	lines := []migrations.Line{migrations.LineIdempotency}
	if len(d.Providers) > 0 {
		lines = append(lines, migrations.LinePayments)
	}
	for _, x := range d.Actions {
		if x.MultiStep() {
			lines = append(lines, migrations.LineSaga)
			break
		}
	}
	sql, err := migrations.SQLLines(lines...)
	if err != nil {
		panic(err) // the lines are payonce's own
	}
	var names []string
	for _, l := range lines {
		names = append(names, string(l))
	}
	return sql, strings.Join(names, ", ")
}

// referenceDDL is the idempotency_store table of payonce's first
// migration: the reference DDL.
func referenceDDL() string {
	for _, m := range migrations.All() {
		if m.Version == 1 {
			return strings.TrimSpace(m.SQL)
		}
	}
	panic("migrations: no version 1")
}

const mysqlDDL = `CREATE TABLE idempotency_store (
    idempotency_key  VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    user_id          VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    fingerprint      CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status           VARCHAR(20) NOT NULL DEFAULT 'PROCESSING',
    response_code    SMALLINT UNSIGNED NULL,
    response_body    MEDIUMBLOB NULL,          -- the exact bytes, replayed byte for byte
    lock_version     BIGINT UNSIGNED NOT NULL DEFAULT 0,
    locked_until     DATETIME(6) NULL,
    duplicates       INT UNSIGNED NOT NULL DEFAULT 0, -- see the claim
    created_at       DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    completed_at     DATETIME(6) NULL,
    expires_at       DATETIME(6) NOT NULL,
    PRIMARY KEY (idempotency_key, user_id),
    CONSTRAINT chk_status CHECK (status IN ('PROCESSING', 'COMPLETED', 'FAILED')),
    KEY idx_expires (expires_at),
    KEY idx_orphan_locks (status, locked_until)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 ROW_FORMAT=DYNAMIC;`

const mysqlSQL = `-- Create if absent: one statement. Affected rows: 1 = this request created the
-- record and holds the lease; 2 = it existed (the duplicates counter moved).
-- The counter makes the two differ whether or not the driver sets
-- CLIENT_FOUND_ROWS (Django's MySQL backend does: an unchanged row counts 1).
START TRANSACTION;
INSERT INTO idempotency_store
       (idempotency_key, user_id, fingerprint, status, lock_version, locked_until, expires_at)
VALUES (?, ?, ?, 'PROCESSING', 1, NOW(6) + INTERVAL ? SECOND, NOW(6) + INTERVAL ? SECOND)
ON DUPLICATE KEY UPDATE duplicates = duplicates + 1;
-- 2 rows: read the record under its row lock, with the server's clock.
SELECT fingerprint, status, lock_version, locked_until, expires_at,
       response_code, response_body, NOW(6) AS db_now
  FROM idempotency_store
 WHERE idempotency_key = ? AND user_id = ?
   FOR UPDATE;
-- Compare the fingerprint in constant time, then:
--   expires_at <= db_now: a new request, never a replay:
--     UPDATE ... SET fingerprint = ?, status = 'PROCESSING', lock_version = lock_version + 1,
--            locked_until = NOW(6) + INTERVAL ? SECOND, expires_at = NOW(6) + INTERVAL ? SECOND,
--            response_code = NULL, response_body = NULL
--      WHERE idempotency_key = ? AND user_id = ? AND expires_at <= NOW(6);
--   COMPLETED/FAILED: replay;
--   PROCESSING, locked_until > db_now: in progress (409 + Retry-After);
--   PROCESSING, locked_until <= db_now: take over by compare-and-swap:
UPDATE idempotency_store
   SET lock_version = lock_version + 1, locked_until = NOW(6) + INTERVAL ? SECOND
 WHERE idempotency_key = ? AND user_id = ? AND status = 'PROCESSING'
   AND lock_version = ? AND locked_until <= NOW(6);
COMMIT;

-- Record the outcome, fenced by the holder's lock_version (in the transaction
-- of the action's own writes). Matched rows 0: the lease was lost, roll back.
UPDATE idempotency_store
   SET status = 'COMPLETED', response_code = ?, response_body = ?,
       completed_at = NOW(6), locked_until = NULL,
       expires_at = NOW(6) + INTERVAL ? SECOND
 WHERE idempotency_key = ? AND user_id = ? AND lock_version = ?
   AND status = 'PROCESSING';`

const redisLayout = `idem:{<scope>}:<key>        hash   fp, st (PROCESSING|COMPLETED|FAILED), v (lock version),
                                   ea (expires at, ms of the server's TIME), code, body
                                   PEXPIREAT ea: Redis forgets it when it expires
idem:{<scope>}:<key>:lease  string the holder's lock version; SET NX PX <lease ms>:
                                   absent = no live lease (ended by the server's clock)`

const redisClaimLua = `-- claim.lua  KEYS[1] record, KEYS[2] lease
-- ARGV[1] fingerprint, ARGV[2] lease ms, ARGV[3] retention ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function same(a, b)            -- constant time over the length
  if #a ~= #b then return false end
  local d = 0
  for i = 1, #a do d = bit.bor(d, bit.bxor(string.byte(a, i), string.byte(b, i))) end
  return d == 0
end
local f = redis.call('HMGET', KEYS[1], 'fp', 'st', 'v', 'ea', 'code', 'body')
if not f[2] or tonumber(f[4]) <= now then
  -- create if absent (an expired record is a new request, never a replay)
  local v = (tonumber(f[3]) or 0) + 1
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'st', 'PROCESSING', 'v', v, 'ea', now + ARGV[3])
  redis.call('PEXPIREAT', KEYS[1], now + ARGV[3])
  redis.call('SET', KEYS[2], v, 'PX', ARGV[2])
  return {'new', v}
end
if not same(f[1], ARGV[1]) then return {'mismatch'} end
if f[2] ~= 'PROCESSING' then return {'replay', f[2], f[5], f[6]} end
-- take over: the compare-and-swap is SET NX PX on the lease key; it only
-- succeeds once the server's clock has ended the last lease
local v = tonumber(f[3]) + 1
if redis.call('SET', KEYS[2], v, 'NX', 'PX', ARGV[2]) then
  redis.call('HSET', KEYS[1], 'v', v)
  return {'reclaimed', v}
end
return {'inprogress', redis.call('PTTL', KEYS[2])}`

const redisCompleteLua = `-- complete.lua  KEYS[1] record, KEYS[2] lease
-- ARGV[1] holder's lock version, ARGV[2] status, ARGV[3] code, ARGV[4] body, ARGV[5] retention ms
local f = redis.call('HMGET', KEYS[1], 'st', 'v')
if f[1] ~= 'PROCESSING' or tonumber(f[2]) ~= tonumber(ARGV[1]) then
  return 0                            -- fenced: the lease was lost, nothing changes
end
local t = redis.call('TIME')
local ea = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ARGV[5]
redis.call('HSET', KEYS[1], 'st', ARGV[2], 'code', ARGV[3], 'body', ARGV[4], 'ea', ea)
redis.call('PEXPIREAT', KEYS[1], ea)
redis.call('DEL', KEYS[2])
return 1
-- heartbeat: the same guard, then SET KEYS[2] ARGV[1] PX <lease ms>`

const dynamoTable = `AttributeDefinitions:    [{AttributeName: pk, AttributeType: S}]
KeySchema:               [{AttributeName: pk, KeyType: HASH}]
BillingMode:             PAY_PER_REQUEST
TimeToLiveSpecification: {AttributeName: purge, Enabled: true}

item: pk "r#<scope>#<key>", scope, key, fp, st, v (N), lu (lease end, ms), ea (expires at, ms),
      purge (N, epoch seconds: ea plus a margin), code, body (B)`

const dynamoWrites = `create if absent   PutItem     ConditionExpression: attribute_not_exists(pk)
                   ConditionalCheckFailedException: GetItem (ConsistentRead: true), then decide:
                   ea <= now: new request; fingerprint differs (constant time, in your code): refuse;
                   COMPLETED/FAILED: replay; PROCESSING with lu > now - skew: in progress
take over          UpdateItem  SET v = :seen + 1, lu = :now + :lease
                   ConditionExpression: st = :processing AND v = :seen AND lu < :now_minus_skew
record outcome     UpdateItem  SET st = :completed, code = :code, body = :body, ea = :ea, purge = :purge
                   REMOVE lu   ConditionExpression: st = :processing AND v = :mine
                   (with your own items: one TransactWriteItems, up to 100 actions)`

const mongoJS = `db.idempotency.createIndex({ purge: 1 }, { expireAfterSeconds: 0 }) // TTL index: its monitor runs about every 60 s
// _id {k, s} is the unique index on (key, scope): no other index is needed

// create if absent, or take over an ended lease: one atomic findOneAndUpdate
const before = db.idempotency.findOneAndUpdate(
  { _id: { k: key, s: scope } },
  [{ $set: { _claim: { $or: [
       { $eq: [{ $type: '$st' }, 'missing'] },                          // absent
       { $lte: ['$ea', '$$NOW'] },                                       // expired: a new request
       { $and: [{ $eq: ['$st', 'PROCESSING'] }, { $lte: ['$lu', '$$NOW'] }, { $eq: ['$fp', fp] }] } ] } } }, // lease ended
   { $set: {
       fp: { $cond: ['$_claim', fp, '$fp'] },
       st: { $cond: ['$_claim', 'PROCESSING', '$st'] },
       v:  { $cond: ['$_claim', { $add: [{ $ifNull: ['$v', 0] }, 1] }, '$v'] },
       lu: { $cond: ['$_claim', { $add: ['$$NOW', leaseMs] }, '$lu'] },
       ea: { $cond: ['$_claim', { $add: ['$$NOW', retentionMs] }, '$ea'] },
       purge: { $cond: ['$_claim', { $add: ['$$NOW', retentionMs] }, '$purge'] } } },
   { $unset: '_claim' }],
  { upsert: true, returnDocument: 'before', writeConcern: { w: 'majority', j: true } })
// before is the document as it was. null, or expired: this request created it and holds the lease.
// Otherwise compare before.fp with fp in constant time: another fp is refused (the takeover
// condition requires the same fp, so nothing changed); COMPLETED/FAILED: replay;
// PROCESSING with lu > $$NOW: in progress; with lu <= $$NOW: this request took it over (v + 1).
// E11000 from two concurrent upserts of a new _id: retry once, it finds the document.

// record the outcome, fenced by the holder's version: matchedCount 0 = lease lost
db.idempotency.updateOne(
  { _id: { k: key, s: scope }, v: mine, st: 'PROCESSING' },
  [{ $set: { st: 'COMPLETED', code: code, body: body, ea: { $add: ['$$NOW', retentionMs] },
             purge: { $add: ['$$NOW', retentionMs] } } }, { $unset: 'lu' }],
  { writeConcern: { w: 'majority', j: true } })`

// cleanupBlocks is deliverable D5 for stores other than PostgreSQL in Go.
func cleanupBlocks(d *Document) []Block {
	switch d.Store {
	case StorePostgres:
		return []Block{p("Run this every minute (cron, a scheduled job), repeating while it deletes a full batch; the partial index on expires_at keeps it cheap:"),
			code("sql", "DELETE FROM idempotency_store\nWHERE ctid IN (SELECT ctid FROM idempotency_store\n               WHERE status <> 'PROCESSING' AND expires_at < now()\n               ORDER BY expires_at LIMIT 1000);")}
	case StoreMySQL:
		return []Block{p("Run this every minute (cron, a scheduled job), repeating while it deletes a full batch (short transactions that leave room for claims):"),
			code("sql", "DELETE FROM idempotency_store\n WHERE status <> 'PROCESSING' AND expires_at < NOW(6)\n ORDER BY expires_at\n LIMIT 1000;")}
	case StoreRedis:
		return []Block{p("No job: every record carries PEXPIREAT at its expiry, and the server forgets it then (the claim script also treats a record past ea as absent). Watch memory and the eviction policy: under maxmemory with an allkeys-* policy, Redis may evict a live record, which turns a retry into a second execution; use noeviction or volatile-ttl with room to spare.")}
	case StoreDynamo:
		return []Block{p("No job for deletion: DynamoDB's TTL deletes items some time after purge passes (not at once: every read checks ea). Alarm on the table's size; a Scan-based prune is only needed for refusal tombstones.")}
	case StoreMongo:
		return []Block{p("No job: the TTL index on purge deletes documents after it passes (its monitor runs about every 60 s and may lag, so every read checks ea against $$NOW).")}
	}
	return []Block{p("Delete, in short batches, records that are not PROCESSING and whose expiry has passed by the store's clock; repeat while a batch is full; or use the store's own expiry (a TTL) where it has one, checking expiry on every read if it deletes late.")}
}
