package paypal

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
)

const providerName = "paypal"

// MaxProviderKeyLen is the limit on a ProviderKey: it travels as custom_id (purchase unit and
// refund), at most 127 characters. [Provider.MaxReferenceLen] reports it to payments.
const MaxProviderKeyLen = 127

// Namespace is payonce's UUID namespace for PayPal-Request-Id values:
// UUIDv5(NameSpaceURL, "https://github.com/payonce/payonce/providers/paypal"). It is fixed
// forever: changing it would change every request id, and a retry after the change would
// create instead of replay.
var Namespace = uuid.MustParse("a03a1c79-c069-544a-91ef-23993339a10a")

// Steps of the flow, each with its own request id (see [RequestID]).
const (
	StepCreate  = "create"
	StepCapture = "capture"
	StepRefund  = "refund"
)

// lookupClockMargin is how much earlier than Config.OrderRetention Lookup stops trusting a
// create replay: PayPal's clock and ours differ.
const lookupClockMargin = 5 * time.Minute

// Lookup's probe order, sent only to replay a create by its request id (see [Provider.Lookup]).
const (
	probeReferenceID = "payonce_lookup"
	probeDescription = "payonce lookup probe: never approved, never captured"
)

// RequestID derives the PayPal-Request-Id of one step of the flow from the ProviderKey:
// UUIDv5(Namespace, providerKey+"_"+step). It is deterministic: every retry of the step sends
// the same id; the 36-character form fits the Orders API's 108-character limit.
func RequestID(providerKey, step string) string {
	return uuid.NewSHA1(Namespace, []byte(providerKey+"_"+step)).String()
}

// Provider is the PayPal adapter of [payments.Provider], [payments.WebhookVerifier] and
// [payments.Totaler]. It holds no globals; it is safe for concurrent use.
type Provider struct {
	c *Client

	pageSize int // Transaction Search page size; 0: MaxSearchPageSize (tests set it smaller)
}

var (
	_ payments.Provider         = (*Provider)(nil)
	_ payments.ReferenceLimiter = (*Provider)(nil)
	_ payments.WebhookVerifier  = (*Provider)(nil)
)

// New returns a Provider for cfg. Errors: *[ConfigError] naming the bad field, including
// retentions below PayPal's documented ones.
func New(cfg *Config) (*Provider, error) {
	c, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	return &Provider{c: c}, nil
}

// Client returns the typed REST client the Provider uses.
func (p *Provider) Client() *Client { return p.c }

// Name returns "paypal".
func (p *Provider) Name() string { return providerName }

// DedupWindow returns the longest time PayPal replays a request id of the flow: the captures'
// and refunds' (Config.CaptureRetention, 45 days), or the orders' if that was set longer.
func (p *Provider) DedupWindow() time.Duration {
	return max(p.c.cfg.OrderRetention, p.c.cfg.CaptureRetention)
}

// MaxReferenceLen returns [MaxProviderKeyLen] (127), custom_id's limit: payments derives
// ProviderKey under it.
func (p *Provider) MaxReferenceLen() int { return MaxProviderKeyLen }

