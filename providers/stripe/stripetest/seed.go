package stripetest

import (
	"net/url"
	"strconv"
	"time"
)

// Seed creates n PaymentIntents as other customers' requests would (POST /v1/payment_intents
// confirming a card that succeeds, 10.00 EUR, no Idempotency-Key, metadata[seed] = its index), one
// every `every` on clock, which must be the Server's Config.Clock: the clock is advanced by
// `every` after each. It is the traffic among which a lookup must find one key's PaymentIntent,
// or prove that there is none, created in process so that thousands take milliseconds rather
// than thousands of round trips. Like any PaymentIntent they emit their events and add to the
// balance. It panics if the fake refuses one (a bug in Seed).
func (s *Server) Seed(clock *ManualClock, n int, every time.Duration) {
	for i := range n {
		f := url.Values{"amount": {"1000"}, "currency": {"eur"}, "payment_method": {PaymentMethodVisa},
			"payment_method_types[0]": {"card"}, "confirm": {"true"}, "metadata[seed]": {strconv.Itoa(i)}}
		s.mu.Lock()
		resp, executed := s.createPaymentIntent(&call{form: f, reqID: s.newIDLocked("req")})
		s.mu.Unlock()
		if !executed {
			panic("stripetest: Seed: the fake refused its PaymentIntent: " + string(resp.body))
		}
		clock.Advance(every)
	}
}
