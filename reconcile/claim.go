package reconcile

import (
	"context"
	"time"

	"github.com/payonce/payonce/payments"
)

// item is one intent claimed for examination.
type item struct {
	payments.Examined
	checks int
	age    time.Duration
}

// claim takes the open intents due for a check through
// payments.Operator.ClaimDue: FOR UPDATE SKIP LOCKED, so that instances
// running at once take different intents, and for Config.ClaimTTL, so
// that a crashed instance's claims lapse.
func (r *Reconciler) claim(ctx context.Context) ([]item, error) {
	claimed, err := r.client.Operator().ClaimDue(ctx, payments.ClaimRequest{Grace: r.cfg.Grace, ActionGrace: r.cfg.ActionGrace,
		Batch: r.cfg.Batch, TTL: r.cfg.ClaimTTL, Instance: r.cfg.Instance, Providers: r.client.ProviderNames()})
	if err != nil {
		return nil, err
	}
	out := make([]item, len(claimed))
	for i, c := range claimed {
		out[i] = item{Examined: c.Examined, checks: c.Checks, age: c.Age}
	}
	return out, nil
}
