package money

import (
	"errors"
	"math"
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

// Add and Sub agree with integer arithmetic on minor units.
func TestPropertyArithmetic(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		c := genCurrency.Draw(t, "currency")
		a := rapid.Int64Range(-1<<62, 1<<62).Draw(t, "a")
		b := rapid.Int64Range(-1<<62, 1<<62).Draw(t, "b")
		ma, _ := FromMinor(a, c)
		mb, _ := FromMinor(b, c)
		sum, err := ma.Add(mb)
		if err != nil || sum.Minor() != a+b {
			t.Fatalf("%d + %d = %v, %v", a, b, sum.Minor(), err)
		}
		diff, err := ma.Sub(mb)
		if err != nil || diff.Minor() != a-b {
			t.Fatalf("%d - %d = %v, %v", a, b, diff.Minor(), err)
		}
	})
}
