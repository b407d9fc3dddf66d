package reconcile

import (
	"context"
	"fmt"

	"github.com/payonce/payonce/payments"

	"github.com/payonce/payonce/payments/provider"
)

// examineRefund asks providers that can look a refund up
// (provider.RefundLooker) what exists for the attempt; others report
// refund outcomes only by notification: the intent waits for it, then goes
// to review.
func (r *Reconciler) examineRefund(ctx context.Context, rep *Report, it item) error {
	base := Item{Kind: KindRefundOutcomeMissing, LocalState: string(it.Status)}
	rl, ok := r.client.Provider(it.Provider).(provider.RefundLooker)
	if !ok {
		base.ProviderState = "no refund lookup; no notification yet"
		return r.inconclusive(ctx, rep, it, base, "the refund's outcome never arrived")
	}
	lctx, span := r.startProvider(ctx, "refund_lookup", it)
	res, err := rl.LookupRefund(lctx, provider.RefundLookupRequest{Key: it.Key, ProviderKey: it.ProviderKey,
		ProviderID: it.ProviderID, ChargeID: it.ChargeID})
	endProvider(span, len(res.Refunds), err)
	if err != nil {
		return r.lookupFailed(ctx, rep, it, err, "refund lookup", "the refund")
	}
	switch {
	case len(res.Refunds) > 1:
		ids := idsOf(res.Refunds, refundIDStatus)
		base.Kind, base.ProviderState = KindDuplicateAtProvider, ids
		return r.review(ctx, rep, it, base, fmt.Sprintf("%d refunds at %s for one attempt: %s", len(res.Refunds), it.Provider, ids))
	case len(res.Refunds) == 1:
		rf := res.Refunds[0]
		base.ProviderState = string(rf.Status) + " " + rf.ProviderID
		if rf.Amount.Currency() != "" && !rf.Amount.Equal(it.Amount) {
			base.Kind = KindAmountDiffers
			return r.review(ctx, rep, it, base, "the provider refunded "+rf.Amount.AmountString()+", the intent is "+it.Amount.AmountString())
		}
		if proof, ok := payments.ProofOfRefund(rf); ok {
			return r.settle(ctx, rep, it, base, proof)
		}
		return r.inconclusive(ctx, rep, it, base, "the refund is still pending at the provider")
	case res.Consistent:
		base.Kind, base.ProviderState, base.Action = KindPendingMissingAtProvider, "none (consistent lookup)", ActionFailedWithProof
		return r.resolve(ctx, rep, it, base, payments.Proof{Status: payments.IntentFailed,
			Reason: "a consistent lookup found no refund for this attempt"})
	default:
		base.ProviderState = "none yet (eventually consistent)"
		return r.inconclusive(ctx, rep, it, base, "the refund's outcome never arrived")
	}
}

func refundIDStatus(rf provider.RefundResult) (id, status string) {
	return rf.ProviderID, string(rf.Status)
}
