package stripetest

import (
	"net/http"
	"net/url"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// Counts is how many objects really exist at the fake for an idempotency key or a metadata
// pair: the ground truth for exactly-once assertions.
type Counts struct {
	PaymentIntents int `json:"payment_intents"`
	Refunds        int `json:"refunds"`
}

// Total is the money moved in one currency, in Stripe's integer units for it, which are not
// always ISO 4217's minor units (5000 ISK is 500000): [FormatAmount] reads them.
type Total struct {
	Succeeded int64 `json:"succeeded"` // sum of succeeded PaymentIntents' amount_received
	Refunded  int64 `json:"refunded"`  // sum of succeeded refunds (not failed ones, see [Server.FailRefund])
	Net       int64 `json:"net"`       // Succeeded - Refunded
}

// CountsByIdempotencyKey counts the PaymentIntents and refunds created by requests that carried
// the Idempotency-Key key (under any API key). Replays create nothing and are not counted.
func (s *Server) CountsByIdempotencyKey(key string) Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Counts{
		PaymentIntents: fakekit.Count(s.order, func(pi *paymentIntent) bool { return pi.idempotencyKey == key }),
		Refunds:        fakekit.Count(s.rorder, func(re *refund) bool { return re.idempotencyKey == key }),
	}
}

// CountsByMetadata counts the PaymentIntents and refunds whose metadata[key] is value.
func (s *Server) CountsByMetadata(key, value string) Counts {
	has := func(md map[string]string) bool { v, ok := md[key]; return ok && v == value }
	s.mu.Lock()
	defer s.mu.Unlock()
	return Counts{
		PaymentIntents: fakekit.Count(s.order, func(pi *paymentIntent) bool { return has(pi.Metadata) }),
		Refunds:        fakekit.Count(s.rorder, func(re *refund) bool { return has(re.Metadata) }),
	}
}

// Totals returns, per lowercase currency code, the sums of succeeded PaymentIntents and of
// succeeded refunds, for comparison with a ledger.
func (s *Server) Totals() map[string]Total {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Total{}
	for _, pi := range s.order {
		if pi.Status == "succeeded" {
			fakekit.Add(out, pi.Currency, func(t *Total) { t.Succeeded += pi.AmountReceived })
		}
	}
	for _, re := range s.rorder {
		if re.Status == "succeeded" {
			fakekit.Add(out, re.Currency, func(t *Total) { t.Refunded += re.Amount })
		}
	}
	for cur := range out {
		fakekit.Add(out, cur, func(t *Total) { t.Net = t.Succeeded - t.Refunded })
	}
	return out
}

// serveAdmin serves the unauthenticated /_fake/ endpoints:
//
//	GET /_fake/counts?idempotency_key=K                 -> Counts
//	GET /_fake/counts?metadata_key=K&metadata_value=V   -> Counts
//	GET /_fake/totals                                   -> map[currency]Total
func (s *Server) serveAdmin(w http.ResponseWriter, r *http.Request) {
	fakekit.ServeAdmin(w, r, map[string]fakekit.AdminGet{
		"counts": fakekit.ByParam("counts needs idempotency_key, or metadata_key and metadata_value",
			fakekit.Param{Name: "idempotency_key", Answer: func(q url.Values) any {
				return s.CountsByIdempotencyKey(q.Get("idempotency_key"))
			}},
			fakekit.Param{Name: "metadata_key", Answer: func(q url.Values) any {
				return s.CountsByMetadata(q.Get("metadata_key"), q.Get("metadata_value"))
			}}),
		"totals": fakekit.Value(s.Totals),
	})
}

// SucceededByMetadata counts the succeeded PaymentIntents whose metadata[key] is value: those
// that moved money (as [Server.Totals] sums them), where [Server.CountsByMetadata] counts every
// PaymentIntent whatever its status.
func (s *Server) SucceededByMetadata(key, value string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fakekit.Count(s.order, func(pi *paymentIntent) bool {
		v, ok := pi.Metadata[key]
		return ok && v == value && pi.Status == "succeeded"
	})
}
