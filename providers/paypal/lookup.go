package paypal

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

// Lookup reports the charge PayPal holds for a key, for the reconciler and for payments past
// the charge step's window.
//
//   - With req.ProviderID (the order id, recorded through ChargeRequest.Progress) it reads that
//     order, at any age (GET /v2/checkout/orders/{id}): a capture is reported with its status,
//     an order waiting for the payer as [provider.ChargeRequiresAction]; an order never
//     captured, or an unknown order id (404), is no charge: no money moved, and nothing but
//     this flow would capture it. Consistent.
//   - Without it, inside the create's request id window (req.From set, and now before req.From
//   - Config.OrderRetention - 5 min), it replays the create with [RequestID](req.ProviderKey,
//     [StepCreate]): PayPal answers a known request id with its order (200), whatever the
//     body. The replay's body is a probe order without a payment source (USD 1.00, reference_id
//     "payonce_lookup"), which PayPal cannot capture: when PayPal does not know the request id
//     it creates that probe (201), which no payer approves and nothing captures, and the answer
//     is no charge. Consistent. A probe also takes the request id: an original create still on
//     its way would get the probe back and fail with a *[provider.KeyMismatchError] instead of
//     charging.
//   - Past that window, PayPal has forgotten the request id (a replay would be a new request),
//     so it searches Transaction Search (GET /v1/reporting/transactions, every page, in
//     31-day requests) over [req.From, req.To] for payments received (T00nn, positive) whose
//     custom_field (the purchase unit's custom_id) or invoice_id is req.ProviderKey, and reads
//     each one's order (GET /v2/payments/captures/{id} names it in
//     supplementary_data.related_ids.order_id; then GET the order): a match settles it. PayPal
//     cannot filter the search by custom_id, so the adapter pages through the period. PayPal
//     documents that "It takes a maximum of three hours for executed transactions to appear in
//     the list transactions call" ([SearchLag]): the result is Consistent only when req.To is
//     more than SearchLag (plus 5 minutes of clock margin) ago; an empty result before that is
//     not proof of absence.
//
// With req.WithRefunds, each charge found also reports what PayPal refunded of it, read from
// the order (GET /v2/checkout/orders/{id} shows purchase_units[].payments.refunds): Refunded is
// the sum of the refunds in status COMPLETED (PENDING, FAILED and CANCELLED ones moved no money
// back; a zero Money of the charge's currency when there are none) and RefundsKnown is set.
// After a create replay that is one more GET of the order, since a replay is not documented to
// show the refunds. Without req.WithRefunds RefundsKnown stays false.
//
// Errors: an error matching [provider.ErrCannotTell] (a *[CannotTellError]) when no lookup can
// tell: without req.ProviderID, req.From or req.To is zero, or the period is older than
// Transaction Search's three years; the reconciler flags such an intent for review instead of
// looking again. *[provider.InvalidRequestError], *[provider.NotSentError],
// *[provider.UnknownOutcomeError] (an outage: look again later), *[provider.InProgressError]
// (the create is executing), *[provider.KeyMismatchError] (the order carries another
// custom_id).
func (p *Provider) Lookup(ctx context.Context, req provider.LookupRequest) (provider.LookupResult, error) {
	if req.ProviderKey != "" && len(req.ProviderKey) > MaxProviderKeyLen {
		return provider.LookupResult{}, invalid("ProviderKey", fmt.Sprintf("is %d bytes, custom_id allows %d", len(req.ProviderKey), MaxProviderKeyLen))
	}
	if req.ProviderID != "" {
		return p.lookupOrder(ctx, req)
	}
	if req.ProviderKey == "" {
		return provider.LookupResult{}, invalid("ProviderKey", "is required without ProviderID")
	}
	window := p.c.cfg.OrderRetention
	switch {
	case req.From.IsZero() || req.To.IsZero():
		return provider.LookupResult{}, &CannotTellError{From: req.From, To: req.To, Window: window,
			Reason: "without an order id, LookupRequest.From and To must bound when the order may have been created: " +
				"to replay the create's request id inside PayPal's window, or to search Transaction Search past it"}
	case req.To.Before(req.From):
		return provider.LookupResult{}, invalid("To", "must not be before From")
	}
	now := p.c.cfg.Clock()
	if now.Before(req.From.Add(window - lookupClockMargin)) {
		return p.lookupByReplay(ctx, req)
	}
	return p.lookupBySearch(ctx, req, now)
}