// Charge charges req.Amount to the vaulted card req.PaymentMethod in two steps (see the package
// documentation): it creates an order (or, with req.ProviderID, reads that order), calls
// req.Progress with the order id, then captures the order. The result's ProviderID is the order
// id. req.Recipient and req.Metadata are not sent (PayPal orders have no metadata; the
// ProviderKey travels as custom_id); req.Description becomes the purchase unit's description.
//
// Results: a completed capture is [payments.ChargeSucceeded]; a pending one
// [payments.ChargePending]; an order waiting for the payer (3-D Secure)
// [payments.ChargeRequiresAction], not captured. Replayed is true when PayPal answered the
// capture (or the create of an already captured order) from its request id.
//
// Errors: *[payments.DeclineError] (capture DECLINED or FAILED, DeclineCode the processor's
// response code; the result names the order), *[payments.InvalidRequestError] (also for
// requests refused before sending), *[payments.NotSentError], *[payments.UnknownOutcomeError]
// (also when req.Progress fails: the order exists and is not captured yet),
// *[payments.InProgressError], *[payments.KeyMismatchError] (the order PayPal returned for the
// request id or req.ProviderID carries another custom_id or amount).
func (p *Provider) Charge(ctx context.Context, req payments.ChargeRequest) (payments.ChargeResult, error) {
	if err := checkKeys(req.Key, req.ProviderKey); err != nil {
		return payments.ChargeResult{}, err
	}
	if err := checkAmount(req.Amount); err != nil {
		return payments.ChargeResult{}, err
	}
	switch {
	case req.PaymentMethod == "":
		return payments.ChargeResult{}, invalid("PaymentMethod", "is required (a vaulted card's id)")
	case len(req.Description) > 127:
		return payments.ChargeResult{}, invalid("Description", fmt.Sprintf("is %d bytes, PayPal allows 127", len(req.Description)))
	}

	var order *Order
	replayed := false
	if req.ProviderID == "" {
		res, err := p.c.CreateOrder(ctx, RequestID(req.ProviderKey, StepCreate), OrderRequest{
			Intent: "CAPTURE",
			PurchaseUnits: []PurchaseUnit{{
				ReferenceID: "default",
				CustomID:    req.ProviderKey,
				Description: req.Description,
				Amount:      ptr(AmountOf(req.Amount)),
			}},
			PaymentSource: &PaymentSource{Card: &CardSource{VaultID: req.PaymentMethod}},
		})
		if err != nil {
			return payments.ChargeResult{}, classify(err)
		}
		order, replayed = res.Order, res.Replayed
		if err := checkOrder(order, req.ProviderKey, req.Amount); err != nil {
			return payments.ChargeResult{}, err
		}
		if req.Progress != nil {
			if err := req.Progress(ctx, order.ID); err != nil {
				return pending(order.ID, req.Amount), &payments.UnknownOutcomeError{Provider: providerName,
					Err: fmt.Errorf("recording order %s before its capture: %w", order.ID, err)}
			}
		}
	} else {
		if err := checkID("ProviderID", req.ProviderID); err != nil {
			return payments.ChargeResult{}, err
		}
		o, err := p.c.GetOrder(ctx, req.ProviderID)
		if err != nil {
			return payments.ChargeResult{}, classify(err)
		}
		if err := checkOrder(o, req.ProviderKey, req.Amount); err != nil {
			return payments.ChargeResult{}, err
		}
		order, replayed = o, true
	}

	switch order.Status {
	case "COMPLETED":
		return fromCapture(order, req.Amount, true)
	case "APPROVED":
	case "PAYER_ACTION_REQUIRED", "CREATED", "SAVED":
		return payments.ChargeResult{ProviderID: order.ID, Status: payments.ChargeRequiresAction, Amount: req.Amount, Replayed: replayed}, nil
	case "VOIDED":
		return payments.ChargeResult{ProviderID: order.ID, Status: payments.ChargeFailed, Amount: req.Amount, Replayed: replayed},
			&payments.DeclineError{Provider: providerName, Code: "ORDER_VOIDED", DeclineCode: "ORDER_VOIDED", Message: "the order was voided"}
	default:
		// A status this adapter does not know: do not capture on a guess.
		return pending(order.ID, req.Amount), &payments.UnknownOutcomeError{Provider: providerName,
			Err: fmt.Errorf("order %s has status %q", order.ID, order.Status)}
	}

	res, err := p.c.CaptureOrder(ctx, order.ID, RequestID(req.ProviderKey, StepCapture))
	if err != nil {
		var apiErr *APIError
		if !errors.As(err, &apiErr) || !apiErr.HasIssue("ORDER_ALREADY_CAPTURED") {
			return pending(order.ID, req.Amount), classify(err)
		}
		// Captured before (a lost capture response whose request id PayPal no longer keeps, or a
		// concurrent capture): the order holds the capture.
		o, gerr := p.c.GetOrder(ctx, order.ID)
		if gerr != nil {
			return pending(order.ID, req.Amount), classify(gerr)
		}
		return fromCapture(o, req.Amount, true)
	}
	return fromCapture(res.Order, req.Amount, res.Replayed)
}

func ptr[T any](v T) *T { return &v }

