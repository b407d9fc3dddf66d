package paypaltest

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/payonce/payonce/money"
)

// The fake checks amounts against PayPal's own currency table, not against ISO 4217 (which the
// money package follows, and where HUF and TWD have 2 decimal places), nor against the
// adapter's code: it is written from PayPal's documentation alone.
//
// Supported currencies: the REST APIs' currency codes page,
// https://developer.paypal.com/api/rest/reference/currency-codes/ (also served at
// https://developer.paypal.com/docs/api/reference/currency-codes/), which the Orders API's money
// object refers to ("For list of supported currencies and decimal precision, see the PayPal REST
// APIs Currency Codes"), and the current list at
// https://developer.paypal.com/docs/reports/reference/paypal-supported-currencies/. The API page
// also lists RUB, which the current list no longer does; the fake follows the current list and
// refuses RUB. BRL, CNY and MYR are "supported as a payment currency and a currency balance for
// in-country PayPal accounts only": the fake accepts them (it has no account country).
//
// Decimals: "This currency does not support decimals. If you pass a decimal amount, an error
// occurs" for HUF, JPY and TWD (same pages: "Zero-digit currency — no decimal places or
// fractions"). For the others, Orders v2's DECIMAL_PRECISION issue: "If the currency supports
// decimals, only two decimal place precision is supported"
// (https://developer.paypal.com/api/rest/reference/orders/v2/errors/).
var paypalDecimals = map[string]int{
	"AUD": 2, "BRL": 2, "CAD": 2, "CNY": 2, "CZK": 2, "DKK": 2, "EUR": 2, "HKD": 2,
	"HUF": 0, "ILS": 2, "JPY": 0, "MYR": 2, "MXN": 2, "TWD": 0, "NZD": 2, "NOK": 2,
	"PHP": 2, "PLN": 2, "GBP": 2, "SGD": 2, "SEK": 2, "CHF": 2, "THB": 2, "USD": 2,
}

// valuePattern is the money object's value pattern in PayPal's Orders and Payments v2
// specifications: an optional '-', digits, and an optional fraction.
var valuePattern = regexp.MustCompile(`^((-?[0-9]+)|(-?([0-9]+)?[.][0-9]+))$`)

// maxValueLen is the money object's value maxLength in the same specifications.
const maxValueLen = 32

// parseAmount reads {currency_code, value} at field (a JSON pointer for error details), with
// PayPal's rules:
//
//   - no amount or no currency_code: 400 MISSING_REQUIRED_PARAMETER;
//   - a currency_code that is not three letters: 400 INVALID_CURRENCY_CODE ("Currency code
//     should be a three-character ISO-4217 currency code");
//   - a currency PayPal does not support: 422 CURRENCY_NOT_SUPPORTED ("Use a PayPal-supported
//     currency", Orders v2 troubleshooting,
//     https://developer.paypal.com/api/rest/integration/orders-api/troubleshooting/);
//   - a value off the pattern: 400 INVALID_PARAMETER_SYNTAX;
//   - any fraction in a currency without decimals ("10.50" or "10.00" HUF): 422
//     DECIMALS_NOT_SUPPORTED ("Currency does not support decimals", same page and Payments v2's
//     errors);
//   - more than two decimal places otherwise: 422 DECIMAL_PRECISION;
//   - zero or negative: 422 CANNOT_BE_ZERO_OR_NEGATIVE.
//
// The amount is kept as a money.Money, whose own (ISO) precision is never less than PayPal's.
func parseAmount(a *amountJSON, field string) (money.Money, *response) {
	if a == nil {
		return money.Money{}, invalidRequest(field, "MISSING_REQUIRED_PARAMETER", "A required field / parameter is missing.")
	}
	code, value := a.CurrencyCode, a.Value
	switch {
	case code == "":
		return money.Money{}, invalidRequest(field+"/currency_code", "MISSING_REQUIRED_PARAMETER", "A required field / parameter is missing.")
	case len(code) != 3 || strings.ToUpper(code) != code:
		return money.Money{}, invalidRequest(field+"/currency_code", "INVALID_CURRENCY_CODE",
			"Currency code should be a three-character ISO-4217 currency code.")
	}
	decimals, ok := paypalDecimals[code]
	if !ok {
		return money.Money{}, unprocessableAt(field+"/currency_code", code, "CURRENCY_NOT_SUPPORTED",
			fmt.Sprintf("Currency code %s is not supported. See https://developer.paypal.com/api/rest/reference/currency-codes/.", code))
	}
	if value == "" {
		return money.Money{}, invalidRequest(field+"/value", "MISSING_REQUIRED_PARAMETER", "A required field / parameter is missing.")
	}
	if len(value) > maxValueLen || !valuePattern.MatchString(value) {
		return money.Money{}, invalidRequest(field+"/value", "INVALID_PARAMETER_SYNTAX",
			fmt.Sprintf("The value %q does not conform to the expected format.", value))
	}
	frac := ""
	if _, f, ok := strings.Cut(value, "."); ok {
		frac = f
	}
	switch {
	case decimals == 0 && frac != "":
		return money.Money{}, unprocessableAt(field+"/value", value, "DECIMALS_NOT_SUPPORTED", "Currency does not support decimals.")
	case len(frac) > decimals:
		return money.Money{}, unprocessableAt(field+"/value", value, "DECIMAL_PRECISION",
			"If the currency supports decimals, only two decimal place precision is supported.")
	}
	if strings.HasPrefix(value, ".") || strings.HasPrefix(value, "-.") {
		value = strings.Replace(value, ".", "0.", 1) // ".5" is PayPal's syntax, not money's
	}
	m, err := money.Parse(value, money.Currency(code))
	switch {
	case err != nil:
		// A currency PayPal supports that money does not know, or an amount out of int64
		// range: a limit of the fake, answered as PayPal answers values it cannot take.
		return money.Money{}, invalidRequest(field+"/value", "INVALID_PARAMETER_VALUE",
			fmt.Sprintf("The value %q %s cannot be represented: %v.", a.Value, code, err))
	case !m.IsPositive():
		return money.Money{}, unprocessableAt(field+"/value", a.Value, "CANNOT_BE_ZERO_OR_NEGATIVE", "Must be greater than zero.")
	}
	return m, nil
}

// formatValue writes m's value with PayPal's decimal places for its currency ("10" HUF,
// "10.50" EUR), as PayPal writes amounts in its answers.
func formatValue(m money.Money) string {
	d, ok := paypalDecimals[string(m.Currency())]
	if !ok {
		return m.AmountString() // not reachable: only supported currencies are stored
	}
	return m.Amount().StringFixed(int32(d))
}
