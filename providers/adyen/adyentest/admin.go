package adyentest

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// Counts is how many objects really exist at the fake for a reference or an idempotency key:
// the ground truth for exactly-once assertions. Every payment counts, whatever its resultCode;
// every refund, capture and cancel request that was received counts, whatever its outcome.
type Counts struct {
	Payments int `json:"payments"`
	Refunds  int `json:"refunds"`
	Captures int `json:"captures"`
	Cancels  int `json:"cancels"`
}

// Total is the money moved in one currency, in minor units.
type Total struct {
	Authorised int64 `json:"authorised"` // payments Authorised and not cancelled (auto-capture)
	Refunded   int64 `json:"refunded"`   // successful refunds
	Net        int64 `json:"net"`        // Authorised - Refunded
}

func (c *Counts) add(kind string) {
	switch kind {
	case "refund":
		c.Refunds++
	case "capture":
		c.Captures++
	case "cancel":
		c.Cancels++
	}
}

// Counts counts the payments whose reference is reference, and the refunds, captures and
// cancels whose own reference is reference; a cancel also counts under its paymentReference.
// Replays create nothing and are not counted.
func (s *Server) Counts(reference string) Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c Counts
	for _, p := range s.porder {
		if p.reference == reference {
			c.Payments++
		}
	}
	for _, m := range s.mods {
		if m.reference == reference || m.paymentReference == reference {
			c.add(m.kind)
		}
	}
	return c
}

// CountsByIdempotencyKey counts the objects created by requests that carried the
// Idempotency-Key key (under any API key).
func (s *Server) CountsByIdempotencyKey(key string) Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c Counts
	for _, p := range s.porder {
		if p.idempotencyKey == key {
			c.Payments++
		}
	}
	for _, m := range s.mods {
		if m.idempotencyKey == key {
			c.add(m.kind)
		}
	}
	return c
}

// Totals returns, per currency code, the money authorised (and, the fake's payments being
// auto-captured, moved) and refunded, for comparison with a ledger.
func (s *Server) Totals() map[string]Total {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Total{}
	for _, p := range s.porder {
		if !p.authorised || p.resultCode == "Cancelled" {
			continue
		}
		t := out[p.amount.Currency]
		t.Authorised += p.amount.Value
		out[p.amount.Currency] = t
	}
	for _, m := range s.mods {
		if m.kind != "refund" || !m.success {
			continue
		}
		t := out[m.amount.Currency]
		t.Refunded += m.amount.Value
		out[m.amount.Currency] = t
	}
	for cur, t := range out {
		t.Net = t.Authorised - t.Refunded
		out[cur] = t
	}
	return out
}

// serveAdmin serves the unauthenticated /_fake/ endpoints:
//
//	GET /_fake/counts?reference=R          -> Counts
//	GET /_fake/counts?idempotency_key=K    -> Counts
//	GET /_fake/totals                      -> map[currency]Total
func (s *Server) serveAdmin(w http.ResponseWriter, r *http.Request) {
	fakekit.ServeAdmin(w, r, map[string]fakekit.AdminGet{
		"counts": func(q url.Values) (any, error) {
			switch {
			case q.Has("reference"):
				return s.Counts(q.Get("reference")), nil
			case q.Has("idempotency_key"):
				return s.CountsByIdempotencyKey(q.Get("idempotency_key")), nil
			}
			return nil, errors.New("counts needs reference or idempotency_key")
		},
		"totals": func(url.Values) (any, error) { return s.Totals(), nil },
	})
}
