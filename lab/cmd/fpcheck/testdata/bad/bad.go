// Package bad holds every shape of fingerprint comparison fpcheck refuses;
// each line with a finding says so in a want comment (a regexp).
package bad

import (
	"bytes"
	"cmp"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/payonce/payonce/idempotency"
)

type fp = idempotency.Fingerprint

// MyFP is defined from a fingerprint: it is one.
type MyFP idempotency.Fingerprint

// Twice removed is still one.
type MyMyFP MyFP

// AliasFP names the same type.
type AliasFP = idempotency.Fingerprint

type slot struct {
	scope string
	fp    idempotency.Fingerprint
}

type row struct {
	key         string
	fingerprint string // holds string(fp): see Fill
}

func Fill(f fp) row { return row{key: "k", fingerprint: string(f)} }

func Direct(a, b fp, s string) bool {
	_ = a == b                          // want `== on idempotency.Fingerprint values`
	_ = a != b                          // want `!= on idempotency.Fingerprint values`
	_ = a < b                           // want `< on idempotency.Fingerprint values`
	_ = b >= a                          // want `>= on idempotency.Fingerprint values`
	_ = a == "0123456789abcdef"         // want `== on idempotency.Fingerprint values`
	_ = a == idempotency.Fingerprint(s) // want `== on idempotency.Fingerprint values`
	pa, pb := &a, &b
	_ = *pa == *pb        // want `== on idempotency.Fingerprint values`
	_ = (a) == (b)        // want `==`
	return a[:8] == b[:8] // want `== on idempotency.Fingerprint values`
}

func Converted(a fp, s string, raw []byte) bool {
	_ = string(a) == s                     // want `== on a fingerprint held as string`
	_ = s != string(a)                     // want `!= on a fingerprint held as string`
	_ = string(a[:12]) == s                // want `==`
	_ = any(a) == any(s)                   // want `== on a fingerprint held as any`
	_ = bytes.Equal([]byte(a), raw)        // want `bytes.Equal on a fingerprint held as \[\]byte`
	_ = bytes.HasPrefix(raw, []byte(a))    // want `bytes.HasPrefix`
	_ = strings.EqualFold(string(a), s)    // want `strings.EqualFold`
	_ = strings.Compare(s, string(a))      // want `strings.Compare`
	return strings.HasPrefix(string(a), s) // want `strings.HasPrefix`
}

func Held(a fp, s string, stored []byte) bool {
	x := string(a)
	_ = x == s     // want `== on a fingerprint held as string`
	_ = x[:8] == s // want `== on a fingerprint held as string`
	var y = []byte(a)
	_ = bytes.Equal(stored, y)     // want `bytes.Equal`
	_ = bytes.Equal(y[:4], stored) // want `bytes.Equal on a fingerprint held as \[\]byte`
	var z any = a
	_ = z == any(s) // want `== on a fingerprint held as any`
	var w string
	w = x
	_ = s == w // want `==`
	r := Fill(a)
	_ = r.fingerprint == s                    // want `== on a fingerprint held as string`
	return row{}.fingerprint != r.fingerprint // want `!=`
}

// Scanned: raw becomes a fingerprint by conversion below, so it holds one.
func Scanned(raw string, want fp) bool {
	if raw == "deadbeef" { // want `== on a fingerprint held as string`
		return false
	}
	return idempotency.Fingerprint(raw).Equal(want)
}

func Defined(a, b MyFP, c, d MyMyFP, e, f AliasFP) bool {
	_ = a == b    // want `== on bad.MyFP values`
	_ = c != d    // want `!= on bad.MyMyFP values`
	return e == f // want `== on idempotency.Fingerprint values`
}

func Composite(a, b slot, x, y [2]fp) bool {
	_ = a == b // want `== on bad.slot \(it holds idempotency.Fingerprint values\)`
	_ = x != y // want `!= on \[2\]bad.fp \(it holds idempotency.Fingerprint values\)`
	m := map[slot]int{}
	_ = m[a]           // a map key: looked up by hash, allowed
	return a == slot{} // want `==`
}

func Switches(a, b fp) int {
	switch a {
	case b: // want `switch case compares idempotency.Fingerprint values`
		return 1
	case "": // presence: allowed
		return 2
	}
	switch string(a) {
	case "abc", "": // want `switch case compares a fingerprint held as string`
		return 3
	}
	return 0
}

func same[T comparable](x, y T) bool { return x == y }

func ordered[T cmp.Ordered](x, y T) bool { return x < y }

func Generic(a, b fp, fps []fp, m1, m2 map[string]fp, slots []slot) bool {
	_ = slices.Contains(fps, a)        // want `slices.Contains instantiated with idempotency.Fingerprint for E comparable`
	_ = slices.Index(fps, a)           // want `slices.Index instantiated`
	_ = slices.Equal(fps, fps)         // want `slices.Equal instantiated`
	_ = slices.Contains(slots, slot{}) // want `slices.Contains instantiated with bad.slot`
	_ = maps.Equal(m1, m2)             // want `maps.Equal instantiated with idempotency.Fingerprint for V comparable`
	_ = cmp.Compare(a, b)              // want `cmp.Compare instantiated`
	_ = slices.Sorted(maps.Values(m1)) // want `slices.Sorted instantiated`
	_ = ordered(a, b)                  // want `bad.ordered instantiated`
	return same(a, b)                  // want `bad.same instantiated with idempotency.Fingerprint for T comparable`
}

func Deep(a, b fp, fps []fp, p *fp) bool {
	_ = reflect.DeepEqual(a, b)     // want `reflect.DeepEqual on idempotency.Fingerprint values`
	_ = reflect.DeepEqual(fps, fps) // want `reflect.DeepEqual`
	return reflect.DeepEqual(p, &b) // want `reflect.DeepEqual`
}
