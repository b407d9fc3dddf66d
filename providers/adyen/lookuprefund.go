package adyen

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments/provider"
)

var _ provider.RefundLooker = (*Provider)(nil)

// LookupRefund tells what Adyen made of the refund attempt req from its notifications
// (Config.Notifications): Adyen has no read of a refund. A REFUND notification carries the
// refund's own reference (req.ProviderKey, as [Provider.Refund] sent it) as merchantReference,
// the refund's pspReference, and the payment's pspReference as originalReference.
//
// It returns one refund per refund pspReference with a REFUND or REFUND_FAILED notification
// under req.ProviderKey: REFUND success true is [provider.RefundSucceeded]; REFUND success false
// (refused: more than what is left, a cancelled payment), REFUND_FAILED (the refund failed
// after Adyen had accepted it) and REFUNDED_REVERSED (the refunded amount came back) are
// [provider.RefundFailed], whatever else came (a failure is
// never undone by a duplicate or a late success). Amount is the notification's. When set,
// req.ChargeID keeps only the notifications whose originalReference is it, and req.ProviderID
// only the refund with that pspReference. req.Key is not used. Replayed is false.
//
// Notifications may still be on their way, so the result is never Consistent: no refund found
// is no proof that the refund was not made; within the dedup window, resending the refund with
// the same reference (and so the same Idempotency-Key) is the way to learn its pspReference.
//
// Errors: [ErrNoNotificationSource]; *[provider.InvalidRequestError] without ProviderKey or with
// one over 80 characters; the source's error, wrapped.
func (p *Provider) LookupRefund(ctx context.Context, req provider.RefundLookupRequest) (provider.RefundLookupResult, error) {
	if p.cfg.Notifications == nil {
		return provider.RefundLookupResult{}, ErrNoNotificationSource
	}
	switch n := utf8.RuneCountInString(req.ProviderKey); {
	case n == 0:
		return provider.RefundLookupResult{}, invalid("ProviderKey", "is required: Adyen's notifications are found by the refund's reference")
	case n > MaxReferenceLen:
		return provider.RefundLookupResult{}, invalid("ProviderKey", fmt.Sprintf("is %d characters, Adyen's reference allows %d", n, MaxReferenceLen))
	}
	events, err := p.cfg.Notifications(ctx, req.ProviderKey)
	if err != nil {
		return provider.RefundLookupResult{}, fmt.Errorf("adyen: notifications of this reference (key %s): %w", idempotency.ShortHash(req.ProviderKey), err)
	}
	res := provider.RefundLookupResult{Refunds: []provider.RefundResult{}}
	index := map[string]int{}
	for _, ev := range events {
		if (ev.Type != "REFUND" && ev.Type != "REFUND_FAILED" && ev.Type != "REFUNDED_REVERSED") || ev.Reference != req.ProviderKey ||
			(req.ChargeID != "" && ev.ChargeID != req.ChargeID) || (req.ProviderID != "" && ev.ProviderID != req.ProviderID) {
			continue
		}
		st := provider.RefundFailed
		if ev.Kind == provider.EventRefundSucceeded {
			st = provider.RefundSucceeded
		}
		i, seen := index[ev.ProviderID]
		if !seen {
			index[ev.ProviderID] = len(res.Refunds)
			res.Refunds = append(res.Refunds, provider.RefundResult{ProviderID: ev.ProviderID, Status: st, Amount: ev.Amount})
			continue
		}
		r := &res.Refunds[i]
		if st == provider.RefundFailed {
			r.Status = st
		}
		if r.Amount.Currency() == "" {
			r.Amount = ev.Amount
		}
	}
	return res, nil
}
