package design

import (
	"fmt"
	"strings"
	"time"
)

// Operations for stacks that do not run payonce's Go packages: the
// metrics their own middleware emits, the alert rules on those metrics
// (deliverable D7) and a runbook whose commands run on their own store
// (D9). payonce's instruments, rule files and CLI are for Go stacks only:
// a Django or Express team cannot run `payonce stuck`, and payonce's
// series do not exist in their Prometheus.

// stackMetric is one metric a non-Go stack's middleware, consumer guard or
// cleanup job emits, in Prometheus naming.
type stackMetric struct {
	Name, Type, Labels, Where string
}

// hasConsumers reports whether an action is fed by a broker.
func hasConsumers(d *Document) bool {
	for _, x := range d.Actions {
		if x.Kind == "consumer" {
			return true
		}
	}
	return false
}

// hasOutbound reports whether an action sends an outbound effect through
// an outbox.
func hasOutbound(d *Document) bool {
	for _, x := range d.Actions {
		if len(x.Outbound) > 0 {
			return true
		}
	}
	return false
}

// storeHasCleanupJob reports whether D5 is a job the team runs (SQL
// stores, or a store the document does not know) rather than the store's
// own expiry (Redis PEXPIREAT, DynamoDB TTL, MongoDB TTL index).
func storeHasCleanupJob(kind string) bool {
	switch kind {
	case StoreRedis, StoreDynamo, StoreMongo:
		return false
	}
	return true
}

// stackMetrics is the list of section 10 for a stack without payonce.
func stackMetrics(d *Document) []stackMetric {
	m := []stackMetric{
		{"idempotency_requests_total", "counter", "action, outcome=executed|replayed|in_progress|mismatch|store_error",
			"D3, once per request, where the middleware decides (a takeover counts as executed)"},
		{"idempotency_takeovers_total", "counter", "action",
			"D3, when a claim takes over a lease that ended (its holder crashed or stalled)"},
		{"idempotency_fenced_completions_total", "counter", "action",
			"D3, when recording the outcome changes nothing because the lock version moved on (a holder outlived its lease)"},
		{"idempotency_oldest_processing_seconds", "gauge", "",
			"D5 (or a one-minute job), the age of the oldest PROCESSING record whose lease has ended"},
	}
	if storeHasCleanupJob(d.Store) {
		m = append(m, stackMetric{"idempotency_cleanup_last_success_timestamp_seconds", "gauge", "",
			"D5, the Unix time of the last pass that finished"})
	}
	if hasConsumers(d) {
		m = append(m, stackMetric{"idempotency_messages_total", "counter", "consumer, outcome=handled|duplicate|failed",
			"the consumer guard of D3, once per delivery"})
	}
	if hasOutbound(d) {
		m = append(m, stackMetric{"idempotency_outbox_pending", "gauge", "",
			"the outbox relay, rows not yet delivered"})
	}
	if len(d.Providers) > 0 {
		m = append(m, stackMetric{"idempotency_provider_unknown_total", "counter", "provider",
			"D3, when a provider call's answer is lost (timeout, reset, 5xx): the outcome is unknown until the lookup of section 6 settles it"})
	}
	return m
}

// stackAlert is one alert rule on stackMetrics.
type stackAlert struct {
	Name, Expr, For, Severity, Summary string
}

