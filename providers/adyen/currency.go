package adyen

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/payonce/payonce/money"
)

// decimalsNotISO lists the currencies whose amount.value Adyen counts with another number of
// decimals than ISO 4217, which package money follows. Adyen's "Currency codes and minor
// units" page (https://docs.adyen.com/development-resources/currency-codes) marks them
// "differs from standard": CLP and ISK take 2 decimals (ISO: 0), CVE and IDR take 0 (ISO: 2).
// Every other currency takes its ISO 4217 exponent there.
var decimalsNotISO = map[money.Currency]int{
	"CLP": 2,
	"CVE": 0,
	"IDR": 0,
	"ISK": 2,
}

// Decimals is the number of decimals of Adyen's amount.value in currency c, which Adyen
// documents on https://docs.adyen.com/development-resources/currency-codes: the ISO 4217
// exponent, except 2 for CLP and ISK and 0 for CVE and IDR. So 1000 CVE is value 1000 (not
// 100000) and 1000 CLP is value 100000 (not 1000). Errors: the *money.Error of a currency
// money does not know.
func Decimals(c money.Currency) (int, error) {
	iso, err := c.MinorUnits()
	if err != nil {
		return 0, err
	}
	if d, ok := decimalsNotISO[money.Currency(strings.ToUpper(string(c)))]; ok {
		return d, nil
	}
	return iso, nil
}

// toAmount is m in Adyen's terms: its currency and its value in Adyen's minor units
// ([Decimals]). It refuses, naming field, what Adyen cannot be sent: no currency, a
// non-positive amount, or an amount finer than Adyen's decimals (1000.50 CVE: Adyen takes
// whole escudos), all before anything is sent.
func toAmount(field string, m money.Money) (Amount, error) {
	if m.Currency() == "" {
		return Amount{}, invalid(field, "has no currency")
	}
	if !m.IsPositive() {
		return Amount{}, invalid(field, fmt.Sprintf("must be positive, got %s", m))
	}
	d, err := Decimals(m.Currency())
	if err != nil {
		return Amount{}, invalid(field, err.Error())
	}
	v := m.Amount().Shift(int32(d))
	if !v.IsInteger() {
		return Amount{}, invalid(field, fmt.Sprintf("is %s, which Adyen cannot represent: Adyen counts %s with %d decimals "+
			"(https://docs.adyen.com/development-resources/currency-codes)", m, m.Currency(), d))
	}
	if v.GreaterThan(decimal.NewFromInt(math.MaxInt64)) {
		return Amount{}, invalid(field, fmt.Sprintf("is %s, beyond Adyen's value range in %s", m, m.Currency()))
	}
	return Amount{Currency: string(m.Currency()), Value: v.IntPart()}, nil
}

// errAmount is wrapped by fromAmount's errors.
var errAmount = errors.New("adyen: amount payonce cannot represent")

// fromAmount reads an amount Adyen sent: value in Adyen's minor units of currency
// ([Decimals]). Errors (wrapping errAmount): a currency money does not know, or a value finer
// than the currency's ISO 4217 exponent (100050 CLP is 1000.50 CLP, which money refuses).
func fromAmount(a Amount) (money.Money, error) {
	c, err := money.ParseCurrency(a.Currency)
	if err != nil {
		return money.Money{}, fmt.Errorf("%w: amount.currency %q: %v", errAmount, a.Currency, err)
	}
	d, err := Decimals(c)
	if err != nil {
		return money.Money{}, fmt.Errorf("%w: %v", errAmount, err)
	}
	m, err := money.New(decimal.New(a.Value, -int32(d)), c)
	if err != nil {
		return money.Money{}, fmt.Errorf("%w: amount.value %d %s (%d decimals at Adyen): %v", errAmount, a.Value, c, d, err)
	}
	return m, nil
}

// amountOr is Adyen's amount as Money, or fallback when it cannot be read (it cannot happen for
// an amount Adyen echoes: it is the one we sent).
func amountOr(a Amount, fallback money.Money) money.Money {
	m, err := fromAmount(a)
	if err != nil {
		return fallback
	}
	return m
}
