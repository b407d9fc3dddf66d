package stripe

import (
	"context"

	"github.com/payonce/payonce/payments/provider"
)

// RefundsOf runs the refund list of a Lookup WithRefunds for one charge,
// for tests that cannot make Lookup find a charge first (stripe-mock's
// canned PaymentIntents carry no payonce key).
func (p *Provider) RefundsOf(ctx context.Context, ch provider.ChargeResult) (provider.ChargeResult, error) {
	err := p.addRefunds(ctx, &ch)
	return ch, err
}
