package reconcile_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/payments"

	"github.com/payonce/payonce/pgtest"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
	"github.com/payonce/payonce/reconcile"
)

// stripeRequests counts the List and Search requests a Stripe adapter
// sends until it is stopped (once the reconciler examined the intent: the
// check of succeeded charges that follows looks them up by their own
// window).
type stripeRequests struct {
	base         http.RoundTripper
	mu           sync.Mutex
	stopped      bool
	list, search int
}

func (c *stripeRequests) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	switch {
	case c.stopped:
	case r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents":
		c.list++
	case r.URL.Path == "/v1/payment_intents/search":
		c.search++
	}
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

func (c *stripeRequests) stop() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
}

// busyStripe is a payments client on a Stripe fake busy with other
// customers' PaymentIntents, whose clock moves when told to, and a
// reconciler.
type busyStripe struct {
	pool     *pgxpool.Pool
	client   *payments.Client
	fake     *stripetest.Server
	clock    *stripetest.ManualClock
	requests *stripeRequests
	r        *reconcile.Reconciler
}

func setupBusyStripe(t *testing.T, start time.Time) busyStripe {
	t.Helper()
	pool := pgtest.Pool(t)
	clock := stripetest.NewManualClock(start)
	// Search an hour behind: only a consistent List can answer.
	rc := &stripeRequests{base: &http.Transport{DisableKeepAlives: true}}
	client, fake := stripeClient(t, pool, &stripetest.Config{Clock: clock.Now, SearchLag: time.Hour}, rc, nil)
	r, err := reconcile.New(pool, client, &reconcile.Config{Grace: time.Millisecond, Schedule: []time.Duration{time.Millisecond},
		MaxChecks: 4, Progress: func(int, int) { rc.stop() }})
	if err != nil {
		t.Fatal(err)
	}
	return busyStripe{pool: pool, client: client, fake: fake, clock: clock, requests: rc, r: r}
}

// send charges key once; reach says whether the request reaches Stripe
// (which charges, and the answer is lost) or fails before Stripe executes
// it. The database's stamps of the send are moved to the fake's time, as
// if its clock had read the fake's then.
func (b busyStripe) send(t *testing.T, key string, reach bool) {
	t.Helper()
	kind := stripetest.FailBefore
	if reach {
		kind = stripetest.ResetAfter
	}
	b.fake.Inject(stripetest.Fault{Kind: kind, Method: "POST", Path: "/v1/payment_intents"})
	if _, err := b.client.Charge(context.Background(), params("stripe", key)); !payments.OutcomeUnknown(err) {
		t.Fatalf("send: %v, want an unknown outcome", err)
	}
	if _, err := b.pool.Exec(context.Background(), `UPDATE payment_intents
		SET attempt_sent_at = CASE WHEN attempt_sends = 1 THEN $2 ELSE attempt_sent_at END, attempt_last_sent_at = $2,
		    created_at = least(created_at, $2), updated_at = $2
		WHERE idempotency_key = $1`, composed(key), b.clock.Now()); err != nil {
		t.Fatal(err)
	}
}

// settle runs the reconciler once, with the fake's clock caught up with
// the database's, and returns the intent.
func (b busyStripe) settle(t *testing.T, key string) (*reconcile.Report, payments.Intent) {
	t.Helper()
	if d := time.Until(b.clock.Now()); d < 0 {
		b.clock.Advance(-d)
	}
	b.requests.mu.Lock()
	b.requests.list, b.requests.search, b.requests.stopped = 0, 0, false
	b.requests.mu.Unlock()
	rep, err := b.r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	in, err := b.client.Intent(context.Background(), "cus_r", key)
	if err != nil {
		t.Fatal(err)
	}
	return rep, in
}

// pagesBounded fails t unless the examination listed a few pages and
// never asked Search.
func (b busyStripe) pagesBounded(t *testing.T) {
	t.Helper()
	b.requests.mu.Lock()
	defer b.requests.mu.Unlock()
	if b.requests.list > 5 || b.requests.search != 0 {
		t.Fatalf("%d List and %d Search requests, want at most 5 List pages", b.requests.list, b.requests.search)
	}
}

// Finding 11: an abandoned attempt whose only send never reached Stripe,
// at a merchant creating 2 PaymentIntents a second (3,600 in the half hour
// before, 120 after). The window that reached from 10 minutes before the
// send to now held more than LookupScanLimit of them: the adapter turned
// to Search, which proves nothing, and the intent went to review once its
// checks ran out. The send's own window is a few pages: the reconciler
// fails the intent with proof at its first check.
func TestAbandonedStripeAttemptAmongThousandsFailsWithProof(t *testing.T) {
	t.Parallel()
	b := setupBusyStripe(t, time.Now().Add(-31*time.Minute))
	b.fake.Seed(b.clock, 3600, 500*time.Millisecond)
	b.send(t, "vol-lost", false)
	b.fake.Seed(b.clock, 120, 500*time.Millisecond)

	rep, in := b.settle(t, "vol-lost")
	if in.Status != payments.IntentFailed || rep.FailedWithProof != 1 || rep.NeedsReview != 0 {
		t.Fatalf("intent %s, report %+v: want FAILED with proof at the first check", in.Status, rep)
	}
	b.pagesBounded(t)
}

// An attempt sent, lost before Stripe, and sent again an hour later when
// Stripe charged (the answer lost), with 3,600 PaymentIntents between:
// the second send's charge is found in its own window, consistently, and
// booked once.
func TestStripeAttemptSentTwiceAnHourApartIsFound(t *testing.T) {
	t.Parallel()
	b := setupBusyStripe(t, time.Now().Add(-62*time.Minute))
	b.fake.Seed(b.clock, 60, time.Second)
	b.send(t, "vol-twice", false)
	b.fake.Seed(b.clock, 3600, time.Second)
	b.send(t, "vol-twice", true)
	b.fake.Seed(b.clock, 60, time.Second)

	rep, in := b.settle(t, "vol-twice")
	if in.Status != payments.IntentSucceeded || rep.Repaired != 1 {
		t.Fatalf("intent %s, report %+v: want SUCCEEDED from the second send's charge", in.Status, rep)
	}
	b.pagesBounded(t)
	if c := b.fake.CountsByMetadata(paystripe.MetadataKey, composed("vol-twice")); c.PaymentIntents != 1 {
		t.Fatalf("PaymentIntents for the key: %d, want 1", c.PaymentIntents)
	}
	var entries int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM ledger_entries WHERE key = $1`,
		composed("vol-twice")).Scan(&entries); err != nil || entries != 1 {
		t.Fatalf("ledger entries %d (%v), want 1", entries, err)
	}
}
