package paypal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
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
// create replay, and how much later than [SearchLag] it trusts Transaction Search: PayPal's clock
// and ours differ.
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

// Provider is the PayPal adapter of [provider.Provider], [provider.WebhookVerifier] and
// [provider.Totaler]. It holds no globals; it is safe for concurrent use.
type Provider struct {
	c *Client

	pageSize int // Transaction Search page size; 0: MaxSearchPageSize (tests set it smaller)
}

var (
	_ provider.Provider         = (*Provider)(nil)
	_ provider.ReferenceLimiter = (*Provider)(nil)
	_ provider.StepWindower     = (*Provider)(nil)
	_ provider.Validator        = (*Provider)(nil)
	_ provider.WebhookVerifier  = (*Provider)(nil)
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

// DedupWindow returns the longest time PayPal replays a request id of the flow: the refunds'
// (Config.RefundRetention, 45 days), or the orders' if that was set longer. payments keeps local
// keys at least that long.
func (p *Provider) DedupWindow() time.Duration {
	return max(p.c.cfg.OrderRetention, p.c.cfg.RefundRetention)
}

// StepDedupWindow returns how long PayPal replays the request ids of a step
// ([provider.StepWindower]): for [provider.StepCharge], Config.OrderRetention (6 hours: the
// charge's create and capture are both Orders v2 calls); for [provider.StepRefund],
// Config.RefundRetention (45 days: a refund of a capture is a Payments v2 call); 0 (meaning
// DedupWindow) for any other step. Past the charge step's window a retry must not re-send the
// charge's request ids: PayPal would take the create for a new one, and with a payment source
// charge the card again.
func (p *Provider) StepDedupWindow(step string) time.Duration {
	switch step {
	case provider.StepCharge:
		return p.c.cfg.OrderRetention
	case provider.StepRefund:
		return p.c.cfg.RefundRetention
	}
	return 0
}

// MaxReferenceLen returns [MaxProviderKeyLen] (127), custom_id's limit: payments derives
// ProviderKey under it.
func (p *Provider) MaxReferenceLen() int { return MaxProviderKeyLen }

// ValidateCharge refuses, before anything is recorded or sent ([provider.Validator]), a charge
// PayPal would refuse: no Key or ProviderKey, a ProviderKey over 127 bytes, a non-positive
// amount, a currency PayPal does not support or an amount with more decimal places than PayPal
// takes for its currency (10.50 HUF; see [Currencies]), no PaymentMethod, a Description over
// 127 bytes. Errors: *[provider.InvalidRequestError] naming the field in Param.
func (p *Provider) ValidateCharge(req provider.ChargeRequest) error {
	if err := checkKeys(req.Key, req.ProviderKey); err != nil {
		return err
	}
	if err := checkAmount(req.Amount); err != nil {
		return err
	}
	switch {
	case req.PaymentMethod == "":
		return invalid("PaymentMethod", "is required (a vaulted card's id)")
	case len(req.Description) > 127:
		return invalid("Description", fmt.Sprintf("is %d bytes, PayPal allows 127", len(req.Description)))
	}
	return nil
}

// Charge charges req.Amount to the vaulted card req.PaymentMethod (see the package
// documentation): it creates an order with the card as payment source, which PayPal authorizes
// and captures in the create itself, and calls req.Progress with the order id. It captures
// explicitly only an order PayPal answered APPROVED and not captured yet (one whose payer
// completed 3-D Secure, when the retry names it in req.ProviderID). With req.ProviderID it reads
// that order instead of creating one. The result's ProviderID is the order id. req.Recipient and
// req.Metadata are not sent (PayPal orders have no metadata; the ProviderKey travels as
// custom_id); req.Description becomes the purchase unit's description.
//
// Results: a completed capture is [provider.ChargeSucceeded]; a pending one
// [provider.ChargePending]; an order waiting for the payer (3-D Secure)
// [provider.ChargeRequiresAction], not captured. Replayed is true when PayPal answered from its
// request id (200 instead of 201) or when the order was read from req.ProviderID.
//
// Errors: *[provider.DeclineError] (capture DECLINED or FAILED, DeclineCode the processor's
// response code; the result names the order), *[provider.InvalidRequestError] (also for
// requests refused before sending, see [Provider.ValidateCharge]), *[provider.NotSentError],
// *[provider.UnknownOutcomeError] (also when req.Progress fails: the order exists, and may be
// captured already), *[provider.InProgressError], *[provider.KeyMismatchError] (the order PayPal
// returned for the request id or req.ProviderID carries another custom_id or amount).
func (p *Provider) Charge(ctx context.Context, req provider.ChargeRequest) (provider.ChargeResult, error) {
	if err := p.ValidateCharge(req); err != nil {
		return provider.ChargeResult{}, err
	}
	amount, err := AmountOf(req.Amount)
	if err != nil {
		return provider.ChargeResult{}, err
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
				Amount:      &amount,
			}},
			PaymentSource: &PaymentSource{Card: &CardSource{VaultID: req.PaymentMethod}},
		})
		if err != nil {
			return provider.ChargeResult{}, classify(err)
		}
		order, replayed = res.Order, res.Replayed
		if err := checkOrder(order, req.ProviderKey, req.Amount); err != nil {
			return provider.ChargeResult{}, err
		}
		if req.Progress != nil {
			// Recorded whatever the order's state: a read of the order settles a lost answer at
			// any age, where the create's request id is forgotten after 6 hours.
			if err := req.Progress(ctx, order.ID); err != nil {
				return pending(order.ID, req.Amount), &provider.UnknownOutcomeError{Provider: providerName,
					Err: fmt.Errorf("recording order %s (%s): %w", order.ID, order.Status, err)}
			}
		}
	} else {
		if err := checkID("ProviderID", req.ProviderID); err != nil {
			return provider.ChargeResult{}, err
		}
		o, err := p.c.GetOrder(ctx, req.ProviderID)
		if err != nil {
			return provider.ChargeResult{}, classify(err)
		}
		if err := checkOrder(o, req.ProviderKey, req.Amount); err != nil {
			return provider.ChargeResult{}, err
		}
		order, replayed = o, true
	}

	switch order.Status {
	case "COMPLETED":
		if _, ok := order.capture(); !ok {
			// An answer that leaves the payments out (a minimal representation): read the order.
			o, err := p.c.GetOrder(ctx, order.ID)
			if err != nil {
				return pending(order.ID, req.Amount), classify(err)
			}
			order = o
		}
		return fromCapture(order, req.Amount, replayed)
	case "APPROVED":
		// Approved and not captured yet: the explicit capture below.
	case "PAYER_ACTION_REQUIRED", "CREATED", "SAVED":
		return provider.ChargeResult{ProviderID: order.ID, Status: provider.ChargeRequiresAction, Amount: req.Amount, Replayed: replayed}, nil
	case "VOIDED":
		return provider.ChargeResult{ProviderID: order.ID, Status: provider.ChargeFailed, Amount: req.Amount, Replayed: replayed},
			&provider.DeclineError{Provider: providerName, Code: "ORDER_VOIDED", DeclineCode: "ORDER_VOIDED", Message: "the order was voided"}
	default:
		// A status this adapter does not know: do not capture on a guess.
		return pending(order.ID, req.Amount), &provider.UnknownOutcomeError{Provider: providerName,
			Err: fmt.Errorf("order %s has status %q", order.ID, order.Status)}
	}

	res, err := p.c.CaptureOrder(ctx, order.ID, RequestID(req.ProviderKey, StepCapture))
	if err != nil {
		var apiErr *APIError
		if !errors.As(err, &apiErr) || !apiErr.HasIssue("ORDER_ALREADY_CAPTURED") {
			return pending(order.ID, req.Amount), classify(err)
		}
		// Captured meanwhile (a concurrent capture, or a lost capture answer whose request id
		// PayPal no longer keeps): the order holds the capture.
		o, gerr := p.c.GetOrder(ctx, order.ID)
		if gerr != nil {
			return pending(order.ID, req.Amount), classify(gerr)
		}
		return fromCapture(o, req.Amount, true)
	}
	return fromCapture(res.Order, req.Amount, res.Replayed)
}

