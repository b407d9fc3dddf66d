package paypaltest

import (
	"encoding/json"
	"net/http"
)

const adminPrefix = "/_fake/"

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
	Refunded int64 `json:"refunded"` // sum of refunds
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
	for _, re := range s.refundList {
		if re.customID == customID {
			c.Refunds++
		}
	}
	return c
}

// CountsByRequestID counts the orders, captures and refunds created by requests that carried the
// PayPal-Request-Id requestID. Replays create nothing and are not counted.
func (s *Server) CountsByRequestID(requestID string) Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c Counts
	for _, o := range s.orderList {
		if o.requestID == requestID {
			c.Orders++
		}
		for _, cp := range o.captures {
			if cp.requestID == requestID {
				c.Captures++
			}
		}
	}
	for _, re := range s.refundList {
		if re.requestID == requestID {
			c.Refunds++
		}
	}
	return c
}

// Totals returns, per currency code, the sums of completed captures and of refunds, for
// comparison with a ledger.
func (s *Server) Totals() map[string]Total {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Total{}
	for _, o := range s.orderList {
		for _, cp := range o.captures {
			if cp.status == "DECLINED" {
				continue
			}
			t := out[string(cp.amount.Currency())]
			t.Captured += cp.amount.Minor()
			out[string(cp.amount.Currency())] = t
		}
	}
	for _, re := range s.refundList {
		t := out[string(re.amount.Currency())]
		t.Refunded += re.amount.Minor()
		out[string(re.amount.Currency())] = t
	}
	for cur, t := range out {
		t.Net = t.Captured - t.Refunded
		out[cur] = t
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
	if r.Method == http.MethodPost && r.URL.Path == adminPrefix+"tokens/revoke" {
		s.RevokeTokens()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	var v any
	switch r.URL.Path {
	case adminPrefix + "counts":
		switch {
		case q.Has("custom_id"):
			v = s.CountsByCustomID(q.Get("custom_id"))
		case q.Has("request_id"):
			v = s.CountsByRequestID(q.Get("request_id"))
		default:
			http.Error(w, "counts needs custom_id or request_id", http.StatusBadRequest)
			return
		}
	case adminPrefix + "totals":
		v = s.Totals()
	case adminPrefix + "tokens":
		v = map[string]int{"issued": s.TokenRequests()}
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
