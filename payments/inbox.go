package payments

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

// WebhookInbox reads the webhook inbox (webhook_events): every verified
// provider event payonce stored, once. (Package inbox is another thing:
// exactly-once effects for a consumer's messages.) It needs only the database, so an adapter
// whose provider has no lookup by reference (Adyen) can be given its
// notifications before any [Client] exists:
//
//	inbox := payments.NewWebhookInbox(pool)
//	ad, err := adyen.New(&adyen.Config{..., Notifications: inbox.Source("adyen")})
//	client, err := payments.New(pool, []provider.Provider{ad}, nil)
type WebhookInbox struct{ pool *pgxpool.Pool }

// NewWebhookInbox returns the webhook inbox of pool's database.
func NewWebhookInbox(pool *pgxpool.Pool) *WebhookInbox { return &WebhookInbox{pool: pool} }

// Source returns Events for one provider, as a notification source
// (adyen.Config.Notifications).
func (i *WebhookInbox) Source(provName string) func(ctx context.Context, reference string) ([]provider.WebhookEvent, error) {
	return func(ctx context.Context, reference string) ([]provider.WebhookEvent, error) {
		return i.Events(ctx, provName, reference)
	}
}

// Events returns the verified events of provider stored for a reference
// (the ProviderKey payonce sent), oldest first, as the inbox holds them.
// Body, Reference, ProviderID, ChargeID, Key, Kind, Type, DeclineCode and
// Amount are restored.
func (i *WebhookInbox) Events(ctx context.Context, provName, reference string) ([]provider.WebhookEvent, error) {
	rows, err := i.pool.Query(ctx, `SELECT event_id, event_type, kind, coalesce(reference, ''), coalesce(local_key, ''),
		coalesce(provider_id, ''), coalesce(charge_id, ''), coalesce(amount::text, ''), coalesce(currency, ''),
		coalesce(decline_code, ''), body
		FROM webhook_events WHERE provider = $1 AND reference = $2 ORDER BY received_at, event_id`, provName, reference)
	if err != nil {
		return nil, fmt.Errorf("payments: stored events: %w", err)
	}
	defer rows.Close()
	var out []provider.WebhookEvent
	for rows.Next() {
		var ev provider.WebhookEvent
		var kind, amount, currency string
		if err := rows.Scan(&ev.ID, &ev.Type, &kind, &ev.Reference, &ev.Key, &ev.ProviderID, &ev.ChargeID,
			&amount, &currency, &ev.DeclineCode, &ev.Body); err != nil {
			return nil, fmt.Errorf("payments: stored events: %w", err)
		}
		ev.Kind = provider.EventKind(kind)
		if amount != "" {
			var err error
			ev.Amount, err = money.Parse(amount, money.Currency(currency))
			if err != nil {
				return nil, fmt.Errorf("payments: stored event %s: amount: %w", ev.ID, err)
			}
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("payments: stored events: %w", err)
	}
	return out, nil
}
