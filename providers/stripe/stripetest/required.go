package stripetest

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Required parameters. Each endpoint refuses a request without a parameter Stripe's API
// reference marks required, with Stripe's documented error: HTTP 400, type
// invalid_request_error, code parameter_missing, param naming it, "Missing required param: X."
// (https://docs.stripe.com/error-codes#parameter-missing, https://docs.stripe.com/api/errors):
//
//   - POST /v1/payment_intents: amount and currency
//     (https://docs.stripe.com/api/payment_intents/create; "required": ["amount", "currency"]
//     in Stripe's OpenAPI specification, https://github.com/stripe/openapi). See
//     createPaymentIntent, and checkPaymentIntentConditions for what depends on other
//     parameters.
//   - POST /v1/refunds: a charge or a payment_intent, "When you create a new refund, you must
//     specify a Charge or a PaymentIntent object on which to create it"
//     (https://docs.stripe.com/api/refunds/create). See createRefund.
//   - GET /v1/payment_intents/search: query (https://docs.stripe.com/api/payment_intents/search).
//     See searchPaymentIntents.
//
// The lists (GET /v1/payment_intents, /v1/refunds, /v1/balance_transactions) and the reads by
// id require nothing else.

// savedMethod is a PaymentMethod attached to a Customer ([Server.AttachPaymentMethod]).
type savedMethod struct {
	customer string
	card     string // the test card it behaves as
}

// AttachPaymentMethod saves a card for customer, as a SetupIntent or a PaymentMethod attach does
// at Stripe, and returns the new PaymentMethod's id. card is the test card it behaves as
// ([PaymentMethodVisa], ...). A PaymentIntent with that payment_method must then name customer
// (see checkPaymentIntentConditions). It fails when card is not a test card or customer is not a
// Customer id ("cus_...").
func (s *Server) AttachPaymentMethod(customer, card string) (string, error) {
	if _, ok := testCards[card]; !ok {
		return "", fmt.Errorf("stripetest: AttachPaymentMethod: %q is not a test card", card)
	}
	if !strings.HasPrefix(customer, "cus_") {
		return "", fmt.Errorf("stripetest: AttachPaymentMethod: customer %q is not a Customer id (cus_...)", customer)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.newIDLocked("pm")
	s.saved[id] = savedMethod{customer: customer, card: card}
	s.customers[customer] = true
	return id, nil
}

// cardOfLocked resolves a payment_method to its test card, and the Customer it is attached to
// ("" for Stripe's test PaymentMethods, which are attached to none).
func (s *Server) cardOfLocked(pm string) (card testCard, customer string, known bool) {
	if sv, ok := s.saved[pm]; ok {
		return testCards[sv.card], sv.customer, true
	}
	card, known = testCards[pm]
	return card, "", known
}

// checkPaymentIntentConditions refuses the PaymentIntent creations Stripe refuses for what one
// parameter requires of another:
//
//   - A payment_method attached to a Customer needs that Customer: "If the payment method is
//     attached to a Customer, you must also provide the ID of that Customer as the customer
//     parameter of this PaymentIntent" (https://docs.stripe.com/api/payment_intents/create,
//     payment_method); "Payment methods attached to other Customers cannot be used with this
//     PaymentIntent" (same page, customer). A customer that does not exist is Stripe's 400
//     resource_missing "No such customer". The code of the first two refusals is not
//     documented: the fake sends none, with param "customer".
//
// Not modelled: a confirmation (confirm=true) without payment_method_types takes the Dashboard's
// payment methods, which Stripe enables by default since API version 2023-08-16
// (https://docs.stripe.com/upgrades/manage-payment-methods), and "To confirm this PaymentIntent,
// you may be required to provide a return_url" for those that redirect
// (https://docs.stripe.com/api/payment_intents/object#payment_intent_object-automatic_payment_methods-allow_redirects).
// Whether Stripe requires it depends on the account's Dashboard settings, which the fake does
// not have; payonce's adapter sends payment_method_types card, which needs none.
func (s *Server) checkPaymentIntentConditions(f url.Values, pmCustomer string) *response {
	customer := f.Get("customer")
	switch {
	case customer != "" && !s.customers[customer]:
		resp, _ := noSuch(http.StatusBadRequest, "customer", "customer", customer)
		return resp
	case pmCustomer != "" && customer == "":
		return errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Param: "customer",
			Message: fmt.Sprintf("The provided PaymentMethod %s is attached to a Customer: provide the ID of that Customer as the customer parameter of this PaymentIntent.", f.Get("payment_method"))})
	case pmCustomer != "" && customer != pmCustomer:
		return errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Param: "customer",
			Message: fmt.Sprintf("The provided PaymentMethod %s is attached to another Customer; payment methods attached to other Customers cannot be used with this PaymentIntent.", f.Get("payment_method"))})
	}
	return nil
}
