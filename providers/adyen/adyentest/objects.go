package adyentest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"
	"unicode/utf8"
)

// Test payment methods, sent as paymentMethod.storedPaymentMethodId; the same names as the
// other payonce fakes, so that one demo runs against any provider.
const (
	PaymentMethodVisa                   = "pm_card_visa"
	PaymentMethodDeclined               = "pm_card_chargeDeclined"
	PaymentMethodInsufficientFunds      = "pm_card_chargeDeclinedInsufficientFunds"
	PaymentMethodAuthenticationRequired = "pm_card_authenticationRequired"
)

type testCard struct {
	refusalReason, refusalReasonCode string // "" if the card is not refused
	needsAction                      bool
}

var testCards = map[string]testCard{
	PaymentMethodVisa:                   {},
	PaymentMethodDeclined:               {refusalReason: "Refused", refusalReasonCode: "2"},
	PaymentMethodInsufficientFunds:      {refusalReason: "Not enough balance", refusalReasonCode: "12"},
	PaymentMethodAuthenticationRequired: {needsAction: true},
}

// Adyen's limits.
const (
	maxReferenceLen     = 80
	maxMetadataKeys     = 20
	maxMetadataKeyLen   = 20
	maxMetadataValueLen = 80
)

// Amount is Adyen's amount: an ISO 4217 currency code and a value in Adyen's minor units for
// that currency, whose decimals are Adyen's own ([Decimals]).
type Amount struct {
	Currency string `json:"currency"`
	Value    int64  `json:"value"`
}

var currencyRE = regexp.MustCompile(`^[A-Z]{3}$`)

func (a *Amount) check(field string) *response {
	switch {
	case a == nil:
		return validation(codeRequired, "Required field '"+field+"' is not provided.")
	case !currencyRE.MatchString(a.Currency):
		return validation(codeInvalidField, fmt.Sprintf("Field '%s.currency' must be an uppercase ISO 4217 code, got %q.", field, a.Currency))
	case a.Value <= 0:
		return validation(codeInvalidField, fmt.Sprintf("Field '%s.value' must be positive, got %d.", field, a.Value))
	}
	return nil
}

// payment is a payment created by POST /payments.
type payment struct {
	psp               string
	reference         string
	merchant          string
	amount            Amount
	method            string
	resultCode        string // Authorised, Refused, RedirectShopper, Cancelled
	refusalReason     string
	refusalReasonCode string
	metadata          map[string]string
	idempotencyKey    string
	authorised        bool      // was Authorised at some point (a cancel keeps it: resultCode says Cancelled)
	authorisedAt      time.Time // on Config.Clock
	captureDone       bool      // captured (automatically or by a capture request): nothing more to capture
	captured          int64     // minor units captured: the money that moved to the merchant
	refunded          int64     // minor units refunded by successful refunds and reversals
}

func (p *payment) cancelled() bool { return p.resultCode == "Cancelled" }

// uncaptured reports whether p holds an authorisation that can still be cancelled: authorised,
// not captured, not cancelled. See https://docs.adyen.com/online-payments/cancel ("After a
// payment has been captured, you can no longer cancel it").
func (p *payment) uncaptured() bool { return p.resultCode == "Authorised" && !p.captureDone }

// modification is a refund, a capture, a reversal or a technical cancel.
type modification struct {
	kind             string // "refund", "capture", "reversal", "cancel"
	psp              string
	paymentPSP       string // "" for a technical cancel that found no payment
	reference        string
	paymentReference string // technical cancels only
	amount           Amount
	success          bool
	idempotencyKey   string
}

type paymentRequest struct {
	MerchantAccount string  `json:"merchantAccount"`
	Amount          *Amount `json:"amount"`
	Reference       string  `json:"reference"`
	PaymentMethod   *struct {
		Type                  string `json:"type"`
		StoredPaymentMethodID string `json:"storedPaymentMethodId"`
		EncryptedSecurityCode string `json:"encryptedSecurityCode"`
	} `json:"paymentMethod"`
	ReturnURL                string            `json:"returnUrl"`
	ShopperInteraction       string            `json:"shopperInteraction"`
	RecurringProcessingModel string            `json:"recurringProcessingModel"`
	ShopperReference         string            `json:"shopperReference"`
	Metadata                 map[string]string `json:"metadata"`
}