// stackAlerts derives the alert rules from the plan: the thresholds follow
// the actions' lock timeouts.
func stackAlerts(d *Document) []stackAlert {
	stuck := 2 * maxLease(d)
	a := []stackAlert{
		{"IdempotencyStoreErrors", `sum(rate(idempotency_requests_total{outcome="store_error"}[5m])) > 0`, "5m", "critical",
			"The idempotency store refuses or times out: protected requests fail closed (503) until it answers."},
		{"IdempotencyFencedCompletion", `sum by (action) (increase(idempotency_fenced_completions_total[15m])) > 0`, "0m", "critical",
			"A holder finished after its lease ended and another took the key over: the action may have run twice. Raise its lock timeout above its real p99 (C3) and check the effect for a duplicate."},
		{"IdempotencyTakeoversSustained", `sum by (action) (increase(idempotency_takeovers_total[15m])) > 3`, "15m", "warning",
			"Holders keep dying or stalling mid-action: crashes, OOM kills or deploys without draining."},
		{"IdempotencyStuckProcessing", fmt.Sprintf(`max(idempotency_oldest_processing_seconds) > %d`, int(stuck.Seconds())), "10m", "warning",
			fmt.Sprintf("A PROCESSING record is %s past its lease and no retry took it over: the client gave up; settle it with the runbook (D9).", human(stuck))},
		{"IdempotencyMismatchSpike", `sum(rate(idempotency_requests_total{outcome="mismatch"}[15m])) / clamp_min(sum(rate(idempotency_requests_total[15m])), 1e-9) > 0.01`, "15m", "warning",
			"More than 1% of requests reuse a key with other significant fields: a client generates keys wrongly (C1, C2)."},
	}
	if storeHasCleanupJob(d.Store) {
		a = append(a, stackAlert{"IdempotencyCleanupLate", `time() - max(idempotency_cleanup_last_success_timestamp_seconds) > 3600`, "10m", "warning",
			"The cleanup job (D5) has not finished a pass for an hour: the table grows and claims slow down."})
	}
	if hasConsumers(d) {
		a = append(a, stackAlert{"IdempotencyRedeliveryStorm", `sum by (consumer) (rate(idempotency_messages_total{outcome="duplicate"}[15m])) / clamp_min(sum by (consumer) (rate(idempotency_messages_total[15m])), 1e-9) > 0.2`, "30m", "warning",
			"More than 20% of deliveries are duplicates: the broker redelivers (acks lost, a visibility timeout shorter than the handler)."})
	}
	if hasOutbound(d) {
		a = append(a, stackAlert{"IdempotencyOutboxBacklog", `max(idempotency_outbox_pending) > 1000`, "15m", "warning",
			"Outbound effects are not being delivered: the relay is down or the receiver refuses."})
	}
	if len(d.Providers) > 0 {
		a = append(a, stackAlert{"IdempotencyProviderUnknown", `sum by (provider) (increase(idempotency_provider_unknown_total[15m])) > 5`, "0m", "warning",
			"Provider answers are being lost: each unknown outcome must be settled by a lookup at the provider (section 6), never by a new reference."})
	}
	return a
}

// stackRules is D7 for a stack without payonce: a Prometheus rule file
// on stackMetrics (checked by promtool in the design package's tests).
func stackRules(d *Document) string {
	var b strings.Builder
	b.WriteString("# Prometheus alert rules for the idempotency layer of " + orDash(d.Answers.Service) + ".\n")
	b.WriteString("# The series are the ones section 10 lists, emitted by D3, D5 and the consumer guard.\n")
	b.WriteString("groups:\n  - name: idempotency\n    rules:\n")
	for _, a := range stackAlerts(d) {
		fmt.Fprintf(&b, "      - alert: %s\n        expr: %s\n", a.Name, yamlQuote(a.Expr))
		if a.For != "0m" {
			fmt.Fprintf(&b, "        for: %s\n", a.For)
		}
		fmt.Fprintf(&b, "        labels:\n          severity: %s\n        annotations:\n          summary: %s\n", a.Severity, yamlQuote(a.Summary))
	}
	return b.String()
}

// yamlQuote writes s as a YAML double-quoted scalar.
func yamlQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}

// stackRunbook is D9 for a stack without payonce: each symptom, its alert,
// and the first command on the user's own store.
func stackRunbook(d *Document) [][]string {
	c := storeCommands(d.Store, maxLease(d))
	rows := [][]string{
		{"records stuck PROCESSING", "IdempotencyStuckProcessing", c.stuck,
			"A retry takes the key over by itself once the lease ends; a record still there belongs to a client that gave up. Check the effect (did it happen?), then release it (below) so the next retry runs, or leave it to expire."},
		{"a key to free at once (an incident)", "-", c.release,
			"The release moves the lock version on, so a holder still running is fenced: its outcome changes nothing. Never delete a PROCESSING record: that erases the proof that an effect may have happened."},
		{"a holder outlived its lease", "IdempotencyFencedCompletion", c.stuck,
			"Check the action's effect for a duplicate; raise its lock timeout above its real p99 (C3)."},
		{"store errors", "IdempotencyStoreErrors", c.health,
			"Requests fail closed (503): nothing runs without a claim. Restore the store; clients retry with the same keys."},
		{"clients reusing keys", "IdempotencyMismatchSpike", "find the client in the access log by the key's hash prefix",
			"A client generates keys per attempt or reuses one across operations (C1, C2): fix the client; the 409s protect you meanwhile."},
	}
	if storeHasCleanupJob(d.Store) {
		rows = append(rows, []string{"table growing, cleanup late", "IdempotencyCleanupLate", "run D5 by hand, repeating while it deletes a full batch",
			"Then find why the job stopped (scheduler, permissions, a long lock)."})
	}
	if hasConsumers(d) {
		rows = append(rows, []string{"poison messages, redelivery storm", "IdempotencyRedeliveryStorm", "the broker's dead-letter queue and the consumer's logs",
			"A message that fails every time goes to the dead-letter queue after a bounded number of deliveries; duplicates are absorbed by the guard."})
	}
	if len(d.Providers) > 0 {
		rows = append(rows, []string{"payment outcome unknown", "IdempotencyProviderUnknown", "look the attempt up at the provider by its reference (section 6)",
			"Settle the local record from the provider's answer; never mark an unknown payment failed, and never retry it under a new reference."})
	}
	return rows
}

