package idempotency_test

import (
	"bytes"
	"errors"
	"math/big"
	"testing"

	"github.com/payonce/payonce/idempotency"
)

func TestFingerprintDecimalEquivalence(t *testing.T) {
	t.Parallel()
	sum := func(amount string) idempotency.Fingerprint {
		f, err := idempotency.NewFingerprint().Decimal("amount", amount).String("currency", "EUR").Sum()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	same := [][]string{
		{"49.99", "49.990", "+49.99", "049.99", "4999e-2", "0.4999E2"},
		{"0", "-0", "0.000", "+0.0", ".0", "0e5"},
		{"100", "1e2", "100.00", "1.00E+2"},
	}
	for _, group := range same {
		want := sum(group[0])
		for _, v := range group[1:] {
			if got := sum(v); !got.Equal(want) {
				t.Errorf("%q and %q fingerprint differently", group[0], v)
			}
		}
	}
	if sum("49.99").Equal(sum("49.9")) || sum("1").Equal(sum("-1")) {
		t.Error("different amounts fingerprint alike")
	}
	for _, bad := range []string{"", "abc", "1.2.3", "NaN", "Inf", " 1", "1 ", "1e", "1e9999", "--1", "0x10", "1,5", "."} {
		_, err := idempotency.NewFingerprint().Decimal("amount", bad).Sum()
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || !bytes.Contains([]byte(ie.Field), []byte("amount")) {
			t.Errorf("Decimal(%q): err = %v, want an error naming the field", bad, err)
		}
	}
}

func TestFingerprintFieldsUnambiguous(t *testing.T) {
	t.Parallel()
	a, _ := idempotency.NewFingerprint().String("x", "a|b").String("y", "c").Sum()
	b, _ := idempotency.NewFingerprint().String("x", "a").String("y", "b|c").Sum()
	if a.Equal(b) {
		t.Fatal(`"a|b"+"c" collides with "a"+"b|c"`)
	}
	// Order of addition does not matter.
	c, _ := idempotency.NewFingerprint().String("y", "c").String("x", "a|b").Sum()
	if !a.Equal(c) {
		t.Fatal("field order changed the fingerprint")
	}
	// Types are part of the encoding.
	d, _ := idempotency.NewFingerprint().String("n", "1").Sum()
	e, _ := idempotency.NewFingerprint().Int("n", 1).Sum()
	if d.Equal(e) {
		t.Fatal("string and int fields collide")
	}
	if _, err := idempotency.NewFingerprint().String("x", "1").String("x", "2").Sum(); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("duplicate field: %v", err)
	}
	if _, err := idempotency.NewFingerprint().Sum(); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("no fields: %v", err)
	}
	if err := a.Validate(); err != nil || len(a) != 64 {
		t.Fatalf("fingerprint %q: %v", a, err)
	}
}

// FuzzFingerprintEncoding: two field lists encode alike exactly when they
// are equal, whatever bytes their names and values hold.
func FuzzFingerprintEncoding(f *testing.F) {
	f.Add("a", "b|c", "a|b", "c")
	f.Add("x", "", "", "x")
	f.Add("k", "v", "k", "v")
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string) {
		if n1 == "" || n2 == "" {
			return
		}
		e1 := idempotency.NewFingerprint().String(n1, v1).Encoding()
		e2 := idempotency.NewFingerprint().String(n2, v2).Encoding()
		if bytes.Equal(e1, e2) != (n1 == n2 && v1 == v2) {
			t.Fatalf("(%q,%q) vs (%q,%q): encodings equal=%v", n1, v1, n2, v2, bytes.Equal(e1, e2))
		}
		if n1 != n2 {
			p1 := idempotency.NewFingerprint().String(n1, v1).String(n2, v2).Encoding()
			p2 := idempotency.NewFingerprint().String(n1, v1+n2).String(n2, v2).Encoding()
			if bytes.Equal(p1, p2) && n2 != "" {
				t.Fatalf("moving bytes across a field boundary kept the encoding")
			}
		}
	})
}

// FuzzCanonicalDecimal: canonicalisation agrees with exact arithmetic:
// two strings canonicalise alike exactly when they are the same number,
// and the canonical form is a fixed point.
func FuzzCanonicalDecimal(f *testing.F) {
	f.Add("49.99", "49.990")
	f.Add("-0", "0")
	f.Add("1e2", "100")
	f.Add(".5", "0.50")
	f.Add("1.", "1")
	f.Fuzz(func(t *testing.T, a, b string) {
		ca, errA := idempotency.CanonicalDecimal(a)
		cb, errB := idempotency.CanonicalDecimal(b)
		if errA != nil || errB != nil {
			return
		}
		ra, ok1 := new(big.Rat).SetString(ca)
		rb, ok2 := new(big.Rat).SetString(cb)
		if !ok1 || !ok2 {
			t.Fatalf("canonical forms %q %q are not numbers", ca, cb)
		}
		if (ca == cb) != (ra.Cmp(rb) == 0) {
			t.Fatalf("%q -> %q and %q -> %q disagree with exact comparison", a, ca, b, cb)
		}
		if again, err := idempotency.CanonicalDecimal(ca); err != nil || again != ca {
			t.Fatalf("canonical form %q is not a fixed point: %q %v", ca, again, err)
		}
	})
}