func pending(orderID string, amount money.Money) provider.ChargeResult {
	return provider.ChargeResult{ProviderID: orderID, Status: provider.ChargePending, Amount: amount}
}

// checkOrder verifies that the order PayPal returned is the one this key made: PayPal answers a
// known request id with its order whatever the parameters, so a mismatch is enforced here.
func checkOrder(o *Order, providerKey string, amount money.Money) error {
	if o.ID == "" {
		return &provider.UnknownOutcomeError{Provider: providerName, Err: errors.New("PayPal answered an order without an id")}
	}
	if len(o.PurchaseUnits) == 0 {
		return nil // a minimal representation: nothing to compare
	}
	pu := o.PurchaseUnits[0]
	if pu.CustomID != providerKey {
		return &provider.KeyMismatchError{Provider: providerName,
			Message: fmt.Sprintf("order %s carries the custom_id of key %s, not this ProviderKey's (key %s)", o.ID,
				idempotency.ShortHash(pu.CustomID), idempotency.ShortHash(providerKey))}
	}
	if !amount.IsZero() && pu.Amount != nil {
		got, err := pu.Amount.Money()
		if err != nil || !got.Equal(amount) {
			return &provider.KeyMismatchError{Provider: providerName,
				Message: fmt.Sprintf("order %s is for %s %s, this charge for %s", o.ID, pu.Amount.Value, pu.Amount.CurrencyCode, amount)}
		}
	}
	return nil
}