// lookupOrder reads the order req.ProviderID.
func (p *Provider) lookupOrder(ctx context.Context, req provider.LookupRequest) (provider.LookupResult, error) {
	if err := checkID("ProviderID", req.ProviderID); err != nil {
		return provider.LookupResult{}, err
	}
	o, err := p.c.GetOrder(ctx, req.ProviderID)
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
		return provider.LookupResult{Charges: []provider.ChargeResult{}, Consistent: true}, nil
	}
	if err != nil {
		return provider.LookupResult{}, classify(err)
	}
	if err := checkOrder(o, orDefault(req.ProviderKey, customID(o)), money.Money{}); err != nil {
		return provider.LookupResult{}, err
	}
	charges := chargesOf(o)
	if req.WithRefunds {
		if err := addRefunds(o, charges); err != nil {
			return provider.LookupResult{}, err
		}
	}
	return provider.LookupResult{Charges: charges, Consistent: true}, nil
}

// lookupByReplay replays the create's request id with a probe order, inside PayPal's window.
func (p *Provider) lookupByReplay(ctx context.Context, req provider.LookupRequest) (provider.LookupResult, error) {
	res, err := p.c.CreateOrder(ctx, RequestID(req.ProviderKey, StepCreate), OrderRequest{
		Intent: "CAPTURE",
		PurchaseUnits: []PurchaseUnit{{
			ReferenceID: probeReferenceID,
			CustomID:    req.ProviderKey,
			Description: probeDescription,
			Amount:      &Amount{CurrencyCode: "USD", Value: "1.00"},
		}},
	})
	if err != nil {
		return provider.LookupResult{}, classify(err)
	}
	if !res.Replayed {
		// PayPal did not know the request id: no order was created with it.
		return provider.LookupResult{Charges: []provider.ChargeResult{}, Consistent: true}, nil
	}
	if err := checkOrder(res.Order, req.ProviderKey, money.Money{}); err != nil {
		return provider.LookupResult{}, err
	}
	charges := chargesOf(res.Order)
	if req.WithRefunds && len(charges) > 0 {
		o, err := p.c.GetOrder(ctx, res.Order.ID)
		if err != nil {
			return provider.LookupResult{}, classify(err)
		}
		if err := addRefunds(o, charges); err != nil {
			return provider.LookupResult{}, err
		}
	}
	return provider.LookupResult{Charges: charges, Consistent: true}, nil
}

// MaxSearchAge is how far back Transaction Search reaches: "This call lists transaction for the
// previous three years" (https://developer.paypal.com/docs/api/transaction-search/v1/). A lookup
// by search of an older period cannot tell.
const MaxSearchAge = 3 * 365 * 24 * time.Hour

// lookupBySearch finds, past the create's window, the orders whose captures Transaction Search
// lists with req.ProviderKey as custom_field or invoice_id in [req.From, req.To].
func (p *Provider) lookupBySearch(ctx context.Context, req provider.LookupRequest, now time.Time) (provider.LookupResult, error) {
	if req.From.Before(now.Add(-MaxSearchAge)) {
		return provider.LookupResult{}, &CannotTellError{From: req.From, To: req.To, Window: p.c.cfg.OrderRetention,
			Reason: "the period is older than the three years Transaction Search covers, and there is no order id to read"}
	}
	// Whole seconds, widened: PayPal's dates are in seconds.
	start := req.From.Truncate(time.Second)
	end := req.To.Truncate(time.Second)
	if end.Before(req.To) {
		end = end.Add(time.Second)
	}
	var captureIDs []string
	seen := map[string]bool{}
	for chunk := start; ; {
		chunkEnd := chunk.Add(MaxSearchRange)
		if chunkEnd.After(end) {
			chunkEnd = end
		}
		for page := 1; ; page++ {
			res, err := p.c.SearchTransactions(ctx, TransactionSearchRequest{StartDate: chunk, EndDate: chunkEnd, Page: page, PageSize: p.searchPageSize()})
			if err != nil {
				return provider.LookupResult{}, classify(err)
			}
			for _, d := range res.TransactionDetails {
				tx := &d.TransactionInfo
				if !isPaymentReceived(tx) || (tx.CustomField != req.ProviderKey && tx.InvoiceID != req.ProviderKey) {
					continue
				}
				if tx.TransactionID == "" {
					return provider.LookupResult{}, &provider.UnknownOutcomeError{Provider: providerName,
						Err: fmt.Errorf("Transaction Search lists a payment for this attempt's custom_id (key %s) without a transaction id",
							idempotency.ShortHash(req.ProviderKey))}
				}
				if !seen[tx.TransactionID] {
					seen[tx.TransactionID] = true
					captureIDs = append(captureIDs, tx.TransactionID)
				}
			}
			if page >= res.TotalPages || len(res.TransactionDetails) == 0 {
				break
			}
		}
		if !chunkEnd.Before(end) {
			break
		}
		chunk = chunkEnd
	}

	out := provider.LookupResult{Charges: []provider.ChargeResult{},
		Consistent: now.After(req.To.Add(SearchLag + lookupClockMargin))}
	orders := map[string]bool{}
	for _, id := range captureIDs {
		cp, err := p.c.GetCapture(ctx, id)
		if err != nil {
			return provider.LookupResult{}, classify(err)
		}
		orderID := ""
		if cp.SupplementaryData != nil {
			orderID = cp.SupplementaryData.RelatedIDs.OrderID
		}
		if orderID == "" {
			return provider.LookupResult{}, &provider.UnknownOutcomeError{Provider: providerName,
				Err: fmt.Errorf("capture %s carries this attempt's custom_id (key %s) but names no order", id, idempotency.ShortHash(req.ProviderKey))}
		}
		if orders[orderID] {
			continue
		}
		orders[orderID] = true
		o, err := p.c.GetOrder(ctx, orderID)
		if err != nil {
			return provider.LookupResult{}, classify(err)
		}
		if o.ID != orderID || (len(o.PurchaseUnits) > 0 && customID(o) != req.ProviderKey && o.PurchaseUnits[0].InvoiceID != req.ProviderKey) {
			return provider.LookupResult{}, &provider.KeyMismatchError{Provider: providerName,
				Message: fmt.Sprintf("Transaction Search lists capture %s for this attempt (key %s), but its order %s carries it neither as custom_id nor invoice_id",
					id, idempotency.ShortHash(req.ProviderKey), o.ID)}
		}
		charges := chargesOf(o)
		if req.WithRefunds {
			if err := addRefunds(o, charges); err != nil {
				return provider.LookupResult{}, err
			}
		}
		out.Charges = append(out.Charges, charges...)
	}
	return out, nil
}

