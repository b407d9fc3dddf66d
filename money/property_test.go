package money

import (
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

var genCurrency = rapid.SampledFrom(Currencies())

// genMinor favours the edges of the range as well as ordinary amounts.
var genMinor = rapid.OneOf(
	rapid.Int64Range(-100_000, 100_000),
	rapid.Int64Range(-math.MaxInt64, math.MaxInt64),
	rapid.SampledFrom([]int64{0, 1, -1, math.MaxInt64, -math.MaxInt64, math.MaxInt64 - 1}),
)

// Minor units -> Money -> decimal string -> Money -> minor units is the
// identity, and the string has exactly the currency's decimal places.
func TestPropertyRoundTrip(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		c := genCurrency.Draw(t, "currency")
		minor := genMinor.Draw(t, "minor")
		m, err := FromMinor(minor, c)
		if err != nil {
			t.Fatalf("FromMinor(%d, %s): %v", minor, c, err)
		}
		s := m.AmountString()
		units, _ := c.MinorUnits()
		if _, frac, ok := strings.Cut(s, "."); (units == 0 && ok) || (units > 0 && len(frac) != units) {
			t.Fatalf("AmountString %q has the wrong number of decimals for %s", s, c)
		}
		back, err := Parse(s, c)
		if err != nil {
			t.Fatalf("Parse(%q, %s): %v", s, c, err)
		}
		if !back.Equal(m) || back.Minor() != minor || back.AmountString() != s {
			t.Fatalf("round trip %d %s -> %q -> %d", minor, c, s, back.Minor())
		}
		again, err := New(m.Amount(), c)
		if err != nil || !again.Equal(m) {
			t.Fatalf("New(Amount()) = %v, %v; want %v", again, err, m)
		}
	})
}

// Any string of digits, sign and point either parses to a value whose
// formatting reads back the same, or is refused with one of the documented
// errors; nothing panics and nothing is rounded.
func TestPropertyParseRefusesOrIsExact(t *testing.T) {
	t.Parallel()
	genChars := rapid.StringOfN(rapid.SampledFrom([]rune("0123456789.-+eE ,NaIf")), 0, 30, -1)
	rapid.Check(t, func(t *rapid.T) {
		c := genCurrency.Draw(t, "currency")
		s := genChars.Draw(t, "amount")
		m, err := Parse(s, c)
		if err != nil {
			for _, kind := range []error{ErrMalformed, ErrTooPrecise, ErrOutOfRange} {
				if errors.Is(err, kind) {
					return
				}
			}
			t.Fatalf("Parse(%q, %s) error %v is none of the documented kinds", s, c, err)
		}
		if !m.Amount().Equal(mustDecimal(t, s)) {
			t.Fatalf("Parse(%q, %s) = %s: the value changed", s, c, m.AmountString())
		}
		back, err := Parse(m.AmountString(), c)
		if err != nil || !back.Equal(m) {
			t.Fatalf("re-parse of %q: %v, %v", m.AmountString(), back, err)
		}
	})
}

// Add and Sub agree with exact integer arithmetic on minor units: the
// result is the exact sum or difference when it fits in ±(2^63-1) minor
// units, and ErrOutOfRange otherwise (never a wrapped int64).
func TestPropertyArithmetic(t *testing.T) {
	t.Parallel()
	limit := big.NewInt(math.MaxInt64)
	rapid.Check(t, func(t *rapid.T) {
		c := genCurrency.Draw(t, "currency")
		a := genMinor.Draw(t, "a")
		b := genMinor.Draw(t, "b")
		ma, err := FromMinor(a, c)
		if err != nil {
			t.Fatalf("FromMinor(%d, %s): %v", a, c, err)
		}
		mb, err := FromMinor(b, c)
		if err != nil {
			t.Fatalf("FromMinor(%d, %s): %v", b, c, err)
		}
		check := func(op string, got Money, err error, want *big.Int) {
			if new(big.Int).Abs(want).Cmp(limit) > 0 {
				if !errors.Is(err, ErrOutOfRange) {
					t.Fatalf("%d %s %d = %v, %v; want ErrOutOfRange", a, op, b, got.Minor(), err)
				}
				return
			}
			if err != nil || got.Minor() != want.Int64() {
				t.Fatalf("%d %s %d = %v, %v; want %s", a, op, b, got.Minor(), err, want)
			}
		}
		sum, err := ma.Add(mb)
		check("+", sum, err, new(big.Int).Add(big.NewInt(a), big.NewInt(b)))
		diff, err := ma.Sub(mb)
		check("-", diff, err, new(big.Int).Sub(big.NewInt(a), big.NewInt(b)))
	})
}