type storeCmds struct{ stuck, release, health string }

func storeCommands(kind string, lease time.Duration) storeCmds {
	switch kind {
	case StorePostgres:
		return storeCmds{
			stuck:   "SELECT idempotency_key, user_id, lock_version, locked_until FROM idempotency_store WHERE status = 'PROCESSING' AND locked_until < now() - interval '10 minutes' ORDER BY locked_until LIMIT 50;",
			release: "UPDATE idempotency_store SET lock_version = lock_version + 1, locked_until = now() WHERE idempotency_key = $1 AND user_id = $2 AND status NOT IN ('COMPLETED', 'FAILED') AND lock_version = $3; -- the version you read",
			health:  "psql -c 'SELECT 1'; SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock';",
		}
	case StoreMySQL:
		return storeCmds{
			stuck:   "SELECT idempotency_key, user_id, lock_version, locked_until FROM idempotency_store WHERE status = 'PROCESSING' AND locked_until < NOW(6) - INTERVAL 10 MINUTE ORDER BY locked_until LIMIT 50;",
			release: "UPDATE idempotency_store SET lock_version = lock_version + 1, locked_until = NOW(6) WHERE idempotency_key = ? AND user_id = ? AND status = 'PROCESSING' AND lock_version = ?; -- the version you read",
			health:  "mysqladmin ping; SHOW ENGINE INNODB STATUS (lock waits);",
		}
	case StoreRedis:
		return storeCmds{
			stuck:   "redis-cli --scan --pattern 'idem:{*}:*' then HGETALL on each record whose st is PROCESSING and whose :lease key is gone (PTTL -2)",
			release: "redis-cli DEL 'idem:{<scope>}:<key>:lease' -- the next claim takes over with the version + 1, which fences the old holder",
			health:  "redis-cli PING; redis-cli INFO persistence; redis-cli INFO memory (evictions must stay 0)",
		}
	case StoreDynamo:
		return storeCmds{
			stuck:   "aws dynamodb scan --table-name <table> --filter-expression 'st = :p AND lu < :t' --expression-attribute-values '{\":p\":{\"S\":\"PROCESSING\"},\":t\":{\"N\":\"<now ms - 600000>\"}}'",
			release: "aws dynamodb update-item --table-name <table> --key '{\"pk\":{\"S\":\"r#<scope>#<key>\"}}' --update-expression 'SET lu = :zero, v = v + :one' --condition-expression 'st = :p AND v = :seen' (values: 0, 1, PROCESSING, the version you read)",
			health:  "the table's ThrottledRequests and SystemErrors in CloudWatch",
		}
	case StoreMongo:
		return storeCmds{
			stuck:   "db.idempotency.find({ st: 'PROCESSING', lu: { $lt: new Date(Date.now() - 600000) } }).limit(50)",
			release: "db.idempotency.updateOne({ _id: { k: key, s: scope }, st: 'PROCESSING', v: seen }, { $set: { lu: new Date(0) }, $inc: { v: 1 } })",
			health:  "db.adminCommand({ ping: 1 }); rs.status() (a primary, majority reachable)",
		}
	}
	return storeCmds{
		stuck:   fmt.Sprintf("list the records with status PROCESSING whose lease ended more than 10 minutes ago (lease %s)", human(lease)),
		release: "move the record's lock version on and end its lease, conditioned on the version you read (never delete it)",
		health:  "your store's own health check",
	}
}
