package adyentest

import (
	"net/http"
	"net/url"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// Counts is how many objects really exist at the fake for a reference or an idempotency key:
// the ground truth for exactly-once assertions. Every payment counts, whatever its resultCode;
// every refund, capture, reversal and technical cancel request that was received counts,
// whatever its outcome.
type Counts struct {
	Payments  int `json:"payments"`
	Refunds   int `json:"refunds"`
	Captures  int `json:"captures"`
	Cancels   int `json:"cancels"`
	Reversals int `json:"reversals"`
}

// Total is the money in one currency, in Adyen's minor units for that currency ([Decimals]).
type Total struct {
	// Authorised sums the payments authorised and not cancelled, captured or not.
	Authorised int64 `json:"authorised"`
	// Captured sums what was captured: the money that moved to the merchant (at authorisation
	// under automatic capture, by capture requests under manual capture).
	Captured int64 `json:"captured"`
	// Refunded sums successful refunds and the refunds of successful reversals.
	Refunded int64 `json:"refunded"`
	// Net is Captured - Refunded: what the merchant holds.
	Net int64 `json:"net"`
	// NetAmount is Net as a decimal amount under Adyen's decimals for the currency, as the fake
	// reads Adyen's currency codes page: "1000" for 1000 CVE (0 decimals), "1000.00" for
	// 100000 CLP (2 decimals).
	NetAmount string `json:"net_amount"`
}

func (c *Counts) add(kind string) {
	switch kind {
	case "refund":
		c.Refunds++
	case "capture":
		c.Captures++
	case "cancel":
		c.Cancels++
	case "reversal":
		c.Reversals++
	}
}

// Counts counts the payments whose reference is reference, and the refunds, captures,
// reversals and cancels whose own reference is reference; a technical cancel also counts under
// its paymentReference. Replays create nothing and are not counted.
func (s *Server) Counts(reference string) Counts {
	return s.count(
		func(p *payment) bool { return p.reference == reference },
		func(m *modification) bool { return m.reference == reference || m.paymentReference == reference })
}

// CountsByIdempotencyKey counts the objects created by requests that carried the
// Idempotency-Key key (under any API key).
func (s *Server) CountsByIdempotencyKey(key string) Counts {
	return s.count(
		func(p *payment) bool { return p.idempotencyKey == key },
		func(m *modification) bool { return m.idempotencyKey == key })
}

// count counts the payments isPayment accepts and, by kind, the modifications isMod accepts.
func (s *Server) count(isPayment func(*payment) bool, isMod func(*modification) bool) Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Counts{Payments: fakekit.Count(s.porder, isPayment)}
	for _, m := range s.mods {
		if isMod(m) {
			c.add(m.kind)
		}
	}
	return c
}

// Totals returns, per currency code, the money authorised, captured and refunded, for
// comparison with a ledger: Net is what moved. Automatic captures that are due on Config.Clock
// are applied first.
func (s *Server) Totals() map[string]Total {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.capturesDueLocked()
	out := map[string]Total{}
	for _, p := range s.porder {
		if !p.authorised {
			continue
		}
		t := out[p.amount.Currency]
		if !p.cancelled() {
			t.Authorised += p.amount.Value
		}
		t.Captured += p.captured
		t.Refunded += p.refunded
		out[p.amount.Currency] = t
	}
	for cur, t := range out {
		t.Net = t.Captured - t.Refunded
		t.NetAmount = FormatValue(cur, t.Net)
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
		"counts": fakekit.ByParam("counts needs reference or idempotency_key",
			fakekit.Param{Name: "reference", Answer: func(q url.Values) any { return s.Counts(q.Get("reference")) }},
			fakekit.Param{Name: "idempotency_key", Answer: func(q url.Values) any {
				return s.CountsByIdempotencyKey(q.Get("idempotency_key"))
			}}),
		"totals": fakekit.Value(s.Totals),
	})
}

// Charged counts the payments with reference that hold money: authorised and not cancelled
// (as [Server.Totals] sums them), where [Server.Counts] counts every payment, refused ones too.
func (s *Server) Charged(reference string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fakekit.Count(s.porder, func(p *payment) bool { return p.reference == reference && p.authorised && !p.cancelled() })
}
