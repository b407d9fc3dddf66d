package paypal

import (
	"fmt"

	"github.com/payonce/payonce/money"
)

// currencyDecimals is PayPal's own table of the currencies its REST APIs take, with the number
// of decimal places an amount may have in each: PayPal's "Currency codes" page
// (https://developer.paypal.com/api/rest/reference/currency-codes/, which the Orders v2 money
// object refers to for "supported currencies and decimal precision") and its current "PayPal
// Supported Currencies" list
// (https://developer.paypal.com/docs/reports/reference/paypal-supported-currencies/).
//
// It differs from ISO 4217, which the money package follows: HUF and TWD have 2 decimal places
// in ISO but "do not support decimals" at PayPal ("If you pass a decimal amount, an error
// occurs"; "Zero-digit currency — no decimal places or fractions"), as JPY. The other currencies
// take at most 2 (Orders v2 DECIMAL_PRECISION: "If the currency supports decimals, only two
// decimal place precision is supported"). RUB, still on the API page but no longer on the current
// list, is left out: refusing it before sending is safe, sending it is not known to work. BRL,
// CNY and MYR are supported for in-country accounts only; the adapter cannot know the account's
// country and lets PayPal decide.
var currencyDecimals = map[money.Currency]int32{
	"AUD": 2, "BRL": 2, "CAD": 2, "CNY": 2, "CZK": 2, "DKK": 2, "EUR": 2, "HKD": 2,
	"HUF": 0, "ILS": 2, "JPY": 0, "MYR": 2, "MXN": 2, "TWD": 0, "NZD": 2, "NOK": 2,
	"PHP": 2, "PLN": 2, "GBP": 2, "SGD": 2, "SEK": 2, "CHF": 2, "THB": 2, "USD": 2,
}

// Currencies returns the currencies the adapter sends to PayPal, with the decimal places PayPal
// takes for each (0 for HUF, JPY and TWD, 2 for the others). A charge or refund in another
// currency, or with more decimal places than PayPal takes, is refused before sending.
func Currencies() map[money.Currency]int {
	out := make(map[money.Currency]int, len(currencyDecimals))
	for c, d := range currencyDecimals {
		out[c] = int(d)
	}
	return out
}

// checkCurrency refuses, naming param, an amount PayPal cannot take: a currency not in PayPal's
// table, or a value with more decimal places than PayPal allows for it (10.50 HUF: the money
// package, following ISO 4217, accepts it).
func checkCurrency(param string, m money.Money) error {
	d, ok := currencyDecimals[m.Currency()]
	if !ok {
		return invalid(param, fmt.Sprintf("is in %s, which PayPal does not support "+
			"(see https://developer.paypal.com/api/rest/reference/currency-codes/)", m.Currency()))
	}
	if !m.Amount().Equal(m.Amount().Truncate(d)) {
		if d == 0 {
			return invalid(param, fmt.Sprintf("%s has a fraction: PayPal takes %s without decimals", m, m.Currency()))
		}
		return invalid(param, fmt.Sprintf("%s has more than the %d decimal places PayPal takes for %s", m, d, m.Currency()))
	}
	return nil
}

// AmountOf is m as PayPal's Amount, its value written with PayPal's decimal places for the
// currency: "10.50" EUR, "1500" JPY, "10" HUF (where m.AmountString(), ISO 4217, gives "10.00",
// which PayPal refuses). Errors: an *[provider.InvalidRequestError] naming "Amount" for a
// currency PayPal does not support or a value PayPal cannot represent (10.50 HUF).
func AmountOf(m money.Money) (Amount, error) {
	if err := checkCurrency("Amount", m); err != nil {
		return Amount{}, err
	}
	return Amount{CurrencyCode: string(m.Currency()), Value: m.Amount().StringFixed(currencyDecimals[m.Currency()])}, nil
}
