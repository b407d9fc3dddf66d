package money

import (
	"github.com/shopspring/decimal"
	"pgregory.net/rapid"
)

func mustDecimal(t *rapid.T, s string) decimal.Decimal {
	d, err := decimal.NewFromString(s)
	if err != nil {
		t.Fatalf("decimal.NewFromString(%q): %v", s, err)
	}
	return d
}
