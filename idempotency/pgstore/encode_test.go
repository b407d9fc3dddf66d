package pgstore_test

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
)

// The stored headers' JSON is json.Marshal's, byte for byte, whatever the
// names and values hold: what an older version stored and what this one
// stores decode alike, and nothing a header holds changes its meaning.
func TestEncodeResponseIsJSONMarshal(t *testing.T) {
	check := func(h http.Header) {
		t.Helper()
		got, err := pgstore.EncodeResponse(idempotency.Response{Code: 200, Header: h})
		if err != nil {
			t.Fatalf("%q: %v", h, err)
		}
		want, err := pgstore.ResponseMetaJSON(h)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("headers %q:\n got %s\nwant %s", h, got, want)
		}
	}
	check(http.Header{"Content-Type": {"application/json"}})
	check(http.Header{"X-B": {"2", "3"}, "X-A": {"1"}, "Location": {"/orders/ord_1?x=1&y=<2>"}})
	check(http.Header{"Nil": nil, "Empty": {}, "Blank": {""}})
	check(http.Header{"Quote\"d": {`a "b" \c`}, "Ctl": {"a\tb\nc\x00"}, "Uni": {"café ✓", "\xff\xfe"}, "Del": {"\x7f"}})
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("aZ09-_/ .:;=,\"\\<>&\t\n\x00\x7f\xc3\xa9\xff")
	str := func() string {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for range 2000 {
		h := http.Header{}
		for range 1 + rng.IntN(4) {
			var vs []string
			for range rng.IntN(3) {
				vs = append(vs, str())
			}
			h[str()] = vs
		}
		check(h)
	}
	if meta, err := pgstore.EncodeResponse(idempotency.Response{Code: 204}); meta != nil || err != nil {
		t.Fatalf("no headers: %q %v, want NULL", meta, err)
	}
}
