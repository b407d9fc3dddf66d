package reconcile

// The reconciler's statements on its own tables (reconcile_runs,
// reconcile_items), one per round trip. Every statement on payment_intents
// lives in package payments, behind payments.Operator (issue 25).

// Runs.
const (
	startRunSQL = `INSERT INTO reconcile_runs (instance) VALUES ($1) RETURNING id`

	finishRunSQL = `
UPDATE reconcile_runs
   SET finished_at = now(), examined = $2, repaired = $3, failed_with_proof = $4, needs_review = $5,
       rescheduled = $6, divergences = $7, error = $8
 WHERE id = $1`
)

// Claimed intents (claimed, rescheduled and released by payments.Operator):
// the report rows of their checks.
const (
	// voidSentSQL counts the report rows of voids requested for an intent.
	voidSentSQL = `SELECT count(*) FROM reconcile_items WHERE scope = $1 AND intent_key = $2 AND action = $3`

	insertItemSQL = `
INSERT INTO reconcile_items (run_id, kind, provider, scope, intent_key, intent_kind, currency,
                             local_state, provider_state, action, detail, age)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`
)

// Balance drift.
const (
	// driftEndSQL is the end of the drift window: $1 (DriftLag) before the
	// database's now.
	driftEndSQL = `SELECT now() - $1::interval`
)

// Report-only items.
const (
	// lastRunStartSQL is the start of the last finished run other than
	// $1 (NULL when there is none): the webhook events received since are
	// reported (payments.Operator.DivergentEvents).
	lastRunStartSQL = `SELECT max(started_at) FROM reconcile_runs WHERE finished_at IS NOT NULL AND id <> $1`
)

// Reading reports back.
const (
	runsSQL = `
SELECT id, instance, started_at, coalesce(finished_at, started_at), examined, repaired,
       failed_with_proof, needs_review, rescheduled, coalesce(error, '')
  FROM reconcile_runs
 ORDER BY id DESC LIMIT $1`

	// itemsSQL is completed by [Items] with its filter's WHERE, the order
	// and the limit.
	itemsSQL = `
SELECT run_id, kind, provider, scope, intent_key, intent_kind, currency, local_state, provider_state, action, detail,
       coalesce(age, '0'::interval), created_at
  FROM reconcile_items`
)
