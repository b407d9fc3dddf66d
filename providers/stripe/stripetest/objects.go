package stripetest

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// paymentIntent is the PaymentIntent object with the fields stripe-go v79 reads; field names
// and values are Stripe's.
type paymentIntent struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCapturable   int64             `json:"amount_capturable"`
	AmountReceived     int64             `json:"amount_received"`
	CaptureMethod      string            `json:"capture_method"`
	ClientSecret       string            `json:"client_secret"`
	ConfirmationMethod string            `json:"confirmation_method"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Customer           *string           `json:"customer"`
	Description        *string           `json:"description"`
	LastPaymentError   *apiError         `json:"last_payment_error"`
	LatestCharge       *string           `json:"latest_charge"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	NextAction         *nextAction       `json:"next_action"`
	PaymentMethod      *string           `json:"payment_method"`
	PaymentMethodTypes []string          `json:"payment_method_types"`
	Status             string            `json:"status"`

	idempotencyKey string // the Idempotency-Key of the request that created it
	refunded       int64
	balanceTxn     string // the charge's balance transaction, once it succeeded
}

type nextAction struct {
	Type         string         `json:"type"`
	UseStripeSDK map[string]any `json:"use_stripe_sdk,omitempty"`
}

type refund struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Charge        string            `json:"charge"`
	Created       int64             `json:"created"`
	Currency      string            `json:"currency"`
	Metadata      map[string]string `json:"metadata"`
	PaymentIntent string            `json:"payment_intent"`
	Reason        *string           `json:"reason"`
	Status        string            `json:"status"`
	FailureReason *string           `json:"failure_reason,omitempty"`
	// BalanceTransaction took the refund from the balance; FailureBalanceTransaction gave it
	// back when the refund failed.
	BalanceTransaction        *string `json:"balance_transaction"`
	FailureBalanceTransaction *string `json:"failure_balance_transaction,omitempty"`

	idempotencyKey string
}

type list[T any] struct {
	Object  string `json:"object"`
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
}

// Test payment methods, named as in Stripe's test mode.
const (
	PaymentMethodVisa                   = "pm_card_visa"
	PaymentMethodDeclined               = "pm_card_chargeDeclined"
	PaymentMethodInsufficientFunds      = "pm_card_chargeDeclinedInsufficientFunds"
	PaymentMethodAuthenticationRequired = "pm_card_authenticationRequired"
)

type testCard struct {
	declineCode string // "" if the card is not declined
	message     string
	needsAction bool
}

var testCards = map[string]testCard{
	PaymentMethodVisa:                   {},
	PaymentMethodDeclined:               {declineCode: "generic_decline", message: "Your card was declined."},
	PaymentMethodInsufficientFunds:      {declineCode: "insufficient_funds", message: "Your card has insufficient funds."},
	PaymentMethodAuthenticationRequired: {needsAction: true},
}

var currencyRE = regexp.MustCompile(`^[a-zA-Z]{3}$`)

func missing(param string) (*response, bool) {
	return errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Code: "parameter_missing",
		Param: param, Message: "Missing required param: " + param + "."}), false
}

func invalidInteger(param, v string) (*response, bool) {
	return errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Code: "parameter_invalid_integer",
		Param: param, Message: fmt.Sprintf("Invalid integer: %s", v)}), false
}

func noSuch(status int, object, param, id string) (*response, bool) {
	return errorResponse(status, apiError{Type: typeInvalidRequest, Code: "resource_missing",
		Param: param, Message: fmt.Sprintf("No such %s: '%s'", object, id)}), false
}

func positiveInt(form url.Values, param string) (int64, *response) {
	v := form.Get(param)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		resp, _ := invalidInteger(param, v)
		return 0, resp
	}
	return n, nil
}

func metadata(form url.Values) map[string]string {
	md := map[string]string{}
	for k, v := range form {
		if name, ok := strings.CutPrefix(k, "metadata["); ok && strings.HasSuffix(name, "]") && len(v) > 0 {
			md[strings.TrimSuffix(name, "]")] = v[len(v)-1]
		}
	}
	return md
}

