package idempotency

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"sort"
	"strconv"
	"strings"
)

// Fingerprint is the SHA-256, as 64 lowercase hex characters, of the
// canonical encoding of a request's significant fields. Build one with
// [NewFingerprint].
type Fingerprint string

// Equal compares two fingerprints in constant time.
func (f Fingerprint) Equal(g Fingerprint) bool {
	return subtle.ConstantTimeCompare([]byte(f), []byte(g)) == 1
}

// Validate reports whether f is 64 lowercase hex characters.
func (f Fingerprint) Validate() error {
	if len(f) != 64 {
		return invalid("fingerprint", "want 64 lowercase hex characters, got %d characters", len(f))
	}
	for i := 0; i < len(f); i++ {
		c := f[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return invalid("fingerprint", "character %d is not lowercase hex", i)
		}
	}
	return nil
}

// Short returns a prefix of the fingerprint's own hash, safe to log for
// correlation: it reveals nothing usable about the request.
func (f Fingerprint) Short() string { return ShortHash(string(f)) }

// ShortHash returns the first 12 hex characters of SHA-256(s), for logs:
// never log a full key, fingerprint or body.
func ShortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}

// FingerprintBuilder collects the significant fields of a request. Fields
// are named; their order of addition does not matter; each name may appear
// once. The encoding is unambiguous: every name and value is length
// prefixed and typed, so "a|b"+"c" and "a"+"b|c" never collide.
//
// The zero value is ready to use.
type FingerprintBuilder struct {
	fields map[string][]byte
	err    error
}

// NewFingerprint starts a fingerprint.
func NewFingerprint() *FingerprintBuilder { return &FingerprintBuilder{} }

func (b *FingerprintBuilder) add(name string, kind byte, value []byte) *FingerprintBuilder {
	if b.err != nil {
		return b
	}
	if name == "" {
		b.err = invalid("fingerprint field", "empty field name")
		return b
	}
	if b.fields == nil {
		b.fields = map[string][]byte{}
	}
	if _, dup := b.fields[name]; dup {
		b.err = invalid("fingerprint field "+strconv.Quote(name), "added twice")
		return b
	}
	v := make([]byte, 0, 1+len(value))
	v = append(v, kind)
	b.fields[name] = append(v, value...)
	return b
}

// String adds a string field, compared byte for byte.
func (b *FingerprintBuilder) String(name, value string) *FingerprintBuilder {
	return b.add(name, 's', []byte(value))
}

// Bytes adds a byte-string field.
func (b *FingerprintBuilder) Bytes(name string, value []byte) *FingerprintBuilder {
	return b.add(name, 'b', value)
}

// Int adds an integer field.
func (b *FingerprintBuilder) Int(name string, value int64) *FingerprintBuilder {
	return b.add(name, 'i', strconv.AppendInt(nil, value, 10))
}

// Bool adds a boolean field.
func (b *FingerprintBuilder) Bool(name string, value bool) *FingerprintBuilder {
	return b.add(name, 't', strconv.AppendBool(nil, value))
}

// Decimal adds a decimal amount given as a string ("49.99", "-0.5",
// "1e3"). Numerically equal values encode alike: "49.99", "49.990" and
// "+049.99" match. A malformed value is an error naming the field.
func (b *FingerprintBuilder) Decimal(name, value string) *FingerprintBuilder {
	if b.err != nil {
		return b
	}
	c, err := CanonicalDecimal(value)
	if err != nil {
		b.err = invalid("fingerprint field "+strconv.Quote(name), "%v", err)
		return b
	}
	return b.add(name, 'd', []byte(c))
}

// Sum returns the fingerprint, or the first error met while adding fields.
func (b *FingerprintBuilder) Sum() (Fingerprint, error) {
	if b.err != nil {
		return "", b.err
	}
	if len(b.fields) == 0 {
		return "", invalid("fingerprint", "no significant fields")
	}
	sum := sha256.Sum256(b.Encoding())
	return Fingerprint(hex.EncodeToString(sum[:])), nil
}

// Encoding returns the canonical encoding that Sum hashes: the fields in
// name order, each as len(name) name len(value) value with 8-byte
// big-endian lengths. Exposed for tests and audits.
func (b *FingerprintBuilder) Encoding() []byte {
	names := make([]string, 0, len(b.fields))
	for n := range b.fields {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []byte
	out = append(out, "payonce-fp-v1"...)
	for _, n := range names {
		out = binary.BigEndian.AppendUint64(out, uint64(len(n)))
		out = append(out, n...)
		v := b.fields[n]
		out = binary.BigEndian.AppendUint64(out, uint64(len(v)))
		out = append(out, v...)
	}
	return out
}

// maxDecimalDigits bounds the digits of a decimal amount (and its exponent),
// so that a hostile "1e999999999" cannot make canonicalisation allocate.
const maxDecimalDigits = 100

// CanonicalDecimal returns the canonical form of a decimal string: no sign
// for zero, no leading zeros in the integer part, no trailing zeros in the
// fraction, no exponent ("049.990" -> "49.99", "-0.0" -> "0", "1.5e2" ->
// "150"). It accepts an optional sign, digits with at most one point, and
// an optional exponent; nothing else (no spaces, no NaN or Inf).
func CanonicalDecimal(s string) (string, error) {
	orig := s
	bad := func(why string) (string, error) {
		return "", &InvalidError{Field: "decimal " + strconv.Quote(truncate(orig, 40)), Reason: why}
	}
	if s == "" {
		return bad("empty")
	}
	neg := false
	if s[0] == '+' || s[0] == '-' {
		neg = s[0] == '-'
		s = s[1:]
	}
	mant, exp := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, exp = s[:i], s[i+1:]
		if exp == "" {
			return bad("empty exponent")
		}
	}
	intPart, frac, hasPoint := strings.Cut(mant, ".")
	if intPart == "" && frac == "" {
		return bad("no digits")
	}
	if hasPoint && strings.Contains(frac, ".") {
		return bad("more than one decimal point")
	}
	if !allDigits(intPart) || !allDigits(frac) {
		return bad("not a decimal number")
	}
	if len(intPart)+len(frac) > maxDecimalDigits {
		return bad("too many digits")
	}
	e := 0
	if exp != "" {
		es := exp
		if es[0] == '+' || es[0] == '-' {
			es = es[1:]
		}
		if es == "" || !allDigits(es) || len(es) > 3 {
			return bad("malformed exponent")
		}
		n, _ := strconv.Atoi(exp)
		e = n
	}
	// digits × 10^(e - len(frac)), normalised.
	digits := strings.TrimLeft(intPart+frac, "0")
	scale := len(frac) - e // number of fraction digits
	if digits == "" {
		return "0", nil
	}
	// Drop trailing zeros of the fraction.
	for scale > 0 && strings.HasSuffix(digits, "0") {
		digits = digits[:len(digits)-1]
		scale--
	}
	if scale < 0 {
		if len(digits)-scale > maxDecimalDigits {
			return bad("too many digits")
		}
		digits += strings.Repeat("0", -scale)
		scale = 0
	}
	// The canonical form must itself be accepted (a fixed point): bound
	// the digits it will have, leading zeros of a fraction included.
	if max(len(digits), scale+1) > maxDecimalDigits {
		return bad("too many digits")
	}
	var out string
	if scale == 0 {
		out = digits
	} else {
		if len(digits) <= scale {
			digits = strings.Repeat("0", scale-len(digits)+1) + digits
		}
		out = digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
	}
	if neg {
		out = "-" + out
	}
	return out, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