// fromCapture reads the charge from a captured order.
func fromCapture(o *Order, requested money.Money, replayed bool) (provider.ChargeResult, error) {
	cp, ok := o.capture()
	if !ok {
		return pending(o.ID, requested), &provider.UnknownOutcomeError{Provider: providerName,
			Err: fmt.Errorf("order %s is %s but shows no capture", o.ID, o.Status)}
	}
	res := provider.ChargeResult{ProviderID: o.ID, Amount: requested, Replayed: replayed}
	if m, err := cp.Amount.Money(); err == nil {
		res.Amount = m
	}
	switch cp.Status {
	case "COMPLETED", "PARTIALLY_REFUNDED", "REFUNDED":
		res.Status = provider.ChargeSucceeded
	case "DECLINED", "FAILED":
		res.Status = provider.ChargeFailed
		return res, &provider.DeclineError{Provider: providerName, Code: cp.Status, DeclineCode: declineCode(cp),
			Message: fmt.Sprintf("capture %s of order %s is %s", cp.ID, o.ID, cp.Status)}
	default: // PENDING, and statuses this adapter does not know
		res.Status = provider.ChargePending
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
// PayPal-Request-Id [RequestID](req.ProviderKey, [StepRefund]), which PayPal keeps 45 days.
// COMPLETED is [provider.RefundSucceeded], PENDING [provider.RefundPending], FAILED and
// CANCELLED [provider.RefundFailed].
//
// Errors: as [Provider.Charge]; an amount PayPal cannot take (a currency it does not support,
// more decimal places than it takes: 10.50 HUF) is refused before anything is sent; more than
// what is left of the capture (422 REFUND_AMOUNT_EXCEEDED, CAPTURE_FULLY_REFUNDED), an order
// without a completed capture, or another currency is an *[provider.InvalidRequestError], final
// for the key.
func (p *Provider) Refund(ctx context.Context, req provider.RefundRequest) (provider.RefundResult, error) {
	if err := checkKeys(req.Key, req.ProviderKey); err != nil {
		return provider.RefundResult{}, err
	}
	if err := checkAmount(req.Amount); err != nil {
		return provider.RefundResult{}, err
	}
	if err := checkID("ChargeID", req.ChargeID); err != nil {
		return provider.RefundResult{}, err
	}
	amount, err := AmountOf(req.Amount)
	if err != nil {
		return provider.RefundResult{}, err
	}
	o, err := p.c.GetOrder(ctx, req.ChargeID)
	if err != nil {
		return provider.RefundResult{}, classify(err)
	}
	cp, ok := o.capture()
	if !ok {
		return provider.RefundResult{}, invalid("ChargeID", fmt.Sprintf("order %s (%s) has no capture to refund", o.ID, o.Status))
	}
	switch cp.Status {
	case "COMPLETED", "PARTIALLY_REFUNDED", "REFUNDED": // REFUNDED: a retry may be a replay
	default:
		return provider.RefundResult{}, invalid("ChargeID", fmt.Sprintf("capture %s of order %s is %s, not refundable", cp.ID, o.ID, cp.Status))
	}
	if cp.Amount.CurrencyCode != string(req.Amount.Currency()) {
		return provider.RefundResult{}, invalid("Amount", fmt.Sprintf("is in %s, the capture in %s", req.Amount.Currency(), cp.Amount.CurrencyCode))
	}
	res, err := p.c.RefundCapture(ctx, cp.ID, RequestID(req.ProviderKey, StepRefund), RefundCaptureRequest{
		Amount:   &amount,
		CustomID: req.ProviderKey,
	})
	if err != nil {
		return provider.RefundResult{}, classify(err)
	}
	re := res.Refund
	out := provider.RefundResult{ProviderID: re.ID, Amount: req.Amount, Replayed: res.Replayed}
	if m, err := re.Amount.Money(); err == nil {
		out.Amount = m
	}
	if (re.CustomID != "" && re.CustomID != req.ProviderKey) || !out.Amount.Equal(req.Amount) {
		return provider.RefundResult{}, &provider.KeyMismatchError{Provider: providerName,
			Message: fmt.Sprintf("refund %s carries the custom_id of key %s and %s; this refund is key %s for %s", re.ID,
				idempotency.ShortHash(re.CustomID), out.Amount, idempotency.ShortHash(req.ProviderKey), req.Amount)}
	}
	out.Status = refundStatus(re.Status)
	return out, nil
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

// checkAmount refuses a charge or refund amount that is not positive or that PayPal cannot take
// (see [AmountOf]).
func checkAmount(m money.Money) error {
	if m.Currency() == "" {
		return invalid("Amount", "has no currency")
	}
	if m.Minor() <= 0 {
		return invalid("Amount", fmt.Sprintf("must be positive, got %s", m))
	}
	return checkCurrency("Amount", m)
}