func ptr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// createPaymentIntent serves POST /v1/payment_intents. Parameter checks (missing or malformed
// parameters, an amount Stripe's rules for the currency refuse (see checkAmount), unknown
// payment methods, what one parameter requires of another (see checkPaymentIntentConditions))
// happen before execution and are not cached; a created PaymentIntent, including a declined
// one, is an executed request.
func (s *Server) createPaymentIntent(c *call) (*response, bool) {
	f := c.form
	// amount and currency are required (https://docs.stripe.com/api/payment_intents/create;
	// see required.go).
	if f.Get("amount") == "" {
		return missing("amount")
	}
	amount, bad := positiveInt(f, "amount")
	if bad != nil {
		return bad, false
	}
	if f.Get("currency") == "" {
		return missing("currency")
	}
	currency := strings.ToLower(f.Get("currency"))
	if !currencyRE.MatchString(currency) {
		return errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Code: "parameter_invalid_string",
			Param: "currency", Message: "Invalid currency: " + f.Get("currency")}), false
	}
	if bad := checkAmount(currency, amount); bad != nil {
		return bad, false
	}
	pm := f.Get("payment_method")
	card, pmCustomer, known := s.cardOfLocked(pm)
	if pm != "" && !known {
		return noSuch(http.StatusBadRequest, "PaymentMethod", "payment_method", pm)
	}
	confirm := f.Get("confirm") == "true"
	if confirm && pm == "" {
		return errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Code: "payment_intent_unexpected_state",
			Message: "You cannot confirm this PaymentIntent because it's missing a payment method."}), false
	}
	if bad := s.checkPaymentIntentConditions(f, pmCustomer); bad != nil {
		return bad, false
	}

	pi := &paymentIntent{
		ID:                 s.newIDLocked("pi"),
		Object:             "payment_intent",
		Amount:             amount,
		CaptureMethod:      "automatic",
		ConfirmationMethod: "automatic",
		Created:            s.clock().Unix(),
		Currency:           currency,
		Customer:           ptr(f.Get("customer")),
		Description:        ptr(f.Get("description")),
		Metadata:           metadata(f),
		PaymentMethod:      ptr(pm),
		PaymentMethodTypes: []string{"card"},
		idempotencyKey:     c.key,
	}
	pi.ClientSecret = pi.ID + "_secret_fake"
	s.intents[pi.ID] = pi
	s.order = append(s.order, pi)

	switch {
	case !confirm && pm == "":
		pi.Status = "requires_payment_method"
	case !confirm:
		pi.Status = "requires_confirmation"
	case card.needsAction:
		pi.Status = "requires_action"
		pi.NextAction = &nextAction{Type: "use_stripe_sdk", UseStripeSDK: map[string]any{"type": "three_d_secure_redirect"}}
	case card.declineCode != "":
		charge := s.newIDLocked("ch")
		e := apiError{Type: typeCard, Code: "card_declined", DeclineCode: card.declineCode,
			Message: card.message, Charge: charge}
		pi.Status = "requires_payment_method"
		pi.LatestCharge = &charge
		lastErr := e
		pi.LastPaymentError = &lastErr
		snapshot := *pi
		e.PaymentIntent = &snapshot
		s.emitLocked(c, "payment_intent.payment_failed", pi, nil)
		return errorResponse(http.StatusPaymentRequired, e), true
	default:
		pi.Status = "succeeded"
		pi.AmountReceived = amount
		pi.LatestCharge = ptr(s.newIDLocked("ch"))
		pi.balanceTxn = s.recordBalanceLocked("charge", amount, currency, *pi.LatestCharge, pi.Description)
		s.emitLocked(c, "payment_intent.succeeded", pi, nil)
	}
	return jsonResponse(http.StatusOK, pi), true
}

func (s *Server) getPaymentIntent(c *call) (*response, bool) {
	pi, ok := s.intents[c.id]
	if !ok {
		return noSuch(http.StatusNotFound, "payment_intent", "intent", c.id)
	}
	return jsonResponse(http.StatusOK, pi), true
}

// listLimit reads a list's limit: 1..100, default 10.
func listLimit(f url.Values) (int64, *response) {
	v := f.Get("limit")
	if v == "" {
		return 10, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > 100 {
		return 0, errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Code: "parameter_invalid_integer",
			Param: "limit", Message: "Invalid limit: must be between 1 and 100"})
	}
	return n, nil
}

