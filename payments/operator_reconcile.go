package payments

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

// The reconciler's statements on payment_intents: every statement on the
// intents lives in this package (issue 25). Intents are addressed by
// (idempotency_key, user_id).

// ClaimRequest says which open intents [Operator.ClaimDue] claims.
type ClaimRequest struct {
	// Grace is how long an intent stays untouched before it is due;
	// ActionGrace the same for a REQUIRES_ACTION intent (both apply).
	Grace, ActionGrace time.Duration
	// Batch is the most intents claimed at once.
	Batch int
	// TTL is how long the claim holds: a crashed claimer's claims lapse.
	TTL time.Duration
	// Instance names the claimer (reconcile_claimed_by).
	Instance string
	// Providers are the providers whose intents are claimed.
	Providers []string
}

// Claimed is an intent claimed for a check.
type Claimed struct {
	Examined
	// Checks counts the checks made so far (reconcile_checks).
	Checks int
	// Age is the intent's age on the database's clock.
	Age time.Duration
}

// claimSQL claims the open intents due for a check ($1 Grace, $5
// ActionGrace for REQUIRES_ACTION), at most $2, for $3 on behalf of
// instance $4, of the providers $6. A refund returns its charge's provider
// id.
const claimSQL = `
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

// ClaimDue claims the open intents (PENDING, UNKNOWN, REQUIRES_ACTION) due
// for a check, in one statement: FOR UPDATE SKIP LOCKED, so that claimers
// running at once take different intents, and for req.TTL, so that a
// crashed claimer's claims lapse. A claim ends with
// [Operator.RescheduleTx], [Operator.CheckedTx] or [Operator.ReleaseClaim].
func (o *Operator) ClaimDue(ctx context.Context, req ClaimRequest) ([]Claimed, error) {
	rows, err := o.c.pool.Query(ctx, claimSQL, req.Grace, req.Batch, req.TTL, req.Instance, req.ActionGrace, req.Providers)
	if err != nil {
		return nil, fmt.Errorf("payments: claim due intents: %w", err)
	}
	defer rows.Close()
	var out []Claimed
	for rows.Next() {
		var it Claimed
		var status, amount, currency string
		var sentAt, lastSentAt *time.Time
		if err := rows.Scan(&it.Key, &it.Scope, &it.Kind, &it.Provider, &it.ProviderKey, &it.ProviderID, &it.Attempt,
			&status, &amount, &currency, &it.Recipient, &it.PaymentMethod, &it.ChargeKey, &it.ChargeID,
			&it.CreatedAt, &it.UpdatedAt, &it.Checks, &it.Age, &sentAt, &it.Sends, &lastSentAt); err != nil {
			return nil, fmt.Errorf("payments: claim due intents: %w", err)
		}
		if sentAt != nil {
			it.SentAt = *sentAt
		}
		if lastSentAt != nil {
			it.LastSentAt = *lastSentAt
		}
		it.Status = IntentStatus(status)
		it.Amount, err = money.Parse(amount, money.Currency(currency))
		if err != nil {
			return nil, fmt.Errorf("payments: claim due intents: intent amount %s %s: %w", amount, currency, err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("payments: claim due intents: %w", err)
	}
	return out, nil
}

// rescheduleSQL sets the check count ($3) and the next check ($4 from
// now), and releases the claim.
const rescheduleSQL = `
UPDATE payment_intents
   SET reconcile_checks = $3, reconcile_next_at = now() + $4::interval, reconcile_claimed_until = NULL
 WHERE idempotency_key = $1 AND user_id = $2`

// RescheduleTx sets, inside tx, the check count of the claimed intent
// (scope, key) to checks and its next check to delay from now, and
// releases its claim.
func (o *Operator) RescheduleTx(ctx context.Context, tx pgx.Tx, scope, key string, checks int, delay time.Duration) error {
	_, err := tx.Exec(ctx, rescheduleSQL, key, scope, checks, delay)
	return err
}

// resolvedSQL counts the check that resolved an intent and releases the
// claim.
const resolvedSQL = `
UPDATE payment_intents
   SET reconcile_checks = reconcile_checks + 1, reconcile_claimed_until = NULL
 WHERE idempotency_key = $1 AND user_id = $2`

// CheckedTx counts, inside tx, the check that resolved the claimed intent
// (scope, key) and releases its claim: from the audit callback of
// [Operator.Resolve], in the transaction of the resolution.
func (o *Operator) CheckedTx(ctx context.Context, tx pgx.Tx, scope, key string) error {
	_, err := tx.Exec(ctx, resolvedSQL, key, scope)
	return err
}

// ReleaseClaim releases the claim of the intent (scope, key), one that was
// no longer open.
func (o *Operator) ReleaseClaim(ctx context.Context, scope, key string) error {
	_, err := o.c.pool.Exec(ctx, `UPDATE payment_intents SET reconcile_claimed_until = NULL WHERE idempotency_key = $1 AND user_id = $2`,
		key, scope)
	return err
}

// VerifyRequest says which succeeded charges [Operator.ClaimUnverified]
// takes.
type VerifyRequest struct {
	// The charges that succeeded between Within and Grace ago.
	Within, Grace time.Duration
	// Providers are the providers whose charges are taken.
	Providers []string
	// Batch is the most charges taken at once.
	Batch int
}

// verifyClaimSQL marks verified, and returns, at most $4 charges of the
// providers $3 that succeeded between $1 and $2 ago.
const verifyClaimSQL = `
WITH due AS (
    SELECT idempotency_key, user_id FROM payment_intents
     WHERE status = 'SUCCEEDED' AND kind = 'CHARGE' AND verified_at IS NULL
       AND updated_at BETWEEN now() - $1::interval AND now() - $2::interval AND provider = ANY($3)
     ORDER BY updated_at LIMIT $4 FOR UPDATE SKIP LOCKED)
