// Package good holds the comparisons fpcheck allows: it must report nothing.
package good

import (
	"crypto/hmac"
	"crypto/subtle"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/payonce/payonce/idempotency"
)

type record struct {
	Key         string
	Fingerprint idempotency.Fingerprint
	Body        []byte
}

type label string

func Allowed(a, b idempotency.Fingerprint, s string, recs []record) bool {
	_ = a.Equal(b)
	_ = !b.Equal(a)
	_ = a == ""         // presence
	_ = "" != b         // presence
	_ = string(a) == "" // presence
	_ = a != idempotency.Fingerprint("")
	_ = len(a) == 64           // length is public
	_ = a[0] == 'f'            // one byte, as Validate scans
	_ = a.Short() == b.Short() // hashes of hashes, safe to log and compare
	_ = subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
	_ = hmac.Equal([]byte(a), []byte(b))
	_ = strings.Contains(s, "x") && s == "plain" && label(s) == "x"
	switch a {
	case "":
	}
	switch {
	case a.Equal(b):
	}
	seen := map[idempotency.Fingerprint]bool{a: true}
	_ = seen[b]                             // a map compares keys after hashing
	_ = slices.Collect(maps.Keys(seen))     // K only keys a map
	_ = reflect.DeepEqual(recs[0], recs[1]) // whole records: a test's assertion of state
	_ = slices.ContainsFunc(recs, func(r record) bool { return r.Fingerprint.Equal(a) })
	var fingerprint string // a name proves nothing: only what it holds
	return fingerprint == s
}
