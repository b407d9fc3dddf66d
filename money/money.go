// Package money is payonce's one representation of an amount of money: an
// exact decimal ([github.com/shopspring/decimal]) in an ISO 4217 currency.
// The ledger and the payment providers share it.
//
// A [Money] is only ever built by a constructor that checks it, so every
// Money in the program is exact in its currency: it has no more decimal
// places than the currency's minor unit (EUR 2, JPY 0, KWD 3) and fits in
// int64 minor units, the amounts Stripe and Adyen exchange. Constructors
// refuse rather than round, with an *[Error] that names the value:
//
//   - [Parse] reads decimal strings (PayPal's "value": "10.50");
//   - [FromMinor] reads minor-unit integers (Stripe's and Adyen's 1050);
//   - [New] takes a decimal.Decimal.
//
// [Money.AmountString] and [Money.Minor] convert back, and both directions
// round-trip exactly. There is no float anywhere.
//
// Money is signed: ledger postings are negative for credits. A charge or
// refund amount must be positive: check it with [Money.CheckCharge].
package money

import (
	"math"
	"strings"

	"github.com/shopspring/decimal"
)

// Money is an exact amount in a currency. The zero value has no currency
// and is refused wherever an amount is required; build values with [New],
// [Parse], [FromMinor] or [MustParse].
type Money struct {
	amount decimal.Decimal // exponent is always -minor units of cur
	cur    Currency
}

var maxMinor = decimal.NewFromInt(math.MaxInt64)

// maxParseLen bounds the length of strings Parse reads: the largest amount
// has 19 digits, so anything much longer is out of range or malformed.
const maxParseLen = 48

// New returns amount in currency c.
//
// Errors (as *[Error]): [ErrUnknownCurrency], [ErrTooPrecise] when amount
// has more decimal places than c allows (trailing zeros do not count:
// 12.500 EUR is 12.50 EUR), [ErrOutOfRange] beyond ±(2^63-1) minor units.
func New(amount decimal.Decimal, c Currency) (Money, error) {
	cur, units, err := c.canonical()
	if err != nil {
		return Money{}, err
	}
	return build(amount, cur, units, amount.String())
}

func build(amount decimal.Decimal, cur Currency, units int32, value string) (Money, error) {
	minor := amount.Shift(units)
	if !minor.IsInteger() {
		places := 0
		if _, frac, ok := strings.Cut(amount.String(), "."); ok {
			places = len(frac)
		}
		return Money{}, newError(ErrTooPrecise, value, cur,
			plural(places, "decimal place")+", "+string(cur)+" allows "+itoa(int(units)))
	}
	if minor.Abs().GreaterThan(maxMinor) {
		return Money{}, newError(ErrOutOfRange, value, cur, "beyond ±9223372036854775807 minor units")
	}
	return Money{amount: decimal.NewFromBigInt(minor.BigInt(), -units), cur: cur}, nil
}

// FromMinor returns minor minor units of c: FromMinor(1050, EUR) is 10.50
// EUR, FromMinor(1050, JPY) is 1050 JPY.
//
// Errors (as *[Error]): [ErrUnknownCurrency]; [ErrOutOfRange] for
// math.MinInt64, whose negation does not fit in int64.
func FromMinor(minor int64, c Currency) (Money, error) {
	cur, units, err := c.canonical()
	if err != nil {
		return Money{}, err
	}
	if minor == math.MinInt64 {
		return Money{}, newError(ErrOutOfRange, itoa64(minor), cur, "beyond ±9223372036854775807 minor units")
	}
	return Money{amount: decimal.New(minor, -units), cur: cur}, nil
}

// Parse reads a plain decimal string in currency c: an optional '-', one or
// more digits, and optionally '.' and one or more digits ("10.50", "-3",
// "1000", "0.125"). It accepts fewer decimal places than the currency has
// ("10.5" EUR is 10.50 EUR) and trailing zeros beyond them ("10.500").
//
// Errors (as *[Error]): [ErrUnknownCurrency]; [ErrMalformed] for anything
// else, including "", " 1", "+1", "1e3", "1.", ".5", "1,000", "NaN",
// "Inf"; [ErrTooPrecise] for significant digits beyond the currency's
// minor unit ("10.505" EUR); [ErrOutOfRange] beyond ±(2^63-1) minor units.
func Parse(amount string, c Currency) (Money, error) {
	cur, units, err := c.canonical()
	if err != nil {
		return Money{}, err
	}
	if detail := checkSyntax(amount); detail != "" {
		return Money{}, newError(ErrMalformed, amount, cur, detail)
	}
	d, err := decimal.NewFromString(amount)
	if err != nil { // unreachable after checkSyntax; kept as a guard
		return Money{}, newError(ErrMalformed, amount, cur, err.Error())
	}
	return build(d, cur, units, amount)
}