func pending(orderID string, amount money.Money) payments.ChargeResult {
	return payments.ChargeResult{ProviderID: orderID, Status: payments.ChargePending, Amount: amount}
}

// checkOrder verifies that the order PayPal returned is the one this key made: PayPal answers a
// known request id with its order whatever the parameters, so a mismatch is enforced here.
func checkOrder(o *Order, providerKey string, amount money.Money) error {
	if o.ID == "" {
		return &payments.UnknownOutcomeError{Provider: providerName, Err: errors.New("PayPal answered an order without an id")}
	}
	if len(o.PurchaseUnits) == 0 {
		return nil // a minimal representation: nothing to compare
	}
	pu := o.PurchaseUnits[0]
	if pu.CustomID != providerKey {
		return &payments.KeyMismatchError{Provider: providerName,
			Message: fmt.Sprintf("order %s carries custom_id %q, not this ProviderKey %q", o.ID, pu.CustomID, providerKey)}
	}
	if !amount.IsZero() && pu.Amount != nil {
		got, err := pu.Amount.Money()
		if err != nil || !got.Equal(amount) {
			return &payments.KeyMismatchError{Provider: providerName,
				Message: fmt.Sprintf("order %s is for %s %s, this charge for %s", o.ID, pu.Amount.Value, pu.Amount.CurrencyCode, amount)}
		}
	}
	return nil
}

// fromCapture reads the charge from a captured order.
func fromCapture(o *Order, requested money.Money, replayed bool) (payments.ChargeResult, error) {
	cp, ok := o.capture()
	if !ok {
		return pending(o.ID, requested), &payments.UnknownOutcomeError{Provider: providerName,
			Err: fmt.Errorf("order %s is %s but shows no capture", o.ID, o.Status)}
	}
	res := payments.ChargeResult{ProviderID: o.ID, Amount: requested, Replayed: replayed}
	if m, err := cp.Amount.Money(); err == nil {
		res.Amount = m
	}
	switch cp.Status {
	case "COMPLETED", "PARTIALLY_REFUNDED", "REFUNDED":
		res.Status = payments.ChargeSucceeded
	case "DECLINED", "FAILED":
		res.Status = payments.ChargeFailed
		return res, &payments.DeclineError{Provider: providerName, Code: cp.Status, DeclineCode: declineCode(cp),
			Message: fmt.Sprintf("capture %s of order %s is %s", cp.ID, o.ID, cp.Status)}
	default: // PENDING, and statuses this adapter does not know
		res.Status = payments.ChargePending
	}
	return res, nil
}

// declineCode is the processor's response code of a declined capture, or the best reason known.
func declineCode(cp *Capture) string {
	switch {
	case cp.ProcessorResponse != nil && cp.ProcessorResponse.ResponseCode != "":
		return cp.ProcessorResponse.ResponseCode
	case cp.StatusDetails != nil && cp.StatusDetails.Reason != "":
		return cp.StatusDetails.Reason
	}
	return cp.Status
}

