package reconcile

// The reconciler's statements, one per round trip. Intents are addressed
// by (idempotency_key, user_id).

// Runs.
const (
	startRunSQL = `INSERT INTO reconcile_runs (instance) VALUES ($1) RETURNING id`

	finishRunSQL = `
UPDATE reconcile_runs
   SET finished_at = now(), examined = $2, repaired = $3, failed_with_proof = $4, needs_review = $5,
       rescheduled = $6, divergences = $7, error = $8
 WHERE id = $1`
)

// Open intents: claimed, then resolved or rescheduled.
const (
	// claimSQL claims the open intents due for a check ($1 Grace, $5
	// ActionGrace for REQUIRES_ACTION), at most $2, for $3 on behalf of
	// instance $4, of the providers $6. A refund returns its charge's
	// provider id.
	claimSQL = `
WITH due AS (
    SELECT idempotency_key, user_id FROM payment_intents
     WHERE status IN ('PENDING', 'UNKNOWN', 'REQUIRES_ACTION')
       AND updated_at < now() - $1::interval
       AND (status <> 'REQUIRES_ACTION' OR updated_at < now() - $5::interval)
       AND (reconcile_next_at IS NULL OR reconcile_next_at <= now())
       AND (reconcile_claimed_until IS NULL OR reconcile_claimed_until < now())
       AND provider = ANY($6)
     ORDER BY coalesce(reconcile_next_at, updated_at)
     LIMIT $2
     FOR UPDATE SKIP LOCKED)
UPDATE payment_intents p
   SET reconcile_claimed_until = now() + $3::interval, reconcile_claimed_by = $4
  FROM due
 WHERE p.idempotency_key = due.idempotency_key AND p.user_id = due.user_id
RETURNING p.idempotency_key, p.user_id, p.kind, p.provider, p.provider_key, coalesce(p.provider_id, ''), p.attempt,
          p.status, p.amount::text, p.currency, p.recipient, p.payment_method, coalesce(p.charge_key, ''),
          coalesce((SELECT c.provider_id FROM payment_intents c WHERE c.idempotency_key = p.charge_key AND c.user_id = p.user_id), ''),
          p.created_at, p.updated_at, p.reconcile_checks, now() - p.created_at, p.attempt_sent_at,
          p.attempt_sends, p.attempt_last_sent_at`

	// voidSentSQL counts the report rows of voids requested for an intent.
	voidSentSQL = `SELECT count(*) FROM reconcile_items WHERE scope = $1 AND intent_key = $2 AND action = $3`

	// rescheduleSQL sets the check count ($3) and the next check ($4 from
	// now), and releases the claim.
	rescheduleSQL = `
UPDATE payment_intents
   SET reconcile_checks = $3, reconcile_next_at = now() + $4::interval, reconcile_claimed_until = NULL
 WHERE idempotency_key = $1 AND user_id = $2`

	// resolvedSQL counts the check that resolved an intent and releases the
	// claim, in the transaction of the resolution.
	resolvedSQL = `
UPDATE payment_intents
   SET reconcile_checks = reconcile_checks + 1, reconcile_claimed_until = NULL
 WHERE idempotency_key = $1 AND user_id = $2`

	// releaseSQL releases the claim of an intent that was no longer open.
	releaseSQL = `UPDATE payment_intents SET reconcile_claimed_until = NULL WHERE idempotency_key = $1 AND user_id = $2`

	insertItemSQL = `
INSERT INTO reconcile_items (run_id, kind, provider, scope, intent_key, intent_kind, currency,
                             local_state, provider_state, action, detail, age)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`
)

// Succeeded charges, checked once.
const (
	// verifyClaimSQL marks verified, and returns, at most $4 charges of the
	// providers $3 that succeeded between $1 and $2 ago.
	verifyClaimSQL = `
WITH due AS (
    SELECT idempotency_key, user_id FROM payment_intents
     WHERE status = 'SUCCEEDED' AND kind = 'CHARGE' AND verified_at IS NULL
       AND updated_at BETWEEN now() - $1::interval AND now() - $2::interval AND provider = ANY($3)
     ORDER BY updated_at LIMIT $4 FOR UPDATE SKIP LOCKED)
UPDATE payment_intents p SET verified_at = now() FROM due
 WHERE p.idempotency_key = due.idempotency_key AND p.user_id = due.user_id
RETURNING p.idempotency_key, p.user_id, p.provider, p.provider_key, coalesce(p.provider_id, ''), p.amount::text, p.currency,
          p.created_at, now() - p.created_at`

	// unverifySQL leaves a charge the provider could not be asked about to
	// a later run.
	unverifySQL = `UPDATE payment_intents SET verified_at = NULL WHERE idempotency_key = $1 AND user_id = $2`

	// localRefundsSQL sums a charge's succeeded refunds and counts its open
	// ones.
	localRefundsSQL = `
SELECT coalesce(sum(amount) FILTER (WHERE status = 'SUCCEEDED'), 0)::text,
       count(*) FILTER (WHERE status IN ('PENDING', 'UNKNOWN'))
  FROM payment_intents
 WHERE kind = 'REFUND' AND charge_key = $1 AND user_id = $2`
)

// Balance drift.
const (
	// driftEndSQL is the end of the drift window: $1 (DriftLag) before the
	// database's now.
	driftEndSQL = `SELECT now() - $1::interval`

	// ledgerTotalsSQL sums per currency the postings on provider $6's cash
	// account $1 of the intents created in [$2, $3): steps $4 (charges, in)
	// and $5 (refunds, out, less the reversals of refunds that failed
	// afterwards, step $7, as providers net a failed refund out of their
	// refunded total).
	ledgerTotalsSQL = `
SELECT p.currency,
       coalesce(sum(p.amount) FILTER (WHERE e.step = $4), 0)::text,
       coalesce(-sum(p.amount) FILTER (WHERE e.step IN ($5, $7)), 0)::text
  FROM ledger_postings p
  JOIN ledger_entries e ON e.id = p.entry_id
  JOIN ledger_accounts a ON a.id = p.account_id
  JOIN payment_intents i ON i.idempotency_key = e.key
 WHERE a.code = $1 AND i.provider = $6 AND i.created_at >= $2 AND i.created_at < $3
 GROUP BY p.currency`
)

// Report-only items.
const (
	// webhookDivergencesSQL lists the divergent webhook events received
	// since the start of the last finished run other than $1.
	webhookDivergencesSQL = `
SELECT provider, event_id, event_type, kind, outcome, detail, coalesce(intent_user, ''),
       coalesce(intent_key, ''), coalesce(currency, ''), coalesce(provider_id, ''), now() - received_at
  FROM webhook_events
 WHERE outcome IN ('unmatched', 'conflict', 'second_object', 'succeeded_after_decline', 'refund_failed_after_success', 'needs_review')
   AND received_at > coalesce((SELECT max(started_at) FROM reconcile_runs WHERE finished_at IS NOT NULL AND id <> $1), '-infinity')
 ORDER BY received_at`
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