// createdFilter reads a list's creation filters (created, created[gt|gte|lt|lte], Unix
// seconds) into one predicate on `created`; a malformed bound is Stripe's 400
// parameter_invalid_integer naming it.
func createdFilter(f url.Values) (func(created int64) bool, *response) {
	bounds := []struct {
		param string
		keep  func(created, b int64) bool
	}{
		{"created", func(c, b int64) bool { return c == b }},
		{"created[gt]", func(c, b int64) bool { return c > b }},
		{"created[gte]", func(c, b int64) bool { return c >= b }},
		{"created[lt]", func(c, b int64) bool { return c < b }},
		{"created[lte]", func(c, b int64) bool { return c <= b }},
	}
	var filters []func(int64) bool
	for _, b := range bounds {
		v := f.Get(b.param)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			resp, _ := invalidInteger(b.param, v)
			return nil, resp
		}
		filters = append(filters, func(created int64) bool { return b.keep(created, n) })
	}
	return func(created int64) bool {
		return !slices.ContainsFunc(filters, func(keep func(int64) bool) bool { return !keep(created) })
	}, nil
}

// listPage is one page of a list endpoint over objects in creation order: newest first, the
// objects keep accepts after the starting_after cursor (the id of an object of the list, named
// object in the 400 resource_missing of an unknown one), at most the limit (1..100, default 10;
// see listLimit). It returns the page (never nil: Stripe's "data" is always an array) and
// has_more.
func listPage[T any](f url.Values, object string, ordered []T, id func(T) string, keep func(T) bool) ([]T, bool, *response) {
	limit, bad := listLimit(f)
	if bad != nil {
		return nil, false, bad
	}
	newestFirst := slices.Clone(ordered)
	slices.Reverse(newestFirst)
	if after := f.Get("starting_after"); after != "" {
		i := slices.IndexFunc(newestFirst, func(o T) bool { return id(o) == after })
		if i < 0 {
			resp, _ := noSuch(http.StatusBadRequest, object, "starting_after", after)
			return nil, false, resp
		}
		newestFirst = newestFirst[i+1:]
	}
	page := []T{}
	for _, o := range newestFirst {
		if !keep(o) {
			continue
		}
		if int64(len(page)) == limit {
			return page, true, nil
		}
		page = append(page, o)
	}
	return page, false, nil
}

// listPaymentIntents serves GET /v1/payment_intents: newest first, with created filters
// (created, created[gt|gte|lt|lte]), limit (1..100, default 10) and starting_after.
func (s *Server) listPaymentIntents(c *call) (*response, bool) {
	created, bad := createdFilter(c.form)
	if bad != nil {
		return bad, false
	}
	page, more, bad := listPage(c.form, "payment_intent", s.order,
		func(pi *paymentIntent) string { return pi.ID },
		func(pi *paymentIntent) bool { return created(pi.Created) })
	if bad != nil {
		return bad, false
	}
	return jsonResponse(http.StatusOK, list[*paymentIntent]{Object: "list", Data: page, HasMore: more, URL: "/v1/payment_intents"}), true
}