// Refund refunds req.Amount of the order req.ChargeID (a Charge's ProviderID): it reads the
// order to find its capture, then refunds the capture with custom_id req.ProviderKey and
// PayPal-Request-Id [RequestID](req.ProviderKey, [StepRefund]). COMPLETED is
// [payments.RefundSucceeded], PENDING [payments.RefundPending], FAILED and CANCELLED
// [payments.RefundFailed].
//
// Errors: as [Provider.Charge]; more than what is left of the capture (422
// REFUND_AMOUNT_EXCEEDED, CAPTURE_FULLY_REFUNDED), an order without a completed capture, or
// another currency is an *[payments.InvalidRequestError], final for the key.
func (p *Provider) Refund(ctx context.Context, req payments.RefundRequest) (payments.RefundResult, error) {
	if err := checkKeys(req.Key, req.ProviderKey); err != nil {
		return payments.RefundResult{}, err
	}
	if err := checkAmount(req.Amount); err != nil {
		return payments.RefundResult{}, err
	}
	if err := checkID("ChargeID", req.ChargeID); err != nil {
		return payments.RefundResult{}, err
	}
	o, err := p.c.GetOrder(ctx, req.ChargeID)
	if err != nil {
		return payments.RefundResult{}, classify(err)
	}
	cp, ok := o.capture()
	if !ok {
		return payments.RefundResult{}, invalid("ChargeID", fmt.Sprintf("order %s (%s) has no capture to refund", o.ID, o.Status))
	}
	switch cp.Status {
	case "COMPLETED", "PARTIALLY_REFUNDED", "REFUNDED": // REFUNDED: a retry may be a replay
	default:
		return payments.RefundResult{}, invalid("ChargeID", fmt.Sprintf("capture %s of order %s is %s, not refundable", cp.ID, o.ID, cp.Status))
	}
	if cp.Amount.CurrencyCode != string(req.Amount.Currency()) {
		return payments.RefundResult{}, invalid("Amount", fmt.Sprintf("is in %s, the capture in %s", req.Amount.Currency(), cp.Amount.CurrencyCode))
	}
	res, err := p.c.RefundCapture(ctx, cp.ID, RequestID(req.ProviderKey, StepRefund), RefundCaptureRequest{
		Amount:   ptr(AmountOf(req.Amount)),
		CustomID: req.ProviderKey,
	})
	if err != nil {
		return payments.RefundResult{}, classify(err)
	}
	re := res.Refund
	out := payments.RefundResult{ProviderID: re.ID, Amount: req.Amount, Replayed: res.Replayed}
	if m, err := re.Amount.Money(); err == nil {
		out.Amount = m
	}
	if (re.CustomID != "" && re.CustomID != req.ProviderKey) || !out.Amount.Equal(req.Amount) {
		return payments.RefundResult{}, &payments.KeyMismatchError{Provider: providerName,
			Message: fmt.Sprintf("refund %s carries custom_id %q and %s; this refund is %q for %s", re.ID, re.CustomID, out.Amount, req.ProviderKey, req.Amount)}
	}
	out.Status = refundStatus(re.Status)
	return out, nil
}

