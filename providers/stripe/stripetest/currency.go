package stripetest

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// currencyRule is how Stripe writes the amounts of a currency: integers carrying exponent
// decimal places, multiples of multiple. The fake's rules come from Stripe's documentation
// alone (https://docs.stripe.com/currencies, "Specify amounts in API requests"), kept apart
// from the adapter's own table so that a misreading in one is caught by the other.
type currencyRule struct {
	exponent int   // decimal places an integer amount carries
	multiple int64 // what every amount must be a multiple of
}

var (
	// "Zero-decimal currencies: ... the charge and the amount are the same, without requiring
	// multiplication. For example, to charge 500 JPY, provide an amount value of 500."
	// (https://docs.stripe.com/currencies#zero-decimal)
	zeroDecimal = currencyRule{exponent: 0, multiple: 1}

	// "Three-decimal currencies: The API supports three-decimal currencies for the standard
	// payment flows, including Payment Intents, Refunds, and Disputes. However, to ensure
	// compatibility with Stripe's payments partners, these API calls require the
	// least-significant (last) digit to be 0." (https://docs.stripe.com/currencies#three-decimal)
	threeDecimal = currencyRule{exponent: 3, multiple: 10}

	// "Special cases": ISK and UGX "transitioned to a zero-decimal currency, but backward
	// compatibility requires you to represent it as a two-decimal value, where the decimal
	// amount is always 00. For example, to charge 5 ISK, provide an amount value of 500. You
	// can't charge fractions of ISK." (https://docs.stripe.com/currencies#special-cases)
	wholeUnitsTwoDecimal = currencyRule{exponent: 2, multiple: 100}

	// "Currencies are two-decimal currencies unless otherwise specified." HUF and TWD are
	// special cases for payouts only, which the fake does not serve: their charges and refunds
	// are two-decimal.
	twoDecimal = currencyRule{exponent: 2, multiple: 1}
)

// currencyRules is every currency the page specifies otherwise, by Stripe's lowercase code.
// The page's zero-decimal list also names UGX, but its "Special cases" entry is how Stripe takes
// UGX charges (two decimals, always 00).
var currencyRules = map[string]currencyRule{
	"bif": zeroDecimal, "clp": zeroDecimal, "djf": zeroDecimal, "gnf": zeroDecimal,
	"jpy": zeroDecimal, "kmf": zeroDecimal, "krw": zeroDecimal, "mga": zeroDecimal,
	"pyg": zeroDecimal, "rwf": zeroDecimal, "vnd": zeroDecimal, "vuv": zeroDecimal,
	"xaf": zeroDecimal, "xof": zeroDecimal, "xpf": zeroDecimal,

	"bhd": threeDecimal, "jod": threeDecimal, "kwd": threeDecimal, "omr": threeDecimal,
	"tnd": threeDecimal,

	"isk": wholeUnitsTwoDecimal, "ugx": wholeUnitsTwoDecimal,
}

func ruleOf(currency string) currencyRule {
	if r, ok := currencyRules[strings.ToLower(currency)]; ok {
		return r
	}
	return twoDecimal
}

// checkAmount answers Stripe's 400 invalid_request_error for an amount of a PaymentIntent or a
// refund that Stripe's rules for currency refuse, or nil. It is a validation failure: the
// request does not execute and, as Stripe saves results "only after the execution of an
// endpoint begins" (https://docs.stripe.com/api/idempotent_requests), nothing is saved for its
// idempotency key.
func checkAmount(currency string, amount int64) *response {
	r := ruleOf(currency)
	if amount%r.multiple == 0 {
		return nil
	}
	cur := strings.ToUpper(currency)
	switch r {
	case wholeUnitsTwoDecimal:
		// Stripe's answer, quoted from
		// https://support.stripe.com/questions/deprecation-of-fractional-isk-charges-and-refunds
		// (refunds of fractional amounts get the same answer).
		return errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest,
			Code: "invalid_charge_amount_no_decimal_compatible", Param: "amount",
			Message: "Invalid amount. Currency " + cur + " has become effectively zero-decimal and charged amounts " +
				"must be evenly divisible by 100. See https://stripe.com/docs/currencies#special-cases for more information."})
	default: // three-decimal
		// The page states the rule but not the error's code or message: the fake answers with
		// invalid_charge_amount, from Stripe's list of error codes
		// (https://docs.stripe.com/error-codes), as an invalid_request_error like every
		// parameter refused before execution.
		return errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest,
			Code: "invalid_charge_amount", Param: "amount",
			Message: fmt.Sprintf("Invalid amount: %d. %s is a three-decimal currency and Stripe requires the "+
				"least-significant (last) digit of its amounts to be 0. See https://stripe.com/docs/currencies#three-decimal "+
				"for more information.", amount, cur)})
	}
}

// FormatAmount formats a Stripe integer amount of currency (any case) in major units, by
// Stripe's exponents, not ISO 4217's (https://docs.stripe.com/currencies): 1050 "eur" is
// "10.50", 500 "jpy" "500", 1230 "kwd" "1.230", 500000 "isk" "5000.00" (ISK amounts are
// written with two decimals). Use it to compare the fake's integer amounts ([Server.Totals],
// objects' amount) with decimal amounts.
func FormatAmount(amount int64, currency string) string {
	exp := ruleOf(currency).exponent
	sign := ""
	digits := strconv.FormatInt(amount, 10)
	if amount < 0 {
		sign, digits = "-", digits[1:]
	}
	if exp == 0 {
		return sign + digits
	}
	if len(digits) <= exp {
		digits = strings.Repeat("0", exp-len(digits)+1) + digits
	}
	return sign + digits[:len(digits)-exp] + "." + digits[len(digits)-exp:]
}