// createRefund serves POST /v1/refunds for a succeeded PaymentIntent (payment_intent or
// charge). An amount Stripe's rules for the currency refuse is a validation failure (see
// checkAmount), not cached. Refunds are bounded by the amount received: charge_already_refunded when nothing is
// left, amount_too_large when the amount exceeds what is left. Those are executed requests and
// are cached for the key.
func (s *Server) createRefund(c *call) (*response, bool) {
	f := c.form
	var pi *paymentIntent
	switch {
	case f.Get("payment_intent") != "":
		id := f.Get("payment_intent")
		if pi = s.intents[id]; pi == nil {
			return noSuch(http.StatusBadRequest, "payment_intent", "payment_intent", id)
		}
	case f.Get("charge") != "":
		id := f.Get("charge")
		i := slices.IndexFunc(s.order, func(p *paymentIntent) bool { return p.LatestCharge != nil && *p.LatestCharge == id })
		if i < 0 {
			return noSuch(http.StatusBadRequest, "charge", "charge", id)
		}
		pi = s.order[i]
	default:
		// One of them is required (https://docs.stripe.com/api/refunds/create; see required.go).
		return errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Code: "parameter_missing",
			Message: "One of the following params should be provided for this request: payment_intent or charge."}), false
	}
	amount := int64(-1)
	if f.Get("amount") != "" {
		n, bad := positiveInt(f, "amount")
		if bad != nil {
			return bad, false
		}
		amount = n
	}

	if amount >= 0 {
		if bad := checkAmount(pi.Currency, amount); bad != nil {
			return bad, false
		}
	}

	if pi.Status != "succeeded" {
		return errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Code: "payment_intent_unexpected_state",
			Param: "payment_intent", Message: fmt.Sprintf("This PaymentIntent (%s) does not have a successful charge to refund.", pi.ID)}), true
	}
	left := pi.AmountReceived - pi.refunded
	if left == 0 {
		return errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Code: "charge_already_refunded",
			Charge: *pi.LatestCharge, Message: fmt.Sprintf("Charge %s has already been refunded.", *pi.LatestCharge)}), true
	}
	if amount < 0 {
		amount = left
	}
	if amount > left {
		return errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Code: "amount_too_large", Param: "amount",
			Message: fmt.Sprintf("Refund amount (%d %s) is greater than unrefunded amount on charge (%d %s)", amount, pi.Currency, left, pi.Currency)}), true
	}
	prevRefunded := pi.refunded
	pi.refunded += amount
	re := &refund{
		ID:             s.newIDLocked("re"),
		Object:         "refund",
		Amount:         amount,
		Charge:         *pi.LatestCharge,
		Created:        s.clock().Unix(),
		Currency:       pi.Currency,
		Metadata:       metadata(f),
		PaymentIntent:  pi.ID,
		Reason:         ptr(f.Get("reason")),
		Status:         "succeeded",
		idempotencyKey: c.key,
	}
	re.BalanceTransaction = ptr(s.recordBalanceLocked("refund", -amount, re.Currency, re.ID, nil))
	s.refunds[re.ID] = re
	s.rorder = append(s.rorder, re)
	s.emitLocked(c, "charge.refunded", chargeOf(pi), chargePrevious(pi, prevRefunded))
	return jsonResponse(http.StatusOK, re), true
}

// listRefunds serves GET /v1/refunds: newest first, optionally only the refunds of one
// PaymentIntent (payment_intent) or charge (charge), with limit (1..100, default 10) and
// starting_after. An unknown payment_intent or charge is an empty list, as at Stripe.
func (s *Server) listRefunds(c *call) (*response, bool) {
	f := c.form
	page, more, bad := listPage(f, "refund", s.rorder,
		func(re *refund) string { return re.ID },
		func(re *refund) bool {
			return (!f.Has("payment_intent") || re.PaymentIntent == f.Get("payment_intent")) &&
				(!f.Has("charge") || re.Charge == f.Get("charge"))
		})
	if bad != nil {
		return bad, false
	}
	return jsonResponse(http.StatusOK, list[*refund]{Object: "list", Data: page, HasMore: more, URL: "/v1/refunds"}), true
}

// FailRefund makes the succeeded refund id fail, as a refund to a closed or expired card fails
// at Stripe days after it was created: its status becomes failed (failure_reason
// expired_or_canceled_card), its amount is refundable again, and a refund_failure balance
// transaction (failure_balance_transaction) gives the amount back to the balance, created now
// on Config.Clock, and charge.refund.updated is emitted with the failed refund (see
// refundFailedEvent). It returns
// an error naming the problem when the refund is unknown or not succeeded.
func (s *Server) FailRefund(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	re, err := fakekit.InState("stripetest", "refund", s.refunds, id, func(re *refund) string { return re.Status }, "succeeded")
	if err != nil {
		return err
	}
	re.Status = "failed"
	re.FailureReason = ptr("expired_or_canceled_card")
	re.FailureBalanceTransaction = ptr(s.recordBalanceLocked("refund_failure", re.Amount, re.Currency, re.ID, nil))
	s.intents[re.PaymentIntent].refunded -= re.Amount
	s.emitRefundFailedLocked(re)
	return nil
}

func (s *Server) getRefund(c *call) (*response, bool) {
	re, ok := s.refunds[c.id]
	if !ok {
		return noSuch(http.StatusNotFound, "refund", "id", c.id)
	}
	return jsonResponse(http.StatusOK, re), true
}
