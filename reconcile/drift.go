package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

// balanceDrift compares, per provider and currency, the money the provider
// reports it moved over the window with the ledger's entries for the
// intents created in it. Intents are created just before their provider
// object, so a charge within a moment of the window's edge can show once
// as drift of its amount; the next window agrees.
func (r *Reconciler) balanceDrift(ctx context.Context, rep *Report) error {
	r.mu.Lock()
	due := time.Since(r.lastDrift) >= r.cfg.DriftEvery
	if due {
		r.lastDrift = time.Now()
	}
	r.mu.Unlock()
	if !due {
		return nil
	}
	var to time.Time
	if err := r.pool.QueryRow(ctx, driftEndSQL, r.cfg.DriftLag).Scan(&to); err != nil {
		return err
	}
	from := to.Add(-r.cfg.DriftWindow)
	var found []Item
	for _, name := range r.client.ProviderNames() {
		t, ok := r.client.Provider(name).(provider.Totaler)
		if !ok {
			continue
		}
		theirs, err := t.Totals(ctx, from, to)
		if err != nil {
			found = append(found, Item{Kind: KindProviderUnavailable, Provider: name, Action: ActionReported,
				ProviderState: "totals unavailable", Detail: err.Error()})
			continue
		}
		ours, err := r.ledgerTotals(ctx, name, from, to)
		if err != nil {
			return err
		}
		currencies := map[money.Currency]bool{}
		for c := range theirs {
			currencies[c] = true
		}
		for c := range ours {
			currencies[c] = true
		}
		for c := range currencies {
			a, b := ours[c], theirs[c]
			if sameMoney(a.Charged, b.Charged, c) && sameMoney(a.Refunded, b.Refunded, c) {
				continue
			}
			found = append(found, Item{Kind: KindBalanceDrift, Provider: name, Currency: string(c), Action: ActionReported,
				LocalState:    "ledger: charged " + amountOf(a.Charged, c) + ", refunded " + amountOf(a.Refunded, c),
				ProviderState: "charged " + amountOf(b.Charged, c) + ", refunded " + amountOf(b.Refunded, c),
				Detail:        "over " + from.UTC().Format(time.RFC3339) + " to " + to.UTC().Format(time.RFC3339)})
		}
	}
	return r.reportAll(ctx, rep, found)
}

// ledgerTotals sums the ledger's provider-cash postings of the intents
// created in [from, to), per currency: charges in, refunds out (net of
// the reversals of refunds that failed afterwards).
func (r *Reconciler) ledgerTotals(ctx context.Context, provName string, from, to time.Time) (map[money.Currency]provider.Totals, error) {
	out, err := r.client.Operator().LedgerTotals(ctx, provName, from, to)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	return out, nil
}

func sameMoney(a, b money.Money, c money.Currency) bool {
	return amountOf(a, c) == amountOf(b, c)
}

// amountOf prints m, a missing amount as zero of c.
func amountOf(m money.Money, c money.Currency) string {
	if m.Currency() == "" {
		z, _ := money.FromMinor(0, c)
		return z.AmountString()
	}
	return m.AmountString()
}