// Lookup reports the charge PayPal holds for a key. It is consistent (read from the order
// itself, not from transaction search, which lags hours and cannot filter by custom_id).
//
// With req.ProviderID (the order id, recorded through ChargeRequest.Progress) it reads that
// order: a capture is reported with its status, an order waiting for the payer as
// [payments.ChargeRequiresAction]; an order never captured, or an unknown order id (404), is no
// charge: no money moved, and nothing but this flow would capture it.
//
// Without it, it replays the create with [RequestID](req.ProviderKey, [StepCreate]): PayPal
// answers a known request id with its order (200), whatever the body, and creating an order
// moves no money. The replay's body is a probe order without a payment source (USD 1.00,
// reference_id "payonce_lookup"): when PayPal does not know the request id it creates that
// probe (201), which no payer can approve and nothing captures, and the answer is no charge.
// That answer is a proof only while PayPal still keeps the request id, so Lookup refuses to
// replay unless req.From is set and now < req.From + Config.OrderRetention - 5 min; otherwise
// it returns a *[WindowError] (outcome unknown). After the window, only the order id decides.
// A probe also takes the request id: an original create still on its way would get the probe
// back and fail with a *[payments.KeyMismatchError] instead of creating its order.
//
// With req.WithRefunds, the charge found also reports what PayPal refunded of it, read from
// the order (GET /v2/checkout/orders/{id} shows purchase_units[].payments.refunds): Refunded
// is the sum of the refunds in status COMPLETED (PENDING, FAILED and CANCELLED ones moved no
// money back; a zero Money of the charge's currency when there are none) and RefundsKnown is
// set. With req.ProviderID that is the order Lookup reads anyway; after a create replay it is
// one more GET of the order, since a replay is not documented to show the refunds. Without
// req.WithRefunds RefundsKnown stays false.
//
// Errors: *[WindowError], *[payments.InvalidRequestError], *[payments.NotSentError],
// *[payments.UnknownOutcomeError], *[payments.InProgressError] (the create is executing),
// *[payments.KeyMismatchError] (the order carries another custom_id).
func (p *Provider) Lookup(ctx context.Context, req payments.LookupRequest) (payments.LookupResult, error) {
	none := payments.LookupResult{Charges: []payments.ChargeResult{}, Consistent: true}
	if req.ProviderKey != "" && len(req.ProviderKey) > MaxProviderKeyLen {
		return payments.LookupResult{}, invalid("ProviderKey", fmt.Sprintf("is %d bytes, custom_id allows %d", len(req.ProviderKey), MaxProviderKeyLen))
	}
	if req.ProviderID != "" {
		if err := checkID("ProviderID", req.ProviderID); err != nil {
			return payments.LookupResult{}, err
		}
		o, err := p.c.GetOrder(ctx, req.ProviderID)
		var apiErr *APIError
		if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
			return none, nil
		}
		if err != nil {
			return payments.LookupResult{}, classify(err)
		}
		if err := checkOrder(o, orDefault(req.ProviderKey, customID(o)), money.Money{}); err != nil {
			return payments.LookupResult{}, err
		}
		charges := chargesOf(o)
		if req.WithRefunds {
			if err := addRefunds(o, charges); err != nil {
				return payments.LookupResult{}, err
			}
		}
		return payments.LookupResult{Charges: charges, Consistent: true}, nil
	}

	if req.ProviderKey == "" {
		return payments.LookupResult{}, invalid("ProviderKey", "is required without ProviderID")
	}
	now := p.c.cfg.Clock()
	window := p.c.cfg.OrderRetention
	if req.From.IsZero() || !now.Before(req.From.Add(window-lookupClockMargin)) {
		return payments.LookupResult{}, &WindowError{From: req.From, Window: window}
	}
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
		return payments.LookupResult{}, classify(err)
	}
	if !res.Replayed {
		return none, nil // PayPal did not know the request id: no order was created with it
	}
	if err := checkOrder(res.Order, req.ProviderKey, money.Money{}); err != nil {
		return payments.LookupResult{}, err
	}
	charges := chargesOf(res.Order)
	if req.WithRefunds && len(charges) > 0 {
		o, err := p.c.GetOrder(ctx, res.Order.ID)
		if err != nil {
			return payments.LookupResult{}, classify(err)
		}
		if err := addRefunds(o, charges); err != nil {
			return payments.LookupResult{}, err
		}
	}
	return payments.LookupResult{Charges: charges, Consistent: true}, nil
}

// addRefunds sets Refunded and RefundsKnown on the charges of o (one at most: payonce captures
// an order once) from the order's refunds: the sum of those COMPLETED. An order answered
// without purchase units (a minimal representation), or a charge whose currency is unknown,
// leaves RefundsKnown false: nothing can be told.
func addRefunds(o *Order, charges []payments.ChargeResult) error {
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
					return &payments.UnknownOutcomeError{Provider: providerName,
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
func chargesOf(o *Order) []payments.ChargeResult {
	if _, ok := o.capture(); ok {
		res, _ := fromCapture(o, money.Money{}, false) // a decline is a charge in status failed
		return []payments.ChargeResult{res}
	}
	if o.Status == "PAYER_ACTION_REQUIRED" {
		res := payments.ChargeResult{ProviderID: o.ID, Status: payments.ChargeRequiresAction}
		if len(o.PurchaseUnits) > 0 && o.PurchaseUnits[0].Amount != nil {
			res.Amount, _ = o.PurchaseUnits[0].Amount.Money()
		}
		return []payments.ChargeResult{res}
	}
	return []payments.ChargeResult{}
}

func checkKeys(key, providerKey string) error {
	switch {
	case key == "":
		return invalid("Key", "is required")
	case providerKey == "":
		return invalid("ProviderKey", "is required: it seeds the PayPal-Request-Id values and travels as custom_id")
	case len(providerKey) > MaxProviderKeyLen:
		return invalid("ProviderKey", fmt.Sprintf("is %d bytes, custom_id allows %d", len(providerKey), MaxProviderKeyLen))
	}
	return nil
}

func checkAmount(m money.Money) error {
	if m.Currency() == "" {
		return invalid("Amount", "has no currency")
	}
	if m.Minor() <= 0 {
		return invalid("Amount", fmt.Sprintf("must be positive, got %s", m))
	}
	return nil
}
