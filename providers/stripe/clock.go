package stripe

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	stripego "github.com/stripe/stripe-go/v79"

	"github.com/payonce/payonce/payments/provider"
)

// clockFresh is how long a reading of Stripe's clock is reused before
// [Provider.ReadClock] asks again.
const clockFresh = time.Minute

// clockReading is the last reading of Stripe's clock: the Date header of
// an answer (RFC 9110 section 6.6.1: the origin server's clock when it
// made the answer, in whole seconds) and the interval of this process's
// monotonic clock in which the answer was made, from before the request
// was sent to after its answer was read.
type clockReading struct {
	mu            sync.Mutex
	date          time.Time
	before, after time.Time
}

var _ provider.ClockReader = (*Provider)(nil)

// ReadClock returns Stripe's clock now and how far from it the answer may
// be, for [provider.ClockReader]: payments measures the skew between its
// database's clock and Stripe's with it, to bound the creation window of
// a lookup ([payments.Client.LookupAttempt]). It reads the Date header of
// Stripe's answers (whole seconds): the List pages [Provider.Lookup]
// reads (the one with the shortest round trip of the last 30 seconds, or
// the last), else one GET /v1/payment_intents?limit=1 (a read, like a
// lookup's), at most a minute old. The error bound is half a second (the header's
// resolution) plus half of that answer's round trip.
//
// Errors: *[provider.NotSentError], *[provider.UnknownOutcomeError]
// (nothing was read: an outage, or an answer without a Date header).
func (p *Provider) ReadClock(ctx context.Context) (time.Time, time.Duration, error) {
	if now, within, ok := p.clock.estimate(); ok {
		return now, within, nil
	}
	params := &stripego.PaymentIntentListParams{}
	params.Limit = stripego.Int64(1)
	params.Single = true
	var sent sentTracker
	params.Context = sent.trace(ctx)
	before := time.Now()
	it := p.paymentIntents.List(params)
	after := time.Now()
	if err := it.Err(); err != nil {
		return time.Time{}, 0, classify(err, &sent)
	}
	if !p.clock.record(it.PaymentIntentList().LastResponse, before, after) {
		return time.Time{}, 0, &provider.UnknownOutcomeError{Provider: providerName, Err: errNoDate}
	}
	now, within, _ := p.clock.estimate()
	return now, within, nil
}

// errNoDate is an answer that does not say Stripe's time.
var errNoDate = errors.New("stripe: the answer carries no valid Date header")

// record keeps the reading of res's Date header, an answer made between
// before and after, unless the reading kept is tighter (a shorter round
// trip) and less than half clockFresh old, and reports whether res had
// one.
func (c *clockReading) record(res *stripego.APIResponse, before, after time.Time) bool {
	if res == nil {
		return false
	}
	date, err := http.ParseTime(res.Header.Get("Date"))
	if err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.date.IsZero() && c.after.Sub(c.before) < after.Sub(before) && time.Since(c.after) < clockFresh/2 {
		return true
	}
	c.date, c.before, c.after = date, before, after
	return true
}

// estimate returns Stripe's clock now from the last reading, with its
// error bound, or false without a reading less than clockFresh old. At
// the instant g the answer was made, Stripe's clock read between date and
// date + 1s, and g lies between before and after: now is date + 0.5s +
// (now - the middle of [before, after]), within 0.5s + half the interval.
func (c *clockReading) estimate() (time.Time, time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.date.IsZero() || time.Since(c.after) > clockFresh {
		return time.Time{}, 0, false
	}
	half := c.after.Sub(c.before) / 2
	mid := c.before.Add(half)
	return c.date.Add(time.Second/2 + time.Since(mid)), time.Second/2 + half, true
}
