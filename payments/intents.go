package payments

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// What operators read and note on intents (payonce stuck, release,
// resolve, the demo), apart from the settling calls of resolve.go.

// IntentRef names an intent as its idempotency record does: payonce's key
// ("<scope>_charge_<client key>") and its scope.
type IntentRef struct{ Scope, Key string }

// IntentSummary is an intent's provider, status and attempt: what an
// operator is shown beside its idempotency record.
type IntentSummary struct {
	Provider string
	Status   IntentStatus
	// Attempt numbers the provider references in use (0: the first).
	Attempt int
}

// intentSummariesSQL reads the intents of ($1[i], $2[i]) pairs of scope and
// key, by primary key.
const intentSummariesSQL = `SELECT i.user_id, i.idempotency_key, i.provider, i.status, i.attempt
  FROM payment_intents i
  JOIN unnest($1::text[], $2::text[]) AS r(user_id, idempotency_key)
    ON i.user_id = r.user_id AND i.idempotency_key = r.idempotency_key`

// IntentSummaries reads the intents of refs on pool's database, in one
// round trip, without a [Client] (no provider is needed). A ref without an
// intent (an action that is not a payment) is absent from the map.
func IntentSummaries(ctx context.Context, pool *pgxpool.Pool, refs ...IntentRef) (map[IntentRef]IntentSummary, error) {
	out := make(map[IntentRef]IntentSummary, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	scopes, keys := make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		scopes[i], keys[i] = r.Scope, r.Key
	}
	rows, err := pool.Query(ctx, intentSummariesSQL, scopes, keys)
	if err != nil {
		return nil, fmt.Errorf("payments: intent summaries: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			ref IntentRef
			s   IntentSummary
		)
		if err := rows.Scan(&ref.Scope, &ref.Key, &s.Provider, &s.Status, &s.Attempt); err != nil {
			return nil, fmt.Errorf("payments: intent summaries: %w", err)
		}
		out[ref] = s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("payments: intent summaries: %w", err)
	}
	return out, nil
}

// CountIntents counts the intents, of every scope, whose status is one of
// statuses: for instance those still open, PENDING or UNKNOWN.
func (o *Operator) CountIntents(ctx context.Context, statuses ...IntentStatus) (int, error) {
	names := make([]string, len(statuses))
	for i, s := range statuses {
		names[i] = string(s)
	}
	var n int
	if err := o.c.pool.QueryRow(ctx, `SELECT count(*) FROM payment_intents WHERE status = ANY($1)`, names).Scan(&n); err != nil {
		return 0, fmt.Errorf("payments: count intents: %w", err)
	}
	return n, nil
}

// NoteReviewTx appends note to the review reason of the intent (scope,
// key) inside tx, after a "; ": from the audit callback of
// [Operator.ResolveReview], so that the intent itself says who settled it
// and why, committed with the decision. An intent without a review reason
// keeps none.
func (o *Operator) NoteReviewTx(ctx context.Context, tx pgx.Tx, scope, key, note string) error {
	_, err := tx.Exec(ctx, `UPDATE payment_intents SET review_reason = review_reason || '; ' || $3
		WHERE idempotency_key = $1 AND user_id = $2`, key, scope, note)
	return err
}