// checkSyntax returns why s is not -?[0-9]+(\.[0-9]+)?, or "".
func checkSyntax(s string) string {
	const want = "want digits with an optional leading '-' and '.' fraction, e.g. 12.50"
	switch {
	case s == "":
		return "empty; " + want
	case len(s) > maxParseLen:
		return "longer than " + itoa(maxParseLen) + " characters"
	}
	i := 0
	if s[0] == '-' {
		i = 1
	}
	intDigits, fracDigits, dot := 0, 0, false
	for ; i < len(s); i++ {
		switch b := s[i]; {
		case b >= '0' && b <= '9':
			if dot {
				fracDigits++
			} else {
				intDigits++
			}
		case b == '.' && !dot:
			dot = true
		default:
			return want
		}
	}
	if intDigits == 0 || (dot && fracDigits == 0) {
		return want
	}
	return ""
}

// MustParse is [Parse] that panics on error, for constants in tests and
// examples.
func MustParse(amount string, c Currency) Money {
	m, err := Parse(amount, c)
	if err != nil {
		panic(err)
	}
	return m
}

// Amount returns the exact decimal amount, with as many decimal places as
// the currency's minor unit.
func (m Money) Amount() decimal.Decimal { return m.amount }

// Currency returns the currency, "" for the zero Money.
func (m Money) Currency() Currency { return m.cur }

// Minor returns the amount in minor units (cents for EUR, yen for JPY,
// fils for KWD), exactly: 10.50 EUR is 1050.
func (m Money) Minor() int64 {
	return m.amount.CoefficientInt64() // exponent is -minor units and |coefficient| < 2^63
}

// AmountString formats the amount with exactly the currency's number of
// decimal places ("10.50" EUR, "1050" JPY, "1.500" KWD), the form PayPal
// expects. [Parse] reads it back to the same Money.
func (m Money) AmountString() string {
	return m.amount.StringFixed(-m.amount.Exponent())
}

// String formats the amount and currency: "10.50 EUR".
func (m Money) String() string {
	if m.cur == "" {
		return "0"
	}
	return m.AmountString() + " " + string(m.cur)
}

// Sign returns -1, 0 or +1.
func (m Money) Sign() int { return m.amount.Sign() }

// IsZero reports whether the amount is zero.
func (m Money) IsZero() bool { return m.amount.IsZero() }

// IsPositive reports whether the amount is above zero.
func (m Money) IsPositive() bool { return m.amount.IsPositive() }

// IsNegative reports whether the amount is below zero.
func (m Money) IsNegative() bool { return m.amount.IsNegative() }

// Neg returns the amount with its sign flipped, in the same currency. It
// cannot overflow: the range is symmetric.
func (m Money) Neg() Money { return Money{amount: m.amount.Neg(), cur: m.cur} }

// Equal reports whether m and o are the same amount in the same currency.
func (m Money) Equal(o Money) bool { return m.cur == o.cur && m.amount.Equal(o.amount) }

// Add returns m + o.
//
// Errors (as *[Error]): [ErrCurrencyMismatch], [ErrOutOfRange],
// [ErrUnknownCurrency] for a zero Money.
func (m Money) Add(o Money) (Money, error) {
	if m.cur != o.cur {
		return Money{}, newError(ErrCurrencyMismatch, string(m.cur), o.cur, "")
	}
	_, units, err := m.cur.canonical()
	if err != nil {
		return Money{}, err
	}
	sum := m.amount.Add(o.amount)
	return build(sum, m.cur, units, sum.String())
}

// Sub returns m - o, with the errors of [Money.Add].
func (m Money) Sub(o Money) (Money, error) { return m.Add(o.Neg()) }

// CheckCharge returns nil when m can be charged or refunded: a positive
// amount in a known currency.
//
// Errors (as *[Error]): [ErrNotPositive] for zero or negative amounts,
// [ErrUnknownCurrency] for the zero Money.
func (m Money) CheckCharge() error {
	if _, err := m.cur.MinorUnits(); err != nil {
		return err
	}
	if !m.IsPositive() {
		return newError(ErrNotPositive, m.AmountString(), m.cur, "a charge or refund needs an amount above zero")
	}
	return nil
}
