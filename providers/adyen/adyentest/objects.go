package adyentest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
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

// Amount is Adyen's amount: an ISO 4217 code and a value in minor units.
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
	authorised        bool // was Authorised (money moved unless cancelled)
	refunded          int64
	captured          int64
}

// modification is a refund, a capture or a technical cancel.
type modification struct {
	kind             string // "refund", "capture", "cancel"
	psp              string
	paymentPSP       string // "" for a cancel by reference
	reference        string
	paymentReference string // cancels only
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
// different idempotency keys and the same reference create two payments, as at Adyen.
func (s *Server) createPayment(c *call) *response {
	var req paymentRequest
	if bad := decode(c, &req); bad != nil {
		return bad
	}
	if bad := s.checkMerchant(req.MerchantAccount); bad != nil {
		return bad
	}
	if bad := req.Amount.check("amount"); bad != nil {
		return bad
	}
	if bad := checkReference("reference", req.Reference, true); bad != nil {
		return bad
	}
	if req.PaymentMethod == nil {
		return validation(codeRequired, "Required field 'paymentMethod' is not provided.")
	}
	if req.ReturnURL == "" {
		return validation(codeRequired, "Required field 'returnUrl' is not provided.")
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
		p.resultCode = "Authorised"
		p.authorised = true
		s.emitLocked(s.authorisationItem(p, true))
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
// the shopper came back and /payments/details was called: the payment becomes Authorised (or
// Refused with refusalReason "3D Not Authenticated") and its AUTHORISATION notification is
// emitted. It fails when psp names no payment awaiting authentication.
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
	if authorised {
		p.resultCode, p.authorised = "Authorised", true
	} else {
		p.resultCode, p.refusalReason, p.refusalReasonCode = "Refused", "3D Not Authenticated", "11"
	}
	s.emitLocked(s.authorisationItem(p, authorised))
	return nil
}

type modificationRequest struct {
	MerchantAccount string  `json:"merchantAccount"`
	Amount          *Amount `json:"amount"`
	Reference       string  `json:"reference"`
}

type modificationResponse struct {
	MerchantAccount     string `json:"merchantAccount"`
	PaymentPSPReference string `json:"paymentPspReference"`
	PSPReference        string `json:"pspReference"`
	Reference           string `json:"reference,omitempty"`
	Status              string `json:"status"`
	Amount              Amount `json:"amount"`
}

func (s *Server) createRefund(c *call) *response  { return s.modify(c, "refund") }
func (s *Server) createCapture(c *call) *response { return s.modify(c, "capture") }

// modify serves POST /payments/{psp}/refunds and /captures: the request is "received" and its
// outcome is decided at once but told only by the REFUND or CAPTURE notification. A refund
// succeeds when the payment is authorised, not cancelled, in the same currency and the amount
// is at most what is left to refund; a capture when it is at most what is left to capture.
func (s *Server) modify(c *call, kind string) *response {
	var req modificationRequest
	if bad := decode(c, &req); bad != nil {
		return bad
	}
	if bad := s.checkMerchant(req.MerchantAccount); bad != nil {
		return bad
	}
	if bad := req.Amount.check("amount"); bad != nil {
		return bad
	}
	if bad := checkReference("reference", req.Reference, false); bad != nil {
		return bad
	}
	p, ok := s.payments[c.psp]
	if !ok {
		return validation(codeUnknownPSP, fmt.Sprintf("Original pspReference %q does not name a payment.", c.psp))
	}
	m := &modification{kind: kind, psp: s.newPSPLocked(), paymentPSP: p.psp, reference: req.Reference,
		amount: *req.Amount, idempotencyKey: c.key}
	s.mods = append(s.mods, m)

	done := &p.refunded
	eventCode, what := "REFUND", "refund"
	if kind == "capture" {
		done, eventCode, what = &p.captured, "CAPTURE", "capture"
	}
	left := p.amount.Value - *done
	var reason string
	switch {
	case !p.authorised:
		reason = fmt.Sprintf("Payment %s is %s: nothing to %s", p.psp, p.resultCode, what)
	case p.resultCode == "Cancelled":
		reason = fmt.Sprintf("Payment %s was cancelled: nothing to %s", p.psp, what)
	case m.amount.Currency != p.amount.Currency:
		reason = fmt.Sprintf("Currency %s differs from the payment's %s", m.amount.Currency, p.amount.Currency)
	case m.amount.Value > left:
		reason = fmt.Sprintf("Amount %d exceeds the %d %s left to %s", m.amount.Value, left, p.amount.Currency, what)
	default:
		m.success = true
		*done += m.amount.Value
	}
	s.emitLocked(NotificationItem{
		Amount: m.amount, EventCode: eventCode, MerchantAccountCode: req.MerchantAccount, MerchantReference: m.reference,
		OriginalReference: p.psp, PaymentMethod: "visa", PSPReference: m.psp, Reason: reason, Success: boolString(m.success),
	})
	return jsonResponse(http.StatusCreated, modificationResponse{MerchantAccount: req.MerchantAccount,
		PaymentPSPReference: p.psp, PSPReference: m.psp, Reference: m.reference, Status: "received", Amount: m.amount})
}

type cancelRequest struct {
	MerchantAccount  string `json:"merchantAccount"`
	PaymentReference string `json:"paymentReference"`
	Reference        string `json:"reference"`
}

type cancelResponse struct {
	MerchantAccount  string `json:"merchantAccount"`
	PaymentReference string `json:"paymentReference"`
	PSPReference     string `json:"pspReference"`
	Reference        string `json:"reference,omitempty"`
	Status           string `json:"status"`
}

// createCancel serves POST /cancels, the technical cancel by the payment's reference. Every
// payment with that reference is voided if it is Authorised without refunds or awaits
// authentication (TECHNICAL_CANCEL success "true"; it stops counting in Totals), or was
// already cancelled (success "true" again: it is void). A refused or refunded payment is not
// cancellable (success "false"). When no payment has the reference, one TECHNICAL_CANCEL with
// success "false" says so: the fake does not pretend to void what it does not hold, and it
// does not block a later payment with that reference either, since Adyen does not deduplicate
// references.
func (s *Server) createCancel(c *call) *response {
	var req cancelRequest
	if bad := decode(c, &req); bad != nil {
		return bad
	}
	if bad := s.checkMerchant(req.MerchantAccount); bad != nil {
		return bad
	}
	if bad := checkReference("paymentReference", req.PaymentReference, true); bad != nil {
		return bad
	}
	if bad := checkReference("reference", req.Reference, false); bad != nil {
		return bad
	}
	m := &modification{kind: "cancel", psp: s.newPSPLocked(), reference: req.Reference,
		paymentReference: req.PaymentReference, idempotencyKey: c.key}
	s.mods = append(s.mods, m)

	psp := m.psp
	found := false
	for _, p := range s.porder {
		if p.reference != req.PaymentReference {
			continue
		}
		if found {
			psp = s.newPSPLocked() // each voided payment is its own modification
		}
		found = true
		var reason string
		switch {
		case p.resultCode == "Cancelled":
		case p.resultCode == "RedirectShopper", p.resultCode == "Authorised" && p.refunded == 0:
			p.resultCode = "Cancelled"
		default:
			reason = fmt.Sprintf("Payment %s is %s and cannot be cancelled", p.psp, p.resultCode)
			if p.refunded > 0 {
				reason = fmt.Sprintf("Payment %s is partly refunded and cannot be cancelled", p.psp)
			}
		}
		ok := reason == ""
		m.success = m.success || ok
		m.paymentPSP = p.psp
		s.emitLocked(NotificationItem{
			Amount: p.amount, EventCode: "TECHNICAL_CANCEL", MerchantAccountCode: req.MerchantAccount,
			MerchantReference: req.PaymentReference, OriginalReference: p.psp, PSPReference: psp,
			Reason: reason, Success: boolString(ok),
		})
	}
	if !found {
		s.emitLocked(NotificationItem{
			EventCode: "TECHNICAL_CANCEL", MerchantAccountCode: req.MerchantAccount, MerchantReference: req.PaymentReference,
			PSPReference: m.psp, Reason: "No payment with this reference", Success: "false",
		})
	}
	return jsonResponse(http.StatusCreated, cancelResponse{MerchantAccount: req.MerchantAccount,
		PaymentReference: req.PaymentReference, PSPReference: m.psp, Reference: req.Reference, Status: "received"})
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
