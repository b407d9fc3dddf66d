package paypal

import (
	"context"
	"fmt"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments/provider"
)

var _ provider.RefundLooker = (*Provider)(nil)

// LookupRefund returns the refunds PayPal holds for the refund attempt req, for the reconciler:
// those whose custom_id is req.ProviderKey, as [Provider.Refund] sent it. req.Key is not used
// (PayPal refunds carry no metadata).
//
//   - With req.ProviderID (the refund's id, when an earlier answer or a webhook told it), it
//     reads that refund (GET /v2/payments/refunds/{id}). A refund carrying another custom_id is
//     a *[provider.KeyMismatchError]: the id was recorded for another action. An id PayPal does
//     not know is PayPal's 404, an *[provider.InvalidRequestError]: PayPal gave that id, so the
//     account is not the one that made it.
//   - Without it, req.ChargeID (the order id, a Charge's ProviderID) is required: it reads the
//     order (GET /v2/checkout/orders/{id}), whose purchase_units[].payments.refunds list every
//     refund of its capture, and keeps those whose custom_id is req.ProviderKey. A refund
//     listed without custom_id (a representation that leaves it out) is read by its id to
//     tell.
//
// Both reads are consistent, so the result is always Consistent: an empty one proves that no
// refund was made with the ProviderKey. It normally holds 0 or 1 refund. COMPLETED is
// [provider.RefundSucceeded]; FAILED and CANCELLED [provider.RefundFailed]; PENDING, and
// statuses this adapter does not know, [provider.RefundPending]. Replayed is false.
//
// Errors: *[provider.InvalidRequestError] (also for requests refused before sending: no
// ProviderKey, neither ChargeID nor ProviderID, an id that is not a PayPal id; and for an
// unknown order), *[provider.KeyMismatchError], *[provider.NotSentError],
// *[provider.UnknownOutcomeError] (a read: retrying is harmless; also for a refund whose amount
// cannot be read).
func (p *Provider) LookupRefund(ctx context.Context, req provider.RefundLookupRequest) (provider.RefundLookupResult, error) {
	switch {
	case req.ProviderKey == "":
		return provider.RefundLookupResult{}, invalid("ProviderKey", "is required: PayPal's refunds are found by their custom_id")
	case len(req.ProviderKey) > MaxProviderKeyLen:
		return provider.RefundLookupResult{}, invalid("ProviderKey", fmt.Sprintf("is %d bytes, custom_id allows %d", len(req.ProviderKey), MaxProviderKeyLen))
	}
	res := provider.RefundLookupResult{Refunds: []provider.RefundResult{}, Consistent: true}
	if req.ProviderID != "" {
		if err := checkID("ProviderID", req.ProviderID); err != nil {
			return provider.RefundLookupResult{}, err
		}
		re, err := p.c.GetRefund(ctx, req.ProviderID)
		if err != nil {
			return provider.RefundLookupResult{}, classify(err)
		}
		if re.CustomID != req.ProviderKey {
			return provider.RefundLookupResult{}, &provider.KeyMismatchError{Provider: providerName,
				Message: fmt.Sprintf("refund %s carries the custom_id of key %s, not this ProviderKey's (key %s)", re.ID,
					idempotency.ShortHash(re.CustomID), idempotency.ShortHash(req.ProviderKey))}
		}
		r, err := refundResult(re)
		if err != nil {
			return provider.RefundLookupResult{}, err
		}
		res.Refunds = append(res.Refunds, r)
		return res, nil
	}

	if req.ChargeID == "" {
		return provider.RefundLookupResult{}, invalid("ChargeID", "is required without ProviderID: the refunds are read from the order")
	}
	if err := checkID("ChargeID", req.ChargeID); err != nil {
		return provider.RefundLookupResult{}, err
	}
	o, err := p.c.GetOrder(ctx, req.ChargeID)
	if err != nil {
		return provider.RefundLookupResult{}, classify(err)
	}
	seen := map[string]bool{}
	for _, pu := range o.PurchaseUnits {
		if pu.Payments == nil {
			continue
		}
		for i := range pu.Payments.Refunds {
			re := &pu.Payments.Refunds[i]
			if seen[re.ID] {
				continue
			}
			seen[re.ID] = true
			if re.CustomID == "" && re.ID != "" {
				if re, err = p.c.GetRefund(ctx, re.ID); err != nil {
					return provider.RefundLookupResult{}, classify(err)
				}
			}
			if re.CustomID != req.ProviderKey {
				continue
			}
			r, err := refundResult(re)
			if err != nil {
				return provider.RefundLookupResult{}, err
			}
			res.Refunds = append(res.Refunds, r)
		}
	}
	return res, nil
}

// refundResult is a refund read back from PayPal.
func refundResult(re *Refund) (provider.RefundResult, error) {
	m, err := re.Amount.Money()
	if err != nil {
		return provider.RefundResult{}, &provider.UnknownOutcomeError{Provider: providerName,
			Err: fmt.Errorf("refund %s: amount %s %s: %w", re.ID, re.Amount.Value, re.Amount.CurrencyCode, err)}
	}
	return provider.RefundResult{ProviderID: re.ID, Status: refundStatus(re.Status), Amount: m}, nil
}

// refundStatus maps a refund's status, as [Provider.Refund] does.
func refundStatus(s string) provider.RefundStatus {
	switch s {
	case "COMPLETED":
		return provider.RefundSucceeded
	case "FAILED", "CANCELLED":
		return provider.RefundFailed
	default: // PENDING
		return provider.RefundPending
	}
}
