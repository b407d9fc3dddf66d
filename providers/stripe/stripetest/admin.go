package stripetest

import (
	"errors"
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
	var c Counts
	for _, pi := range s.order {
		if pi.idempotencyKey == key {
			c.PaymentIntents++
		}
	}
	for _, re := range s.rorder {
		if re.idempotencyKey == key {
			c.Refunds++
		}
	}
	return c
}

// CountsByMetadata counts the PaymentIntents and refunds whose metadata[key] is value.
func (s *Server) CountsByMetadata(key, value string) Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c Counts
	for _, pi := range s.order {
		if v, ok := pi.Metadata[key]; ok && v == value {
			c.PaymentIntents++
		}
	}
	for _, re := range s.rorder {
		if v, ok := re.Metadata[key]; ok && v == value {
			c.Refunds++
		}
	}
	return c
}

// Totals returns, per lowercase currency code, the sums of succeeded PaymentIntents and of
// succeeded refunds, for comparison with a ledger.
func (s *Server) Totals() map[string]Total {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Total{}
	for _, pi := range s.order {
		if pi.Status != "succeeded" {
			continue
		}
		t := out[pi.Currency]
		t.Succeeded += pi.AmountReceived
		out[pi.Currency] = t
	}
	for _, re := range s.rorder {
		if re.Status != "succeeded" {
			continue
		}
		t := out[re.Currency]
		t.Refunded += re.Amount
		out[re.Currency] = t
	}
	for cur, t := range out {
		t.Net = t.Succeeded - t.Refunded
		out[cur] = t
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
		"counts": func(q url.Values) (any, error) {
			switch {
			case q.Has("idempotency_key"):
				return s.CountsByIdempotencyKey(q.Get("idempotency_key")), nil
			case q.Has("metadata_key"):
				return s.CountsByMetadata(q.Get("metadata_key"), q.Get("metadata_value")), nil
			}
			return nil, errors.New("counts needs idempotency_key, or metadata_key and metadata_value")
		},
		"totals": func(url.Values) (any, error) { return s.Totals(), nil },
	})
}
