package stripe

import (
	"fmt"
	"math"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/payonce/payonce/money"
)

// currenciesDoc is Stripe's page on how amounts are written per currency,
// the source of the table below.
const currenciesDoc = "https://docs.stripe.com/currencies"

// stripeUnit is how Stripe's API writes amounts of one currency: the
// integer `amount` is the amount times 10^exponent, and must be a multiple
// of step.
type stripeUnit struct {
	exponent int32
	step     int64
}

// Stripe's exponents are not ISO 4217's: each entry below is where Stripe
// departs from its default, quoted from https://docs.stripe.com/currencies
// ("Specify amounts in API requests"). Every other currency is two-decimal
// ("Currencies are two-decimal currencies unless otherwise specified").
var stripeUnits = map[money.Currency]stripeUnit{
	// "Zero-decimal currencies: ... the charge and the amount are the same,
	// without requiring multiplication. For example, to charge 500 JPY,
	// provide an amount value of 500." MGA is two-decimal in ISO 4217 and
	// zero-decimal at Stripe. The page's list also names UGX, but its
	// "Special cases" table (below) is the rule Stripe applies to charges.
	"BIF": {0, 1}, "CLP": {0, 1}, "DJF": {0, 1}, "GNF": {0, 1}, "JPY": {0, 1},
	"KMF": {0, 1}, "KRW": {0, 1}, "MGA": {0, 1}, "PYG": {0, 1}, "RWF": {0, 1},
	"VND": {0, 1}, "VUV": {0, 1}, "XAF": {0, 1}, "XOF": {0, 1}, "XPF": {0, 1},

	// "Three-decimal currencies: ... these API calls require the
	// least-significant (last) digit to be 0 ... 5.124 KWD must be rounded
	// to 5120 or 5130." (Payment Intents, Refunds and Disputes.)
	"BHD": {3, 10}, "JOD": {3, 10}, "KWD": {3, 10}, "OMR": {3, 10}, "TND": {3, 10},

	// "Special cases": ISK and UGX "transitioned to a zero-decimal currency,
	// but backward compatibility requires you to represent it as a
	// two-decimal value, where the decimal amount is always 00. For
	// example, to charge 5 ISK, provide an amount value of 500. You can't
	// charge fractions of ISK." Stripe refuses other amounts with 400
	// invalid_charge_amount_no_decimal_compatible
	// (https://support.stripe.com/questions/deprecation-of-fractional-isk-charges-and-refunds).
	// Both are zero-decimal in ISO 4217, so every money amount of them is
	// whole and multiplies by 100.
	//
	// HUF and TWD are special cases for payouts only ("you can charge
	// two-decimal amounts"): charges and refunds use the default.
	"ISK": {2, 100}, "UGX": {2, 100},
}

// unitOf is c's entry in [stripeUnits], or two decimals.
func unitOf(c money.Currency) stripeUnit {
	if u, ok := stripeUnits[money.Currency(strings.ToUpper(string(c)))]; ok {
		return u
	}
	return stripeUnit{exponent: 2, step: 1}
}

var maxAmount = decimal.NewFromInt(math.MaxInt64)

// ToAmount returns m as Stripe's integer `amount` for m's currency, by
// Stripe's exponents rather than ISO 4217's (see
// https://docs.stripe.com/currencies): 10.50 EUR is 1050, 500 JPY is 500,
// 1.230 KWD is 1230, and 5000 ISK is 500000 (ISK is written with two
// decimals that are always 00).
//
// Errors: an *[provider.InvalidRequestError] naming Amount, refused before
// anything is sent, when Stripe cannot represent m: more decimal places
// than Stripe's exponent (10.50 MGA: zero-decimal at Stripe), a
// three-decimal amount (BHD, JOD, KWD, OMR, TND) whose last digit is not 0
// (1.235 KWD), or an amount beyond int64; and for the zero Money.
func ToAmount(m money.Money) (int64, error) {
	c := m.Currency()
	if c == "" {
		return 0, invalid("Amount", "has no currency")
	}
	u := unitOf(c)
	scaled := m.Amount().Shift(u.exponent)
	switch {
	case !scaled.IsInteger():
		return 0, invalid("Amount", fmt.Sprintf("%s has more decimal places than Stripe's %d for %s (%s)",
			m, u.exponent, c, currenciesDoc))
	case scaled.Abs().GreaterThan(maxAmount):
		return 0, invalid("Amount", fmt.Sprintf("%s is beyond the largest amount Stripe can be sent", m))
	}
	amount := scaled.IntPart()
	if amount%u.step != 0 {
		return 0, invalid("Amount", fmt.Sprintf("%s is sent to Stripe as %d, which Stripe refuses: %s amounts must be multiples of %d (%s)",
			m, amount, c, u.step, currenciesDoc))
	}
	return amount, nil
}

// FromAmount returns Stripe's integer amount in currency (Stripe's
// lowercase code, or any case) as Money, by Stripe's exponents: it is
// [ToAmount] reversed. 500000 "isk" is 5000 ISK, 1230 "kwd" 1.230 KWD.
//
// Errors (wrapping a *[money.Error]): a currency money does not know, or
// an amount money cannot hold exactly in ISO 4217's minor unit (ISK
// charges made in fractional krónur before Stripe stopped taking them,
// 500050 "isk").
func FromAmount(amount int64, currency string) (money.Money, error) {
	c, err := money.ParseCurrency(strings.ToUpper(currency))
	if err != nil {
		return money.Money{}, fmt.Errorf("stripe: amount %d %s: %w", amount, currency, err)
	}
	m, err := money.New(decimal.New(amount, -unitOf(c).exponent), c)
	if err != nil {
		return money.Money{}, fmt.Errorf("stripe: amount %d %s: %w", amount, currency, err)
	}
	return m, nil
}