// isPaymentReceived reports whether tx is a payment the account received (T00nn with a
// positive amount), whatever its status: the order read next tells the capture's.
func isPaymentReceived(tx *TransactionInfo) bool {
	return strings.HasPrefix(tx.EventCode, "T00") && len(tx.EventCode) == 5 && !strings.HasPrefix(tx.Amount.Value, "-")
}

// addRefunds sets Refunded and RefundsKnown on the charges of o (one at most: payonce captures
// an order once) from the order's refunds: the sum of those COMPLETED. An order answered
// without purchase units (a minimal representation), or a charge whose currency is unknown,
// leaves RefundsKnown false: nothing can be told.
func addRefunds(o *Order, charges []provider.ChargeResult) error {
	if len(o.PurchaseUnits) == 0 {
		return nil
	}
	for i := range charges {
		ch := &charges[i]
		total, err := money.FromMinor(0, ch.Amount.Currency())
		if ch.Amount.Currency() == "" || err != nil {
			continue
		}
		for _, pu := range o.PurchaseUnits {
			if pu.Payments == nil {
				continue
			}
			for _, re := range pu.Payments.Refunds {
				if re.Status != "COMPLETED" {
					continue
				}
				m, err := re.Amount.Money()
				if err == nil {
					total, err = total.Add(m) // another currency is an error too
				}
				if err != nil {
					return &provider.UnknownOutcomeError{Provider: providerName,
						Err: fmt.Errorf("refund %s of order %s: amount %s %s: %w", re.ID, o.ID, re.Amount.Value, re.Amount.CurrencyCode, err)}
				}
			}
		}
		ch.Refunded, ch.RefundsKnown = total, true
	}
	return nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func customID(o *Order) string {
	if len(o.PurchaseUnits) > 0 {
		return o.PurchaseUnits[0].CustomID
	}
	return ""
}

// chargesOf is what an order holds as charges: its capture, or an order waiting for the payer.
func chargesOf(o *Order) []provider.ChargeResult {
	if _, ok := o.capture(); ok {
		res, _ := fromCapture(o, money.Money{}, false) // a decline is a charge in status failed
		return []provider.ChargeResult{res}
	}
	if o.Status == "PAYER_ACTION_REQUIRED" {
		res := provider.ChargeResult{ProviderID: o.ID, Status: provider.ChargeRequiresAction}
		if len(o.PurchaseUnits) > 0 && o.PurchaseUnits[0].Amount != nil {
			res.Amount, _ = o.PurchaseUnits[0].Amount.Money()
		}
		return []provider.ChargeResult{res}
	}
	return []provider.ChargeResult{}
}