type paymentResponse struct {
	AdditionalData    map[string]string `json:"additionalData,omitempty"`
	Amount            Amount            `json:"amount"`
	MerchantReference string            `json:"merchantReference"`
	PSPReference      string            `json:"pspReference"`
	ResultCode        string            `json:"resultCode"`
	RefusalReason     string            `json:"refusalReason,omitempty"`
	RefusalReasonCode string            `json:"refusalReasonCode,omitempty"`
	Action            *action           `json:"action,omitempty"`
}

type action struct {
	PaymentMethodType string `json:"paymentMethodType"`
	Type              string `json:"type"`
	URL               string `json:"url"`
	Method            string `json:"method"`
}

// decode reads c.body into v strictly; a type error is a validation error (cached, as Adyen's
// non-transient errors are).
func decode(c *call, v any) *response {
	dec := json.NewDecoder(bytes.NewReader(c.body))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return validation(codeInvalidField, fmt.Sprintf("Field '%s' has the wrong type: %v", te.Field, err))
		}
		return validation(codeInvalidField, "Unreadable request: "+err.Error())
	}
	return nil
}

// accept decodes c's body into req and refuses it, as Adyen does every write, unless it has the
// fields required and names the merchant account: merchant points at req's merchantAccount,
// read once req is decoded.
func (s *Server) accept(c *call, req any, required []requiredField, merchant *string) *response {
	if bad := decode(c, req); bad != nil {
		return bad
	}
	if bad := checkRequired(c, required); bad != nil {
		return bad
	}
	return s.checkMerchant(*merchant)
}

func (s *Server) checkMerchant(m string) *response {
	if m == "" {
		return validation(codeRequired, "Required field 'merchantAccount' is not provided.")
	}
	if s.merchant != "" && m != s.merchant {
		return apiError(http.StatusForbidden, codeMerchant, "security", "Invalid Merchant Account")
	}
	return nil
}

func checkReference(field, ref string, required bool) *response {
	switch {
	case ref == "" && required:
		return validation(codeRequired, "Required field '"+field+"' is not provided.")
	case utf8.RuneCountInString(ref) > maxReferenceLen:
		return validation(codeInvalidField, fmt.Sprintf("Field '%s' is %d characters; at most %d are allowed.", field, utf8.RuneCountInString(ref), maxReferenceLen))
	}
	return nil
}

func checkMetadata(md map[string]string) *response {
	if len(md) > maxMetadataKeys {
		return validation(codeInvalidField, fmt.Sprintf("Field 'metadata' has %d entries; at most %d are allowed.", len(md), maxMetadataKeys))
	}
	for k, v := range md {
		if k == "" || utf8.RuneCountInString(k) > maxMetadataKeyLen {
			return validation(codeInvalidField, fmt.Sprintf("Metadata key %q must be 1 to %d characters.", k, maxMetadataKeyLen))
		}
		if utf8.RuneCountInString(v) > maxMetadataValueLen {
			return validation(codeInvalidField, fmt.Sprintf("Metadata value of %q is longer than %d characters.", k, maxMetadataValueLen))
		}
	}
	return nil
}

// createPayment serves POST /payments. The reference is NOT deduplicated: two requests with
// different idempotency keys and the same reference create two payments, as at Adyen. A request
// without a required field, or a token payment without what Adyen requires of one, is refused
// (see required.go).
//
// Not modelled: at Adyen a token belongs to the shopperReference it was stored under; the
// fake's test cards ([PaymentMethodVisa], ...) serve any shopperReference.
func (s *Server) createPayment(c *call) *response {
	var req paymentRequest
	if bad := s.accept(c, &req, paymentRequired, &req.MerchantAccount); bad != nil {
		return bad
	}
	if bad := req.Amount.check("amount"); bad != nil {
		return bad
	}
	if bad := checkReference("reference", req.Reference, true); bad != nil {
		return bad
	}
	if bad := checkTokenPayment(c, &req); bad != nil {
		return bad
	}
	if bad := checkMetadata(req.Metadata); bad != nil {
		return bad
	}
	method := req.PaymentMethod.StoredPaymentMethodID
	card, known := testCards[method]
	if !known || (req.PaymentMethod.Type != "" && req.PaymentMethod.Type != "scheme") {
		return validation(codeInvalidMethod, fmt.Sprintf("Invalid payment method: type %q, storedPaymentMethodId %q is not a known test card.",
			req.PaymentMethod.Type, method))
	}

	p := &payment{
		psp:            s.newPSPLocked(),
		reference:      req.Reference,
		merchant:       req.MerchantAccount,
		amount:         *req.Amount,
		method:         method,
		metadata:       req.Metadata,
		idempotencyKey: c.key,
	}
	s.payments[p.psp] = p
	s.porder = append(s.porder, p)

	out := paymentResponse{Amount: p.amount, MerchantReference: p.reference, PSPReference: p.psp}
	switch {
	case card.needsAction:
		p.resultCode = "RedirectShopper"
		out.Action = &action{PaymentMethodType: "scheme", Type: "redirect", Method: "GET",
			URL: "https://checkoutshopper-test.adyen.com/checkoutshopper/threeDS/redirect?MD=" + p.psp}
	case card.refusalReason != "":
		p.resultCode = "Refused"
		p.refusalReason, p.refusalReasonCode = card.refusalReason, card.refusalReasonCode
		out.RefusalReason, out.RefusalReasonCode = p.refusalReason, p.refusalReasonCode
		s.emitLocked(s.authorisationItem(p, false))
	default:
		s.authoriseLocked(p)
	}
	out.ResultCode = p.resultCode
	return jsonResponse(http.StatusOK, out)
}

