package stripetest

import "fmt"

// ConfirmPaymentIntent confirms the PaymentIntent id again with paymentMethod, as a customer
// does in the browser with its client secret (Stripe.js) after a decline: "If the payment
// attempt fails (for example due to a decline), the PaymentIntent's status returns to
// requires_payment_method so that the payment can be retried"
// (https://docs.stripe.com/payments/paymentintents/lifecycle), and confirming it with another
// payment method can then succeed (POST /v1/payment_intents/{id}/confirm,
// https://docs.stripe.com/api/payment_intents/confirm). The attempt goes as a create with
// confirm=true goes: [PaymentMethodVisa] succeeds (amount_received, a new latest_charge, a
// "charge" balance transaction, last_payment_error cleared, payment_intent.succeeded emitted),
// a declining test method leaves it in requires_payment_method with the new
// last_payment_error (payment_intent.payment_failed emitted), and
// [PaymentMethodAuthenticationRequired] gives requires_action. It returns the PaymentIntent's
// new status.
//
// Errors (nothing changes): an unknown PaymentIntent or payment method, and a PaymentIntent
// that cannot be confirmed (succeeded or canceled: Stripe's payment_intent_unexpected_state).
func (s *Server) ConfirmPaymentIntent(id, paymentMethod string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, ok := s.intents[id]
	if !ok {
		return "", fmt.Errorf("stripetest: no payment_intent %q", id)
	}
	card, known := testCards[paymentMethod]
	if !known {
		return "", fmt.Errorf("stripetest: no PaymentMethod %q", paymentMethod)
	}
	switch pi.Status {
	case "requires_payment_method", "requires_confirmation", "requires_action":
	default:
		return "", fmt.Errorf("stripetest: payment_intent_unexpected_state: PaymentIntent %s has a status of %s and cannot be confirmed", id, pi.Status)
	}
	c := &call{} // the customer's confirmation: no request of the server's (request.id null in the event)
	pi.PaymentMethod = ptr(paymentMethod)
	switch {
	case card.needsAction:
		pi.Status = "requires_action"
		pi.NextAction = &nextAction{Type: "use_stripe_sdk", UseStripeSDK: map[string]any{"type": "three_d_secure_redirect"}}
	case card.declineCode != "":
		charge := s.newIDLocked("ch")
		pi.Status, pi.LatestCharge, pi.NextAction = "requires_payment_method", &charge, nil
		pi.LastPaymentError = &apiError{Type: typeCard, Code: "card_declined", DeclineCode: card.declineCode,
			Message: card.message, Charge: charge}
		s.emitLocked(c, "payment_intent.payment_failed", pi, nil)
	default:
		pi.Status, pi.NextAction, pi.LastPaymentError = "succeeded", nil, nil
		pi.AmountReceived = pi.Amount
		pi.LatestCharge = ptr(s.newIDLocked("ch"))
		pi.balanceTxn = s.recordBalanceLocked("charge", pi.Amount, pi.Currency, *pi.LatestCharge, pi.Description)
		s.emitLocked(c, "payment_intent.succeeded", pi, nil)
	}
	return pi.Status, nil
}

// refundFailedEvent is the event a refund's failure emits at the fake's [APIVersion]: before
// 2024-10-28.acacia, Stripe sent refund.updated and refund.failed only for refunds without a
// charge, and charge.refund.updated for a charge's refund
// (https://docs.stripe.com/changelog/acacia/2024-10-28/refund-webhook-update).
const refundFailedEvent = "charge.refund.updated"

// emitRefundFailedLocked emits the failure of re, which was succeeded, with the attributes it
// changed.
func (s *Server) emitRefundFailedLocked(re *refund) {
	s.emitLocked(&call{}, refundFailedEvent, re, map[string]any{
		"status": "succeeded", "failure_reason": nil, "failure_balance_transaction": nil})
}
