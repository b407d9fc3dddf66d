package money

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

func TestMinorUnits(t *testing.T) {
	t.Parallel()
	for c, want := range map[Currency]int{"EUR": 2, "USD": 2, "JPY": 0, "KRW": 0, "KWD": 3, "BHD": 3, "CLF": 4, "eur": 2} {
		got, err := c.MinorUnits()
		if err != nil || got != want {
			t.Errorf("%s.MinorUnits() = %d, %v; want %d", c, got, err, want)
		}
	}
	for _, c := range []Currency{"", "XYZ", "EURO", "XAU", "E"} {
		if _, err := c.MinorUnits(); !errors.Is(err, ErrUnknownCurrency) {
			t.Errorf("%q.MinorUnits() error = %v; want ErrUnknownCurrency", c, err)
		}
	}
}

func TestParseCurrency(t *testing.T) {
	t.Parallel()
	c, err := ParseCurrency("eur")
	if err != nil || c != EUR {
		t.Fatalf("ParseCurrency(eur) = %q, %v", c, err)
	}
	_, err = ParseCurrency("XYZ")
	if !errors.Is(err, ErrUnknownCurrency) || !strings.Contains(err.Error(), `"XYZ"`) {
		t.Fatalf("ParseCurrency(XYZ) error = %v; want ErrUnknownCurrency naming the value", err)
	}
	if n := len(Currencies()); n < 150 {
		t.Fatalf("Currencies() has %d entries; want the whole ISO 4217 table", n)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	ok := []struct {
		in    string
		cur   Currency
		minor int64
		out   string
	}{
		{"10.50", EUR, 1050, "10.50"},
		{"10.5", EUR, 1050, "10.50"},
		{"10.500", EUR, 1050, "10.50"},
		{"10", EUR, 1000, "10.00"},
		{"-3", EUR, -300, "-3.00"},
		{"-0.00", EUR, 0, "0.00"},
		{"0.01", USD, 1, "0.01"},
		{"1050", JPY, 1050, "1050"},
		{"1050.0", JPY, 1050, "1050"},
		{"1.500", KWD, 1500, "1.500"},
		{"0.001", BHD, 1, "0.001"},
		{"92233720368547758.07", EUR, math.MaxInt64, "92233720368547758.07"},
		{"-92233720368547758.07", EUR, -math.MaxInt64, "-92233720368547758.07"},
		{"9223372036854775807", JPY, math.MaxInt64, "9223372036854775807"},
		{"10.50", "eur", 1050, "10.50"},
	}
	for _, tc := range ok {
		m, err := Parse(tc.in, tc.cur)
		if err != nil {
			t.Errorf("Parse(%q, %s): %v", tc.in, tc.cur, err)
			continue
		}
		if m.Minor() != tc.minor || m.AmountString() != tc.out {
			t.Errorf("Parse(%q, %s) = %d minor, %q; want %d, %q", tc.in, tc.cur, m.Minor(), m.AmountString(), tc.minor, tc.out)
		}
	}

	bad := []struct {
		in   string
		cur  Currency
		kind error
	}{
		{"10.505", EUR, ErrTooPrecise},
		{"0.001", USD, ErrTooPrecise},
		{"1.5", JPY, ErrTooPrecise},
		{"0.0001", KWD, ErrTooPrecise},
		{"92233720368547758.08", EUR, ErrOutOfRange},
		{"-92233720368547758.08", EUR, ErrOutOfRange},
		{"9223372036854775808", JPY, ErrOutOfRange},
		{"1" + strings.Repeat("0", 60), EUR, ErrMalformed},
		{"", EUR, ErrMalformed},
		{" 1", EUR, ErrMalformed},
		{"1 ", EUR, ErrMalformed},
		{"+1", EUR, ErrMalformed},
		{"1e3", EUR, ErrMalformed},
		{"1E3", EUR, ErrMalformed},
		{"1.", EUR, ErrMalformed},
		{".5", EUR, ErrMalformed},
		{"-", EUR, ErrMalformed},
		{"--1", EUR, ErrMalformed},
		{"1,000.00", EUR, ErrMalformed},
		{"1.000,00", EUR, ErrMalformed},
		{"1.2.3", EUR, ErrMalformed},
		{"NaN", EUR, ErrMalformed},
		{"nan", EUR, ErrMalformed},
		{"Inf", EUR, ErrMalformed},
		{"-Infinity", EUR, ErrMalformed},
		{"0x10", EUR, ErrMalformed},
		{"１", EUR, ErrMalformed},
		{"10.50", "XYZ", ErrUnknownCurrency},
		{"10.50", "", ErrUnknownCurrency},
	}
	for _, tc := range bad {
		_, err := Parse(tc.in, tc.cur)
		if !errors.Is(err, tc.kind) {
			t.Errorf("Parse(%q, %q) error = %v; want %v", tc.in, tc.cur, err, tc.kind)
			continue
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("Parse(%q, %q) error %T is not *Error", tc.in, tc.cur, err)
		}
		want := tc.in
		if tc.kind == ErrUnknownCurrency {
			want = string(tc.cur)
		}
		if len(want) > maxValueLen {
			want = want[:maxValueLen]
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q, %q) error %q does not name the value", tc.in, tc.cur, err)
		}
	}
}

