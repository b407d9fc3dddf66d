package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
)

// verifySucceeded checks, once each, that charges that succeeded locally
// exist at the provider with their amount and refunded total. A
// divergence is reported (the intent is final: a human decides); an
// unreachable provider leaves the charge to a later run.
func (r *Reconciler) verifySucceeded(ctx context.Context, rep *Report) error {
	claimed, err := r.client.Operator().ClaimUnverified(ctx, payments.VerifyRequest{Within: r.cfg.VerifyWithin, Grace: r.cfg.Grace,
		Providers: r.client.ProviderNames(), Batch: r.cfg.VerifyBatch})
	if err != nil {
		return fmt.Errorf("reconcile: verify: %w", err)
	}
	due := make([]item, len(claimed))
	for i, c := range claimed {
		due[i] = item{Examined: c.Examined, checks: c.Checks, age: c.Age}
	}
	var found []Item
	for _, it := range due {
		lctx, span := r.startProvider(ctx, "verify_lookup", item{Examined: payments.Examined{Scope: it.Scope, Key: it.Key,
			Provider: it.Provider, ProviderKey: it.ProviderKey}})
		res, err := r.client.Provider(it.Provider).Lookup(lctx, provider.LookupRequest{Key: it.Key, ProviderKey: it.ProviderKey,
			ProviderID: it.ProviderID, From: it.CreatedAt.Add(-10 * time.Minute), To: time.Now().Add(5 * time.Minute), WithRefunds: true})
		endProvider(span, len(res.Charges), err)
		if err != nil {
			if uerr := r.client.Operator().Unverify(ctx, it.Scope, it.Key); uerr != nil {
				return uerr
			}
			continue
		}
		x, diverges, err := r.verify(ctx, it, res)
		if err != nil {
			return err
		}
		if diverges {
			found = append(found, x)
		}
	}
	return r.reportAll(ctx, rep, found)
}

// verify compares a succeeded charge with what its provider's lookup
// found, and describes the divergence if there is one.
func (r *Reconciler) verify(ctx context.Context, it item, res provider.LookupResult) (x Item, diverges bool, err error) {
	x = Item{Provider: it.Provider, Scope: it.Scope, IntentKey: it.Key, IntentKind: it.Kind, Currency: string(it.Amount.Currency()),
		LocalState: "SUCCEEDED " + it.ProviderID + " " + it.Amount.AmountString(), Action: ActionReported, Age: it.age}
	var match *provider.ChargeResult
	for i := range res.Charges {
		if res.Charges[i].ProviderID == it.ProviderID || match == nil {
			match = &res.Charges[i]
		}
	}
	switch {
	case len(res.Charges) > 1:
		x.Kind, x.ProviderState = KindDuplicateAtProvider, idsOf(res.Charges, chargeIDStatus)
		x.Detail = fmt.Sprintf("%d charges at %s for one intent settled with %s: the customer may have paid more than once",
			len(res.Charges), it.Provider, it.ProviderID)
	case match == nil && res.Consistent:
		x.Kind, x.ProviderState = KindSucceededMissingAtProvider, "none (consistent lookup)"
		x.Detail = "payonce recorded a charge the provider does not have: the ledger counts money that never moved"
	case match == nil:
		return x, false, nil // an eventually consistent "none" proves nothing
	case match.Status == provider.ChargeFailed:
		x.Kind, x.ProviderState = KindSucceededFailedAtProvider, string(match.Status)+" "+match.ProviderID
		x.Detail = "the provider reports the charge failed; the ledger counts it"
	case match.Amount.Currency() != "" && !match.Amount.Equal(it.Amount):
		x.Kind, x.ProviderState = KindAmountDiffers, string(match.Status)+" "+match.ProviderID+" "+match.Amount.AmountString()+" "+string(match.Amount.Currency())
		x.Detail = "the provider charged " + match.Amount.AmountString() + ", payonce recorded " + it.Amount.AmountString()
	case match.RefundsKnown:
		local, open, err := r.localRefunds(ctx, it)
		if err != nil {
			return x, false, err
		}
		if open > 0 || local.Equal(match.Refunded) || (local.IsZero() && match.Refunded.IsZero()) {
			return x, false, nil // as recorded, or refunds still settling (they reset the check)
		}
		x.Kind, x.ProviderState = KindRefundTotalsDiffer, "refunded "+match.Refunded.AmountString()+" of "+match.ProviderID
		x.LocalState = "SUCCEEDED, refunded " + local.AmountString()
		x.Detail = "the provider refunded " + match.Refunded.AmountString() + ", payonce recorded " + local.AmountString() +
			" (a refund made outside payonce, or one payonce recorded that the provider lacks)"
	default:
		return x, false, nil // as recorded
	}
	return x, true, nil
}

// localRefunds sums the succeeded refunds payonce recorded for a charge and
// counts those still open.
func (r *Reconciler) localRefunds(ctx context.Context, it item) (money.Money, int, error) {
	return r.client.Operator().RefundedLocally(ctx, it.Scope, it.Key, it.Amount.Currency())
}