UPDATE payment_intents p SET verified_at = now() FROM due
 WHERE p.idempotency_key = due.idempotency_key AND p.user_id = due.user_id
RETURNING p.idempotency_key, p.user_id, p.provider, p.provider_key, coalesce(p.provider_id, ''), p.amount::text, p.currency,
          p.created_at, now() - p.created_at`

// ClaimUnverified marks verified, and returns, the succeeded charges not
// yet verified that req selects (FOR UPDATE SKIP LOCKED): each is checked
// against its provider once. A charge its provider could not be asked
// about goes back with [Operator.Unverify]. Each is returned with its
// Kind, Status, Scope, Key, Provider, ProviderKey, ProviderID, Amount,
// CreatedAt and Age.
func (o *Operator) ClaimUnverified(ctx context.Context, req VerifyRequest) ([]Claimed, error) {
	rows, err := o.c.pool.Query(ctx, verifyClaimSQL, req.Within, req.Grace, req.Providers, req.Batch)
	if err != nil {
		return nil, fmt.Errorf("payments: claim unverified charges: %w", err)
	}
	defer rows.Close()
	var out []Claimed
	for rows.Next() {
		var it Claimed
		var amount, currency string
		if err := rows.Scan(&it.Key, &it.Scope, &it.Provider, &it.ProviderKey, &it.ProviderID, &amount, &currency,
			&it.CreatedAt, &it.Age); err != nil {
			return nil, fmt.Errorf("payments: claim unverified charges: %w", err)
		}
		it.Amount, err = money.Parse(amount, money.Currency(currency))
		if err != nil {
			return nil, fmt.Errorf("payments: claim unverified charges: intent amount %s %s: %w", amount, currency, err)
		}
		it.Kind, it.Status = KindCharge, IntentSucceeded
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("payments: claim unverified charges: %w", err)
	}
	return out, nil
}

// Unverify leaves the charge (scope, key), taken by
// [Operator.ClaimUnverified] but not checked, to a later verification.
func (o *Operator) Unverify(ctx context.Context, scope, key string) error {
	_, err := o.c.pool.Exec(ctx, `UPDATE payment_intents SET verified_at = NULL WHERE idempotency_key = $1 AND user_id = $2`, key, scope)
	return err
}

// localRefundsSQL sums a charge's succeeded refunds and counts its open
// ones.
const localRefundsSQL = `
SELECT coalesce(sum(amount) FILTER (WHERE status = 'SUCCEEDED'), 0)::text,
       count(*) FILTER (WHERE status IN ('PENDING', 'UNKNOWN'))
  FROM payment_intents
 WHERE kind = 'REFUND' AND charge_key = $1 AND user_id = $2`

// RefundedLocally sums, in currency cur, the succeeded refunds recorded
// for the charge (scope, chargeKey) and counts those still open (PENDING
// or UNKNOWN).
func (o *Operator) RefundedLocally(ctx context.Context, scope, chargeKey string, cur money.Currency) (money.Money, int, error) {
	var sum string
	var open int
	if err := o.c.pool.QueryRow(ctx, localRefundsSQL, chargeKey, scope).Scan(&sum, &open); err != nil {
		return money.Money{}, 0, fmt.Errorf("payments: refunded locally: %w", err)
	}
	m, err := money.Parse(sum, cur)
	return m, open, err
}

// ledgerTotalsSQL sums per currency the postings on provider $6's cash
// account $1 of the intents created in [$2, $3): steps $4 (charges, in)
// and $5 (refunds, out, less the reversals of refunds that failed
// afterwards, step $7, as providers net a failed refund out of their
// refunded total).
const ledgerTotalsSQL = `
SELECT p.currency,
       coalesce(sum(p.amount) FILTER (WHERE e.step = $4), 0)::text,
       coalesce(-sum(p.amount) FILTER (WHERE e.step IN ($5, $7)), 0)::text
  FROM ledger_postings p
  JOIN ledger_entries e ON e.id = p.entry_id
  JOIN ledger_accounts a ON a.id = p.account_id
  JOIN payment_intents i ON i.idempotency_key = e.key
 WHERE a.code = $1 AND i.provider = $6 AND i.created_at >= $2 AND i.created_at < $3
 GROUP BY p.currency`

// LedgerTotals sums per currency the ledger's postings on provider
// provName's cash account of the intents created in [from, to): charges
// in, refunds out (net of the reversals of refunds that failed
// afterwards), as the provider's own totals count them ([provider.Totaler]).
func (o *Operator) LedgerTotals(ctx context.Context, provName string, from, to time.Time) (map[money.Currency]provider.Totals, error) {
	rows, err := o.c.pool.Query(ctx, ledgerTotalsSQL, ledger.ProviderCash(provName), from, to, ledger.StepCharge, ledger.StepRefund, provName,
		ledger.StepRefundReversal)
	if err != nil {
		return nil, fmt.Errorf("payments: ledger totals: %w", err)
	}
	defer rows.Close()
	out := map[money.Currency]provider.Totals{}
	for rows.Next() {
		var code, charged, refunded string
		if err := rows.Scan(&code, &charged, &refunded); err != nil {
			return nil, fmt.Errorf("payments: ledger totals: %w", err)
		}
		cur, err := money.ParseCurrency(code)
		if err != nil {
			return nil, fmt.Errorf("payments: ledger totals: %w", err)
		}
		var t provider.Totals
		if t.Charged, err = money.Parse(charged, cur); err != nil {
			return nil, fmt.Errorf("payments: ledger totals: %w", err)
		}
		if t.Refunded, err = money.Parse(refunded, cur); err != nil {
			return nil, fmt.Errorf("payments: ledger totals: %w", err)
		}
		out[cur] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("payments: ledger totals: %w", err)
	}
	return out, nil
}

// DivergentEvent is a stored webhook event whose outcome an operator must
// see (see [Operator.DivergentEvents]).
type DivergentEvent struct {
	Provider, EventID, EventType string
	Kind                         provider.EventKind
	// Outcome is the receiver's outcome: EventConflict, EventSecondObject,
	// EventSucceededAfterDecline, EventRefundFailedAfterSuccess,
	// EventNeedsReview or "unmatched".
	Outcome, Detail string
	// Scope and IntentKey name the intent the event matched ("" for none).
	Scope, IntentKey string
	Currency         string
	ProviderID       string
	// Age is the time since the event was received (the database's clock).
	Age time.Duration
}

// divergentEventsSQL lists the divergent webhook events received after $1
// (NULL: all of them).
const divergentEventsSQL = `
SELECT provider, event_id, event_type, kind, outcome, detail, coalesce(intent_user, ''),
       coalesce(intent_key, ''), coalesce(currency, ''), coalesce(provider_id, ''), now() - received_at
  FROM webhook_events
 WHERE outcome IN ('unmatched', 'conflict', 'second_object', 'succeeded_after_decline', 'refund_failed_after_success', 'needs_review')
   AND received_at > coalesce($1::timestamptz, '-infinity')
 ORDER BY received_at`

// DivergentEvents lists, oldest first, the stored webhook events received
// after since (the zero time: all) that named no local intent,
// contradicted a final one, announced a second provider object for one,
// or overturned a final one.
func (o *Operator) DivergentEvents(ctx context.Context, since time.Time) ([]DivergentEvent, error) {
	return DivergentEvents(ctx, o.c.pool, since)
}

// DivergentEvents is [Operator.DivergentEvents] on pool without a
// [Client]: it needs no provider, so that an operator without provider
// credentials (the reconciler with a nil client) still reads them.
func DivergentEvents(ctx context.Context, pool *pgxpool.Pool, since time.Time) ([]DivergentEvent, error) {
	var after *time.Time
	if !since.IsZero() {
		after = &since
	}
	rows, err := pool.Query(ctx, divergentEventsSQL, after)
	if err != nil {
		return nil, fmt.Errorf("payments: divergent events: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DivergentEvent, error) {
		var e DivergentEvent
		err := row.Scan(&e.Provider, &e.EventID, &e.EventType, &e.Kind, &e.Outcome, &e.Detail, &e.Scope, &e.IntentKey,
			&e.Currency, &e.ProviderID, &e.Age)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("payments: divergent events: %w", err)
	}
	return out, nil
}
