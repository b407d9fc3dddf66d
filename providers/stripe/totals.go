package stripe

import (
	"context"
	"fmt"
	"time"

	stripego "github.com/stripe/stripe-go/v79"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/adapterkit"
)

var _ provider.Totaler = (*Provider)(nil)

// Totals sums, per currency, the money Stripe's balance moved for charges
// and refunds in [from, to), from the balance transactions created in that
// window (GET /v1/balance_transactions with created[gte] and created[lt],
// every page). The reconciler compares it with the ledger.
//
// Each transaction counts by its type, at its gross amount (Stripe's fees
// are not deducted):
//
//	charge, payment                  Charged  += amount
//	refund, payment_refund           Refunded += -amount (Stripe records them negative)
//	refund_failure                   Refunded -= amount  (a failed refund gives the money back)
//	anything else                    ignored: payouts, fees, transfers, top-ups,
//	                                 adjustments (disputes), payment reversals and failures
//
// A refund that fails in a later window than the one it was made in is
// subtracted from that later window: Refunded is then negative when such
// failures outweigh the window's refunds. Both Totals of a currency are
// Money of that currency (zero when nothing moved that way); a currency
// with no charge or refund transaction is absent from the map.
//
// Stripe's created is in whole seconds: the window is [from.Unix(),
// to.Unix()) in Unix seconds (both truncated), so that consecutive windows
// sharing their bounds count every transaction exactly once. Window bounds
// on whole seconds avoid surprises.
//
// Balance transactions are in the balance's (settlement) currency: a charge
// in a currency the account does not settle in is converted by Stripe
// (exchange_rate) and counted in the settlement currency at the converted
// amount, which a ledger in the charge's currency will not match.
//
// Errors: *[provider.InvalidRequestError] naming from or to when a bound is
// zero or to is not after from (refused before sending); the errors of the
// other reads, classified alike: *[provider.InvalidRequestError] (a
// restricted key without balance read access gets 403),
// *[provider.NotSentError], *[provider.UnknownOutcomeError] (a read:
// retrying is harmless). A charge or refund transaction in a currency
// money does not know, or a sum out of range, is an
// *[provider.UnknownOutcomeError] wrapping the [money.Error]: the totals
// are unknown, never silently short.
func (p *Provider) Totals(ctx context.Context, from, to time.Time) (map[money.Currency]provider.Totals, error) {
	if err := adapterkit.RefuseWindow(providerName, from, to); err != nil {
		return nil, err
	}
	params := &stripego.BalanceTransactionListParams{
		CreatedRange: &stripego.RangeQueryParams{GreaterThanOrEqual: from.Unix(), LesserThan: to.Unix()},
	}
	params.Limit = stripego.Int64(lookupPageSize)
	var sent sentTracker
	params.Context = sent.trace(ctx)

	totals := map[money.Currency]provider.Totals{}
	it := p.balanceTransactions.List(params)
	for it.Next() {
		if err := addBalanceTransaction(totals, it.BalanceTransaction()); err != nil {
			return nil, &provider.UnknownOutcomeError{Provider: providerName, Err: err}
		}
	}
	if err := it.Err(); err != nil {
		return nil, classify(err, &sent)
	}
	return totals, nil
}

// addBalanceTransaction adds bt to totals by its type (see [Provider.Totals]).
func addBalanceTransaction(totals map[money.Currency]provider.Totals, bt *stripego.BalanceTransaction) error {
	var kind provider.Movement
	switch bt.Type {
	case stripego.BalanceTransactionTypeCharge, stripego.BalanceTransactionTypePayment:
		kind = provider.MovementCharge
	case stripego.BalanceTransactionTypeRefund, stripego.BalanceTransactionTypePaymentRefund,
		stripego.BalanceTransactionTypeRefundFailure:
		// Refunds are negative, their failures positive: Refunded -= amount for both.
		kind = provider.MovementRefund
	default:
		return nil
	}
	amount, err := FromAmount(bt.Amount, string(bt.Currency))
	if err != nil {
		return fmt.Errorf("balance transaction %s (%s): %w", bt.ID, bt.Type, err)
	}
	if err := provider.AddMovement(totals, kind, amount); err != nil {
		return fmt.Errorf("summing balance transaction %s (%s): %w", bt.ID, bt.Type, err)
	}
	return nil
}
