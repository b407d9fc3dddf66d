package adyentest

import (
	"fmt"
	"net/http"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// Modifications: captures, refunds, reversals (cancel or refund) and technical cancels. Each
// is "received" at once (HTTP 201, status "received") and its outcome is decided at once but
// told only by its notification, as Adyen documents for every modification: "You get the
// outcome of the request asynchronously, in a ... webhook"
// (https://docs.adyen.com/api-explorer/Checkout/71/post/payments/(paymentPspReference)/captures,
// .../refunds, .../reversals, https://docs.adyen.com/api-explorer/Checkout/71/post/cancels).
//
// The merchantReference of a modification's notification is the modification's own reference
// (Adyen's REFUND_WITH_DATA example shows YOUR_MODIFICATION_REFERENCE there:
// https://github.com/Adyen/adyen-openapi/blob/main/json/Webhooks-v1.json), or the payment's
// reference when the request carried none: Adyen documents no example of a modification
// without one. A technical cancel's is the payment's reference (its example shows
// YOUR_ORIGINAL_REFERENCE).

type modificationRequest struct {
	MerchantAccount string  `json:"merchantAccount"`
	Amount          *Amount `json:"amount"`
	Reference       string  `json:"reference"`
}

type modificationResponse struct {
	MerchantAccount     string  `json:"merchantAccount"`
	PaymentPSPReference string  `json:"paymentPspReference"`
	PSPReference        string  `json:"pspReference"`
	Reference           string  `json:"reference,omitempty"`
	Status              string  `json:"status"`
	Amount              *Amount `json:"amount,omitempty"`
}

// Reasons the fake gives in a notification with success "false". Adyen documents that reason
// then "includes a short message with an explanation for the refusal"
// (https://docs.adyen.com/api-explorer/Webhooks/1/post/TECHNICAL_CANCEL, field reason) but not
// its wording, except ReasonRefundNotCaptured (the REFUND example of Adyen's webhook spec,
// https://github.com/Adyen/adyen-openapi/blob/main/json/Webhooks-v1.json). The other texts are
// the fake's own.
const (
	ReasonRefundNotCaptured = "Transaction hasn't been captured, refund not possible"
	ReasonCancelCaptured    = "Transaction has been captured, cancel not possible"
	ReasonNoPayment         = "No payment with this reference"
)

func (s *Server) createRefund(c *call) *response  { return s.modify(c, "refund") }
func (s *Server) createCapture(c *call) *response { return s.modify(c, "capture") }

// modify serves POST /payments/{psp}/refunds and /captures.
//
// A capture succeeds on an authorised payment that is not captured yet and not cancelled, in
// its currency, for at most its amount. The payment is then captured: one capture per payment,
// since "By default, any unclaimed amount after a partial capture gets cancelled" and multiple
// partial captures must be enabled by Adyen's support
// (https://docs.adyen.com/api-explorer/Checkout/71/post/payments/(paymentPspReference)/captures,
// https://docs.adyen.com/online-payments/capture). Under automatic capture the payment is
// already captured, so a capture request fails.
//
// A refund succeeds on the captured money only ("If the payment has already been captured, you
// need to refund it instead": https://docs.adyen.com/online-payments/cancel), in the payment's
// currency, for at most what was captured and not refunded yet. An uncaptured payment gets
// REFUND success "false" with [ReasonRefundNotCaptured].
func (s *Server) modify(c *call, kind string) *response {
	var req modificationRequest
	fields := refundRequired
	if kind == "capture" {
		fields = captureRequired
	}
	if bad := s.accept(c, &req, fields, &req.MerchantAccount); bad != nil {
		return bad
	}
	if bad := req.Amount.check("amount"); bad != nil {
		return bad
	}
	p, m, bad := s.modifyLocked(c, kind, req.Reference)
	if bad != nil {
		return bad
	}
	m.amount = *req.Amount

	var reason string
	eventCode := "REFUND"
	if kind == "capture" {
		eventCode = "CAPTURE"
		switch {
		case !p.authorised:
			reason = fmt.Sprintf("Payment %s is %s: nothing to capture", p.psp, p.resultCode)
		case p.cancelled():
			reason = fmt.Sprintf("Payment %s was cancelled: nothing to capture", p.psp)
		case p.captureDone:
			reason = fmt.Sprintf("Payment %s is already captured", p.psp)
		case m.amount.Currency != p.amount.Currency:
			reason = fmt.Sprintf("Currency %s differs from the payment's %s", m.amount.Currency, p.amount.Currency)
		case m.amount.Value > p.amount.Value:
			reason = fmt.Sprintf("Amount %d exceeds the %d %s authorised", m.amount.Value, p.amount.Value, p.amount.Currency)
		default:
			m.success = true
			p.captureDone, p.captured = true, m.amount.Value
		}
	} else {
		left := p.captured - p.refunded
		switch {
		case !p.authorised:
			reason = fmt.Sprintf("Payment %s is %s: nothing to refund", p.psp, p.resultCode)
		case p.captured == 0:
			reason = ReasonRefundNotCaptured
		case m.amount.Currency != p.amount.Currency:
			reason = fmt.Sprintf("Currency %s differs from the payment's %s", m.amount.Currency, p.amount.Currency)
		case m.amount.Value > left:
			reason = fmt.Sprintf("Amount %d exceeds the %d %s left to refund", m.amount.Value, left, p.amount.Currency)
		default:
			m.success = true
			p.refunded += m.amount.Value
		}
	}
	s.emitLocked(NotificationItem{
		Amount: m.amount, EventCode: eventCode, MerchantAccountCode: req.MerchantAccount, MerchantReference: fakekit.Or(m.reference, p.reference),
		OriginalReference: p.psp, PaymentMethod: "visa", PSPReference: m.psp, Reason: reason, Success: boolString(m.success),
	})
	return jsonResponse(http.StatusCreated, modificationResponse{MerchantAccount: req.MerchantAccount,
		PaymentPSPReference: p.psp, PSPReference: m.psp, Reference: m.reference, Status: "received", Amount: &m.amount})
}

type reversalRequest struct {
	MerchantAccount string `json:"merchantAccount"`
	Reference       string `json:"reference"`
}

// ModificationAction is the additionalData key of a CANCEL_OR_REFUND notification naming what
// the reversal did: "cancel" or "refund" (Adyen's CANCEL_OR_REFUND example carries
// "modification.action": "cancel", https://github.com/Adyen/adyen-openapi/blob/main/json/Webhooks-v1.json;
// the REVERSAL webhook says "The modification.action field indicates whether the original
// payment was cancelled or refunded", https://docs.adyen.com/api-explorer/Webhooks/1/post/REVERSAL).
const ModificationAction = "modification.action"

// modifyLocked records a modification of kind, with the (optional) reference, of the payment
// whose pspReference is in c's path; Adyen's 422 when the reference is too long or no payment
// has that pspReference. Called with s.mu held.
func (s *Server) modifyLocked(c *call, kind, reference string) (*payment, *modification, *response) {
	if bad := checkReference("reference", reference, false); bad != nil {
		return nil, nil, bad
	}
	p, ok := s.payments[c.psp]
	if !ok {
		return nil, nil, validation(codeUnknownPSP, fmt.Sprintf("Original pspReference %q does not name a payment.", c.psp))
	}
	m := &modification{kind: kind, psp: s.newPSPLocked(), paymentPSP: p.psp, reference: reference, idempotencyKey: c.key}
	s.mods = append(s.mods, m)
	return p, m, nil
}

// createReversal serves POST /payments/{psp}/reversals {merchantAccount, reference}: "Refunds a
// payment if it has already been captured, and cancels a payment if it has not yet been
// captured ... You get the outcome of the request asynchronously, in a CANCEL_OR_REFUND
// webhook. The reversed amount is always the full payment amount"
// (https://docs.adyen.com/api-explorer/Checkout/71/post/payments/(paymentPspReference)/reversals,
// https://docs.adyen.com/online-payments/reversal).
//
// An uncaptured authorisation is cancelled (additionalData "modification.action": "cancel");
// a captured payment is refunded of what is left of it (action "refund"; it leaves
// [Server.Totals]' net). A payment that was never authorised, is already cancelled, or has
// nothing left to refund gets CANCEL_OR_REFUND success "false" with a reason, and no action.
func (s *Server) createReversal(c *call) *response {
	var req reversalRequest
	if bad := s.accept(c, &req, reversalRequired, &req.MerchantAccount); bad != nil {
		return bad
	}
	p, m, bad := s.modifyLocked(c, "reversal", req.Reference)
	if bad != nil {
		return bad
	}
	m.amount = p.amount

	var reason, act string
	switch {
	case !p.authorised:
		reason = fmt.Sprintf("Payment %s is %s: nothing to cancel or refund", p.psp, p.resultCode)
	case p.cancelled():
		reason = fmt.Sprintf("Payment %s is already cancelled", p.psp)
	case p.uncaptured():
		act, m.success = "cancel", true
		p.resultCode = "Cancelled"
	case p.captured-p.refunded <= 0:
		reason = fmt.Sprintf("Payment %s is already refunded in full", p.psp)
	default:
		act, m.success = "refund", true
		m.amount.Value = p.captured - p.refunded
		p.refunded = p.captured
	}
	it := NotificationItem{
		Amount: p.amount, EventCode: "CANCEL_OR_REFUND", MerchantAccountCode: req.MerchantAccount,
		MerchantReference: fakekit.Or(m.reference, p.reference), OriginalReference: p.psp, PaymentMethod: "visa",
		PSPReference: m.psp, Reason: reason, Success: boolString(m.success),
	}
	if act != "" {
		it.AdditionalData = map[string]string{ModificationAction: act}
	}
	s.emitLocked(it)
	return jsonResponse(http.StatusCreated, modificationResponse{MerchantAccount: req.MerchantAccount,
		PaymentPSPReference: p.psp, PSPReference: m.psp, Reference: m.reference, Status: "received"})
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

// createCancel serves POST /cancels {merchantAccount, paymentReference, reference}, the
// technical cancel by the payment's reference. Adyen: "Cancels the authorisation on a payment
// that has not yet been captured ... You get the outcome of the request asynchronously, in a
// TECHNICAL_CANCEL webhook" (https://docs.adyen.com/api-explorer/Checkout/71/post/cancels), and
// "After a payment has been captured, you can no longer cancel it"
// (https://docs.adyen.com/online-payments/cancel).
//
// One TECHNICAL_CANCEL per payment with that reference (Adyen does not deduplicate references),
// with merchantReference the payment's reference and originalReference its pspReference (as in
// Adyen's TECHNICAL_CANCEL example, https://github.com/Adyen/adyen-openapi/blob/main/json/Webhooks-v1.json):
//
//   - an uncaptured authorisation, or a payment still awaiting the shopper's authentication, is
//     cancelled: success "true"; it leaves [Server.Totals];
//   - a payment already cancelled: success "true" again (it is void);
//   - a captured payment (under automatic capture, every Authorised payment once its capture
//     delay has passed): success "false" with [ReasonCancelCaptured]; the money stays captured;
//   - a refused payment: success "false".
//
// When no payment has the reference, Adyen documents nothing: the fake emits one
// TECHNICAL_CANCEL success "false" with [ReasonNoPayment] and no originalReference. It does not
// block a later payment with that reference. A technical cancel that failed is therefore never
// proof that no payment exists.
func (s *Server) createCancel(c *call) *response {
	var req cancelRequest
	if bad := s.accept(c, &req, cancelRequired, &req.MerchantAccount); bad != nil {
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
			psp = s.newPSPLocked() // each payment's cancel is its own modification
		}
		found = true
		var reason string
		switch {
		case p.cancelled():
		case p.resultCode == "RedirectShopper", p.uncaptured():
			p.resultCode = "Cancelled"
		case p.captureDone:
			reason = ReasonCancelCaptured
		default:
			reason = fmt.Sprintf("Payment %s is %s and cannot be cancelled", p.psp, p.resultCode)
		}
		ok := reason == ""
		m.success = m.success || ok
		m.paymentPSP = p.psp
		s.emitLocked(NotificationItem{
			Amount: p.amount, EventCode: "TECHNICAL_CANCEL", MerchantAccountCode: req.MerchantAccount,
			MerchantReference: req.PaymentReference, OriginalReference: p.psp, PaymentMethod: "visa", PSPReference: psp,
			Reason: reason, Success: boolString(ok),
		})
	}
	if !found {
		s.emitLocked(NotificationItem{
			EventCode: "TECHNICAL_CANCEL", MerchantAccountCode: req.MerchantAccount, MerchantReference: req.PaymentReference,
			PSPReference: m.psp, Reason: ReasonNoPayment, Success: "false",
		})
	}
	return jsonResponse(http.StatusCreated, cancelResponse{MerchantAccount: req.MerchantAccount,
		PaymentReference: req.PaymentReference, PSPReference: m.psp, Reference: req.Reference, Status: "received"})
}
