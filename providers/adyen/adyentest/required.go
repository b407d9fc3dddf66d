package adyentest

import (
	"fmt"
	"slices"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// Required fields. Each endpoint refuses a request without a field Adyen's API reference marks
// required (the "required" lists of Adyen's OpenAPI specification of Checkout v71,
// https://github.com/Adyen/adyen-openapi/blob/main/json/CheckoutService-v71.json, which the API
// explorer pages render), with Adyen's documented error: HTTP 422, errorType "validation", the
// body {status, errorCode, message, errorType}
// (https://docs.adyen.com/development-resources/error-codes, "Example error response"). Where
// Adyen's error-code page or specification names the code and message of a missing field, the
// fake answers those; elsewhere the code is the fake's own [ErrorCodeRequired] and the message
// names the field.

// ErrorCodeRequired is the errorCode the fake answers (HTTP 422) for a missing required field
// whose code Adyen does not document.
const ErrorCodeRequired = codeRequired

// requiredField is a field an endpoint requires and the error that refuses its absence.
type requiredField struct {
	path string // dotted JSON path
	code string // errorCode
	msg  string // message
}

func required(path string) requiredField {
	return requiredField{path, codeRequired, "Required field '" + path + "' is not provided."}
}

// amountRequired is Adyen's Amount: currency and value are required (schema Amount of the
// specification). A missing amount is errorCode 100 "Required object 'amount' is not provided"
// (https://docs.adyen.com/development-resources/error-codes, 100).
var amountRequired = []requiredField{
	{"amount", "100", "Required object 'amount' is not provided."},
	required("amount.currency"),
	required("amount.value"),
}

// paymentRequired is POST /payments: amount, merchantAccount, paymentMethod, reference and
// returnUrl (https://docs.adyen.com/api-explorer/Checkout/71/post/payments; PaymentRequest in
// the specification). A missing returnUrl is errorCode 14_030 "Return URL is missing." (the
// specification's 422 example of /payments).
var paymentRequired = slices.Concat([]requiredField{required("merchantAccount")}, amountRequired, []requiredField{
	required("reference"),
	required("paymentMethod"),
	{"returnUrl", "14_030", "Return URL is missing."},
})

// Token payments: a payment with paymentMethod.storedPaymentMethodId must name its shopper
// (shopperReference), say the shopper is a returning one whose card is on file
// (shopperInteraction ContAuth) and what kind of stored-card payment it is
// (recurringProcessingModel): "When it is time to bill your shopper ... make a /payments request
// including the token and the shopper reference"
// (https://docs.adyen.com/online-payments/tokenization/make-token-payments; the later payments
// of every business model there are ContAuth with a recurringProcessingModel), and
// recurringProcessingModel is "Required when creating a token to store payment details or using
// stored payment details" (https://docs.adyen.com/api-explorer/Checkout/71/post/payments).
// Adyen's error codes page documents the refusals: errorCode 000 "Recurring payments require a
// shopperReference", and 000 "CVC is required for OneClick card payments" for a stored card
// without a security code that is not ContAuth
// (https://docs.adyen.com/development-resources/error-codes, 000; "Whenever you make a card
// payment without collecting CVC, you need to specify the shopperInteraction as ContAuth",
// https://docs.adyen.com/online-payments/tokenization/make-token-payments). No code is
// documented for a missing recurringProcessingModel: [ErrorCodeRequired].
var tokenPaymentRequired = []requiredField{
	{"shopperReference", "000", "Recurring payments require a shopperReference"},
	required("recurringProcessingModel"),
}

// Values Adyen accepts (enums of PaymentRequest in the specification), and shopperReference's
// length: "Minimum length: 3 characters", at most 256 (minLength/maxLength).
var (
	recurringProcessingModels = map[string]bool{"CardOnFile": true, "Subscription": true, "UnscheduledCardOnFile": true}
	shopperInteractions       = map[string]bool{"Ecommerce": true, "ContAuth": true, "Moto": true, "POS": true}
)

const (
	minShopperReferenceLen = 3
	maxShopperReferenceLen = 256
)

// captureRequired and refundRequired are POST /payments/{pspReference}/captures and /refunds:
// amount and merchantAccount
// (https://docs.adyen.com/api-explorer/Checkout/71/post/payments/(paymentPspReference)/captures,
// .../refunds; PaymentCaptureRequest, PaymentRefundRequest in the specification).
var (
	captureRequired = slices.Concat([]requiredField{required("merchantAccount")}, amountRequired)
	refundRequired  = captureRequired
)

// reversalRequired is POST /payments/{pspReference}/reversals: merchantAccount
// (https://docs.adyen.com/api-explorer/Checkout/71/post/payments/(paymentPspReference)/reversals;
// PaymentReversalRequest).
var reversalRequired = []requiredField{required("merchantAccount")}

// cancelRequired is POST /cancels: merchantAccount and paymentReference
// (https://docs.adyen.com/api-explorer/Checkout/71/post/cancels; StandalonePaymentCancelRequest).
var cancelRequired = []requiredField{required("merchantAccount"), required("paymentReference")}

// checkRequired refuses c's body when it lacks one of fields, the first in order.
func checkRequired(c *call, fields []requiredField) *response {
	body := fakekit.ReadJSONFields(c.body)
	for _, f := range fields {
		if !body.Has(f.path) {
			return validation(f.code, f.msg)
		}
	}
	return nil
}

// checkTokenPayment refuses a payment with a stored payment method that lacks what Adyen
// requires of one (see tokenPaymentRequired), and values Adyen does not accept.
func checkTokenPayment(c *call, req *paymentRequest) *response {
	if req.RecurringProcessingModel != "" && !recurringProcessingModels[req.RecurringProcessingModel] {
		return validation(codeInvalidField, fmt.Sprintf("Field 'recurringProcessingModel' is %q; allowed: CardOnFile, Subscription, UnscheduledCardOnFile.",
			req.RecurringProcessingModel))
	}
	if req.ShopperInteraction != "" && !shopperInteractions[req.ShopperInteraction] {
		return validation(codeInvalidField, fmt.Sprintf("Field 'shopperInteraction' is %q; allowed: Ecommerce, ContAuth, Moto, POS.", req.ShopperInteraction))
	}
	if req.PaymentMethod == nil || req.PaymentMethod.StoredPaymentMethodID == "" {
		return nil
	}
	if bad := checkRequired(c, tokenPaymentRequired); bad != nil {
		return bad
	}
	if n := len([]rune(req.ShopperReference)); n < minShopperReferenceLen || n > maxShopperReferenceLen {
		return validation(codeInvalidField, fmt.Sprintf("Field 'shopperReference' is %d characters; it takes %d to %d.",
			n, minShopperReferenceLen, maxShopperReferenceLen))
	}
	if req.ShopperInteraction != "ContAuth" && req.PaymentMethod.EncryptedSecurityCode == "" {
		// Without shopperInteraction Adyen assumes Ecommerce, where a card needs its security
		// code (PaymentRequest.shopperInteraction in the specification).
		return validation("000", "CVC is required for OneClick card payments")
	}
	return nil
}