func (s *Server) authorisationItem(p *payment, success bool) NotificationItem {
	it := NotificationItem{
		Amount: p.amount, EventCode: "AUTHORISATION", MerchantAccountCode: p.merchant,
		MerchantReference: p.reference, PaymentMethod: "visa", PSPReference: p.psp, Success: boolString(success),
	}
	if !success {
		it.Reason = p.refusalReason
	}
	if len(p.metadata) > 0 {
		it.AdditionalData = map[string]string{}
		for k, v := range p.metadata {
			it.AdditionalData["metadata."+k] = v
		}
	}
	return it
}

// CompleteRedirect finishes the shopper's authentication of a RedirectShopper payment, as if
// the shopper came back and /payments/details was called: the payment becomes Authorised (and
// is captured as Config.CaptureMode says) or Refused with refusalReason "3D Not
// Authenticated", and its AUTHORISATION notification is emitted. It fails when psp names no payment awaiting authentication.
func (s *Server) CompleteRedirect(psp string, authorised bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.payments[psp]
	if !ok {
		return fmt.Errorf("adyentest: CompleteRedirect: no payment %q", psp)
	}
	if p.resultCode != "RedirectShopper" {
		return fmt.Errorf("adyentest: CompleteRedirect: payment %q is %s, not awaiting authentication", psp, p.resultCode)
	}
	if !authorised {
		p.resultCode, p.refusalReason, p.refusalReasonCode = "Refused", "3D Not Authenticated", "11"
		s.emitLocked(s.authorisationItem(p, false))
		return nil
	}
	s.authoriseLocked(p)
	return nil
}

// authoriseLocked makes p Authorised now and emits its AUTHORISATION success "true". Under
// automatic capture without a delay, p is captured at once (see captureDueLocked); under manual
// capture it stays authorised until POST /payments/{psp}/captures. The AUTHORISATION
// notification is the same in every mode: it reports the authorisation, not the capture
// (https://docs.adyen.com/online-payments/capture: "The authorization reserves the funds on
// the shopper's bank account. Then, when you send a request to capture the payment, the
// reserved funds are transferred").
func (s *Server) authoriseLocked(p *payment) {
	p.resultCode, p.authorised, p.authorisedAt = "Authorised", true, s.clock()
	s.captureDueLocked(p)
	s.emitLocked(s.authorisationItem(p, true))
}

// captureDueLocked applies the automatic capture to p when it is due: under CaptureAutomatic,
// an authorised, uncancelled, uncaptured payment is captured in full once Config.CaptureDelay
// has passed since its authorisation on Config.Clock ("By default, payments are captured
// automatically without a delay, immediately after authorization", and a capture delay can be
// set: https://docs.adyen.com/online-payments/capture). No CAPTURE notification is emitted:
// Adyen's CAPTURE webhook is "the result of the request to capture a payment"
// (https://docs.adyen.com/api-explorer/Webhooks/1/post/CAPTURE), and no request was made.
func (s *Server) captureDueLocked(p *payment) {
	if s.captureMode != CaptureAutomatic || !p.uncaptured() || s.clock().Before(p.authorisedAt.Add(s.captureDelay)) {
		return
	}
	p.captureDone, p.captured = true, p.amount.Value
}

// capturesDueLocked applies the automatic captures that are due, before anything reads or
// changes the payments. Called with s.mu held.
func (s *Server) capturesDueLocked() {
	for _, p := range s.porder {
		s.captureDueLocked(p)
	}
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
