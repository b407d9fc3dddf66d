package paypaltest

import (
	"net/http"
	"net/url"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// Counts is how many objects really exist at the fake for a custom_id or a request id: the
// ground truth for exactly-once assertions.
type Counts struct {
	Orders   int `json:"orders"`
	Captures int `json:"captures"` // of any status, declined ones included
	Refunds  int `json:"refunds"`
}

// Total is the money moved in one currency, in minor units.
type Total struct {
	Captured int64 `json:"captured"` // sum of captures that completed (refunded or not)
	Refunded int64 `json:"refunded"` // sum of COMPLETED refunds (not failed ones, see [Server.FailRefund])
	Net      int64 `json:"net"`      // Captured - Refunded
}

// CountsByCustomID counts the orders and captures whose purchase unit carries custom_id, and the
// refunds whose own custom_id is customID.
func (s *Server) CountsByCustomID(customID string) Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c Counts
	for _, o := range s.orderList {
		if o.customID == customID {
			c.Orders++
			c.Captures += len(o.captures)
		}
	}
	c.Refunds = fakekit.Count(s.refundList, func(re *refund) bool { return re.customID == customID })
	return c
}

// CountsByRequestID counts the orders, captures and refunds created by requests that carried the
// PayPal-Request-Id requestID. Replays create nothing and are not counted.
func (s *Server) CountsByRequestID(requestID string) Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Counts{
		Orders:  fakekit.Count(s.orderList, func(o *order) bool { return o.requestID == requestID }),
		Refunds: fakekit.Count(s.refundList, func(re *refund) bool { return re.requestID == requestID }),
	}
	for _, o := range s.orderList {
		c.Captures += fakekit.Count(o.captures, func(cp *capture) bool { return cp.requestID == requestID })
	}
	return c
}

// Totals returns, per currency code, the sums of completed captures and of completed refunds, for
// comparison with a ledger.
func (s *Server) Totals() map[string]Total {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Total{}
	for _, o := range s.orderList {
		for _, cp := range o.captures {
			if cp.status != "DECLINED" {
				fakekit.Add(out, string(cp.amount.Currency()), func(t *Total) { t.Captured += cp.amount.Minor() })
			}
		}
	}
	for _, re := range s.refundList {
		if re.status == "COMPLETED" {
			fakekit.Add(out, string(re.amount.Currency()), func(t *Total) { t.Refunded += re.amount.Minor() })
		}
	}
	for cur := range out {
		fakekit.Add(out, cur, func(t *Total) { t.Net = t.Captured - t.Refunded })
	}
	return out
}

// serveAdmin serves the unauthenticated /_fake/ endpoints:
//
//	GET  /_fake/counts?custom_id=K    -> Counts
//	GET  /_fake/counts?request_id=R   -> Counts
//	GET  /_fake/totals                -> map[currency]Total
//	GET  /_fake/tokens                -> {"issued": n}
//	POST /_fake/tokens/revoke         -> 204, see Server.RevokeTokens
func (s *Server) serveAdmin(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == fakekit.AdminPrefix+"tokens/revoke" {
		s.RevokeTokens()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	fakekit.ServeAdmin(w, r, map[string]fakekit.AdminGet{
		"counts": fakekit.ByParam("counts needs custom_id or request_id",
			fakekit.Param{Name: "custom_id", Answer: func(q url.Values) any { return s.CountsByCustomID(q.Get("custom_id")) }},
			fakekit.Param{Name: "request_id", Answer: func(q url.Values) any { return s.CountsByRequestID(q.Get("request_id")) }}),
		"totals": fakekit.Value(s.Totals),
		"tokens": fakekit.Value(func() map[string]int { return map[string]int{"issued": s.TokenRequests()} }),
	})
}

// CapturedByCustomID counts the captures of the orders with customID that moved money (any
// status but DECLINED, as [Server.Totals] sums them), where [Server.CountsByCustomID] counts
// declined captures too.
func (s *Server) CapturedByCustomID(customID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, o := range s.orderList {
		if o.customID != customID {
			continue
		}
		for _, cp := range o.captures {
			if cp.status != "DECLINED" {
				n++
			}
		}
	}
	return n
}
