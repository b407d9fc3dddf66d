package stripe

import (
	"context"
	"fmt"

	stripego "github.com/stripe/stripe-go/v79"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

var _ provider.RefundLooker = (*Provider)(nil)

// LookupRefund returns the refunds Stripe holds for the refund attempt req,
// for the reconciler: those whose metadata carries req.Key under
// [MetadataKey], as [Provider.Refund] sent it. req.ProviderKey is not used:
// Stripe does not show an object's Idempotency-Key.
//
//   - With req.ProviderID (the refund's id, when an earlier answer or a
//     webhook told it), it reads that refund (GET /v1/refunds/{id}). A
//     refund that carries another key, or belongs to another PaymentIntent
//     than req.ChargeID (when set), is refused with an
//     *[provider.InvalidRequestError] naming ProviderID: the id was recorded
//     for another action. An id Stripe does not know is Stripe's 404,
//     an *[provider.InvalidRequestError] (resource_missing) as well: Stripe
//     gave that id, so the account or the mode is not the one that made it.
//   - Without it, req.ChargeID (the PaymentIntent's id) is required: it
//     lists the PaymentIntent's refunds (GET /v1/refunds with
//     payment_intent, every page) and keeps those carrying req.Key.
//
// Both reads are consistent: a refund Stripe created is listed at once, so
// an empty result is proof that no refund with the key exists for the
// PaymentIntent, and the result is always Consistent. It normally holds 0
// or 1 refund; more only if several attempts of the key (each with its own
// ProviderKey) reached Stripe. Status maps as [Provider.Refund]'s:
// succeeded; failed or canceled as failed; pending and requires_action as
// pending. Replayed is false.
//
// Errors: *[provider.InvalidRequestError] (also for requests refused before
// sending: no Key, neither ChargeID nor ProviderID), *[provider.NotSentError],
// *[provider.UnknownOutcomeError] (a read: retrying is harmless).
func (p *Provider) LookupRefund(ctx context.Context, req provider.RefundLookupRequest) (provider.RefundLookupResult, error) {
	if req.Key == "" {
		return provider.RefundLookupResult{}, invalid("Key", "is required: refunds are found by the key in their metadata")
	}
	if req.ProviderID != "" {
		return p.refundByID(ctx, req)
	}
	if req.ChargeID == "" {
		return provider.RefundLookupResult{}, invalid("ChargeID", "is required without ProviderID: the refunds are listed per PaymentIntent")
	}
	params := &stripego.RefundListParams{PaymentIntent: stripego.String(req.ChargeID)}
	params.Limit = stripego.Int64(lookupPageSize)
	var sent sentTracker
	params.Context = sent.trace(ctx)

	res := provider.RefundLookupResult{Refunds: []provider.RefundResult{}, Consistent: true}
	it := p.refunds.List(params)
	for it.Next() {
		if re := it.Refund(); re.Metadata[MetadataKey] == req.Key {
			res.Refunds = append(res.Refunds, refundResult(re))
		}
	}
	if err := it.Err(); err != nil {
		return provider.RefundLookupResult{}, classify(err, &sent)
	}
	return res, nil
}

// refundByID reads the refund req.ProviderID and checks that it is req's.
func (p *Provider) refundByID(ctx context.Context, req provider.RefundLookupRequest) (provider.RefundLookupResult, error) {
	params := &stripego.RefundParams{}
	var sent sentTracker
	params.Context = sent.trace(ctx)
	re, err := p.refunds.Get(req.ProviderID, params)
	if err != nil {
		return provider.RefundLookupResult{}, classify(err, &sent)
	}
	if got := re.Metadata[MetadataKey]; got != req.Key {
		return provider.RefundLookupResult{}, &provider.InvalidRequestError{Provider: providerName, Code: "payonce_refund_mismatch",
			Param: "ProviderID", Message: fmt.Sprintf("refund %s carries the %s of key %s, not this Key's (key %s)", re.ID, MetadataKey,
				idempotency.ShortHash(got), idempotency.ShortHash(req.Key))}
	}
	if pi := refundIntent(re); req.ChargeID != "" && pi != req.ChargeID {
		return provider.RefundLookupResult{}, &provider.InvalidRequestError{Provider: providerName, Code: "payonce_refund_mismatch",
			Param: "ProviderID", Message: fmt.Sprintf("refund %s belongs to PaymentIntent %q, not ChargeID %q", re.ID, pi, req.ChargeID)}
	}
	return provider.RefundLookupResult{Refunds: []provider.RefundResult{refundResult(re)}, Consistent: true}, nil
}

func refundIntent(re *stripego.Refund) string {
	if re.PaymentIntent == nil {
		return ""
	}
	return re.PaymentIntent.ID
}

// refundResult is a refund read back from Stripe. Its currency is the one
// payonce sent; one money does not know leaves Amount zero.
func refundResult(re *stripego.Refund) provider.RefundResult {
	return provider.RefundResult{
		ProviderID: re.ID,
		Status:     refundStatus(re.Status),
		Amount:     amountOr(re.Amount, string(re.Currency), money.Money{}),
	}
}
