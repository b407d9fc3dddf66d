package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
)

// item is one intent claimed for examination.
type item struct {
	payments.Examined
	checks int
	age    time.Duration
}

// claim takes the open intents due for a check (claimSQL): FOR UPDATE SKIP
// LOCKED, so that instances running at once take different intents, and
// for Config.ClaimTTL, so that a crashed instance's claims lapse.
func (r *Reconciler) claim(ctx context.Context) ([]item, error) {
	rows, err := r.pool.Query(ctx, claimSQL, r.cfg.Grace, r.cfg.Batch, r.cfg.ClaimTTL, r.cfg.Instance, r.cfg.ActionGrace,
		r.client.ProviderNames())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []item
	for rows.Next() {
		var it item
		var status, amount, currency string
		var sentAt, lastSentAt *time.Time
		if err := rows.Scan(&it.Key, &it.Scope, &it.Kind, &it.Provider, &it.ProviderKey, &it.ProviderID, &it.Attempt,
			&status, &amount, &currency, &it.Recipient, &it.PaymentMethod, &it.ChargeKey, &it.ChargeID,
			&it.CreatedAt, &it.UpdatedAt, &it.checks, &it.age, &sentAt, &it.Sends, &lastSentAt); err != nil {
			return nil, err
		}
		if sentAt != nil {
			it.SentAt = *sentAt
		}
		if lastSentAt != nil {
			it.LastSentAt = *lastSentAt
		}
		it.Status = payments.IntentStatus(status)
		var err error
		it.Amount, err = money.Parse(amount, money.Currency(currency))
		if err != nil {
			return nil, fmt.Errorf("intent amount %s %s: %w", amount, currency, err)
		}
		out = append(out, it)
	}
	return out, rows.Err()
}