func TestTooPreciseMessage(t *testing.T) {
	t.Parallel()
	_, err := Parse("12.345", EUR)
	if got, want := err.Error(), `money: too many decimal places for the currency: "12.345" EUR: 3 decimal places, EUR allows 2`; got != want {
		t.Fatalf("error = %q\nwant    %q", got, want)
	}
}

func TestFromMinor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		minor int64
		cur   Currency
		out   string
	}{
		{1050, EUR, "10.50"}, {1050, JPY, "1050"}, {1050, KWD, "1.050"}, {-1, USD, "-0.01"}, {0, EUR, "0.00"},
		{math.MaxInt64, EUR, "92233720368547758.07"}, {-math.MaxInt64, BHD, "-9223372036854775.807"},
	} {
		m, err := FromMinor(tc.minor, tc.cur)
		if err != nil || m.AmountString() != tc.out || m.Minor() != tc.minor {
			t.Errorf("FromMinor(%d, %s) = %q (%d), %v; want %q", tc.minor, tc.cur, m.AmountString(), m.Minor(), err, tc.out)
		}
	}
	if _, err := FromMinor(math.MinInt64, EUR); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("FromMinor(MinInt64) error = %v; want ErrOutOfRange", err)
	}
	if _, err := FromMinor(1, "ABC"); !errors.Is(err, ErrUnknownCurrency) {
		t.Errorf("FromMinor(1, ABC) error = %v; want ErrUnknownCurrency", err)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	m, err := New(decimal.RequireFromString("19.990"), USD)
	if err != nil || m.String() != "19.99 USD" {
		t.Fatalf("New(19.990 USD) = %v, %v", m, err)
	}
	if _, err := New(decimal.RequireFromString("19.999"), USD); !errors.Is(err, ErrTooPrecise) {
		t.Fatalf("New(19.999 USD) error = %v; want ErrTooPrecise", err)
	}
	if _, err := New(decimal.New(1, 30), USD); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("New(1e30 USD) error = %v; want ErrOutOfRange", err)
	}
}

func TestCheckCharge(t *testing.T) {
	t.Parallel()
	if err := MustParse("0.01", EUR).CheckCharge(); err != nil {
		t.Fatalf("CheckCharge(0.01 EUR) = %v", err)
	}
	for _, s := range []string{"0", "-0.01", "-100"} {
		err := MustParse(s, EUR).CheckCharge()
		if !errors.Is(err, ErrNotPositive) || !strings.Contains(err.Error(), "EUR") {
			t.Errorf("CheckCharge(%s EUR) = %v; want ErrNotPositive naming the amount", s, err)
		}
	}
	if err := (Money{}).CheckCharge(); !errors.Is(err, ErrUnknownCurrency) {
		t.Errorf("CheckCharge(Money{}) = %v; want ErrUnknownCurrency", err)
	}
}

func TestArithmetic(t *testing.T) {
	t.Parallel()
	a, b := MustParse("10.50", EUR), MustParse("0.75", EUR)
	sum, err := a.Add(b)
	if err != nil || sum.String() != "11.25 EUR" {
		t.Fatalf("Add = %v, %v", sum, err)
	}
	diff, err := b.Sub(a)
	if err != nil || diff.String() != "-9.75 EUR" {
		t.Fatalf("Sub = %v, %v", diff, err)
	}
	if _, err := a.Add(MustParse("1", USD)); !errors.Is(err, ErrCurrencyMismatch) {
		t.Fatalf("Add across currencies error = %v; want ErrCurrencyMismatch", err)
	}
	max, _ := FromMinor(math.MaxInt64, EUR)
	if _, err := max.Add(MustParse("0.01", EUR)); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("overflowing Add error = %v; want ErrOutOfRange", err)
	}
	if !a.Neg().Neg().Equal(a) || a.Equal(MustParse("10.50", USD)) {
		t.Fatal("Neg/Equal misbehave")
	}
}
