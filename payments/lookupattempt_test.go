package payments_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// pathCounter counts the requests sent, by method and path.
type pathCounter struct {
	base http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *pathCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[r.Method+" "+r.URL.Path]++
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

// take returns the counts since the last call.
func (c *pathCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

const (
	listPIs   = "GET /v1/payment_intents"
	searchPIs = "GET /v1/payment_intents/search"
)

// busy is a payments client over a Stripe fake busy with other customers'
// PaymentIntents, on a clock that moves when told to.
type busy struct {
	bundle
	clock    *stripetest.ManualClock
	requests *pathCounter
	stripe   *paystripe.Provider
}

// setupBusy starts the fake's clock at start, with its search index
// lagging by searchLag.
func setupBusy(t *testing.T, start time.Time, searchLag time.Duration) busy {
	t.Helper()
	pool := pgtest.Pool(t)
	clock := stripetest.NewManualClock(start)
	fake := stripetest.NewServer(&stripetest.Config{Clock: clock.Now, SearchLag: searchLag})
	t.Cleanup(fake.Close)
	rc := &pathCounter{base: &http.Transport{DisableKeepAlives: true}, n: map[string]int{}}
	sp, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_busy", BaseURL: fake.URL(),
		HTTPClient: &http.Client{Timeout: 10 * time.Second, Transport: rc}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := payments.New(pool, []provider.Provider{sp}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return busy{bundle: bundle{pool: pool, client: c, fake: fake}, clock: clock, requests: rc, stripe: sp}
}

// send charges key once: the charge reaches Stripe and succeeds when
// reach (the answer lost), else it fails before Stripe executes it (a 500
// before anything happened). Either way the outcome is unknown to
// payments and the intent stays open.
func (b busy) send(t *testing.T, key string, reach bool) {
	t.Helper()
	kind := stripetest.FailBefore
	if reach {
		kind = stripetest.ResetAfter
	}
	b.fake.Inject(stripetest.Fault{Kind: kind, Method: "POST", Path: "/v1/payment_intents"})
	if _, err := b.client.Charge(context.Background(), params(t, key, "10.00", stripetest.PaymentMethodVisa)); !payments.OutcomeUnknown(err) {
		t.Fatalf("send of %s: %v, want an unknown outcome", key, err)
	}
}

// stamp moves the last send of key (and the first, after the first) from
// the database's time to the fake's, as if the database's clock had read
// the fake's then.
func (b busy) stamp(t *testing.T, key string) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), `UPDATE payment_intents
		SET attempt_sent_at = CASE WHEN attempt_sends = 1 THEN $2 ELSE attempt_sent_at END, attempt_last_sent_at = $2,
		    created_at = least(created_at, $2), updated_at = $2
		WHERE idempotency_key = $1`, composedKey(t, key), b.clock.Now()); err != nil {
		t.Fatal(err)
	}
}

// catchUp moves the fake's clock on to now + skew: it reads the
// database's time again, but skew apart.
func (b busy) catchUp(skew time.Duration) {
	if d := time.Now().Add(skew).Sub(b.clock.Now()); d > 0 {
		b.clock.Advance(d)
	}
}

func composedKey(t *testing.T, key string) string {
	t.Helper()
	k, err := idempotency.ComposeKey("cus_1", "charge", key)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// examined reads the open intent of key as the reconciler examines it.
func (b busy) examined(t *testing.T, key string) payments.Examined {
	t.Helper()
	in := payments.Examined{Scope: "cus_1", Key: composedKey(t, key), Kind: payments.KindCharge, Provider: "stripe",
		Recipient: "acct_shop", PaymentMethod: stripetest.PaymentMethodVisa, Amount: money.MustParse("10.00", money.EUR)}
	var status string
	var sentAt, lastSentAt *time.Time
	if err := b.pool.QueryRow(context.Background(), `SELECT provider_key, attempt, status, created_at, attempt_sent_at,
		attempt_sends, attempt_last_sent_at FROM payment_intents WHERE idempotency_key = $1`, in.Key).Scan(
		&in.ProviderKey, &in.Attempt, &status, &in.CreatedAt, &sentAt, &in.Sends, &lastSentAt); err != nil {
		t.Fatal(err)
	}
	in.Status = payments.IntentStatus(status)
	if sentAt != nil {
		in.SentAt = *sentAt
	}
	if lastSentAt != nil {
		in.LastSentAt = *lastSentAt
	}
	return in
}

// A merchant with 2 PaymentIntents a second: 3,600 in the half hour
// before an attempt whose only send never reached Stripe, 120 after it.
// The lookup lists the send's own window (a few seconds each side, the
// clocks compared, plus the lease) in a few pages and proves the absence.
// The window that reached 10 minutes back (and on to now) held more than
// LookupScanLimit PaymentIntents and went to Search, which proves nothing.
func TestLookupAttemptProvesAbsenceAmongThousands(t *testing.T) {
	t.Parallel()
	b := setupBusy(t, time.Now().Add(-31*time.Minute), 0)
	ctx := context.Background()
	b.fake.Seed(b.clock, 3600, 500*time.Millisecond)
	b.send(t, "lost", false)
	b.stamp(t, "lost")
	b.fake.Seed(b.clock, 120, 500*time.Millisecond)
	b.catchUp(0)
	in := b.examined(t, "lost")
	b.requests.take()

	res, err := b.client.LookupAttempt(ctx, b.stripe, in)
	if err != nil || !res.Consistent || len(res.Charges) != 0 {
		t.Fatalf("LookupAttempt: %+v %v, want a consistent none", res, err)
	}
	// ReadClock's request, then ~60 s of traffic after the send (and a
	// few seconds before) in pages of 100.
	if got := b.requests.take(); got[listPIs] > 5 || got[searchPIs] != 0 {
		t.Fatalf("requests %v, want at most 5 List pages and no Search", got)
	}

	// The window before: 10 minutes before the send to now.
	old, err := b.stripe.Lookup(ctx, provider.LookupRequest{Key: in.Key, From: in.SentAt.Add(-10 * time.Minute),
		To: payments.LookupUntil(in.SentAt, paystripe.DedupWindow)})
	if err != nil || old.Consistent {
		t.Fatalf("the old window: %+v %v, want past the scan limit (not consistent)", old, err)
	}
}

// An attempt sent early, and again an hour later when the retry reached
// Stripe and charged (the answer lost), with 3,600 other PaymentIntents
// between and Search an hour behind: each send's window is listed on its
// own, and the charge of the second send is found, consistently.
func TestLookupAttemptFindsTheSecondSendAnHourLater(t *testing.T) {
	t.Parallel()
	b := setupBusy(t, time.Now().Add(-62*time.Minute), time.Hour)
	ctx := context.Background()
	b.fake.Seed(b.clock, 60, time.Second)
	b.send(t, "twice", false)
	b.stamp(t, "twice")
	b.fake.Seed(b.clock, 3600, time.Second)
	b.send(t, "twice", true)
	b.stamp(t, "twice")
	b.fake.Seed(b.clock, 60, time.Second)
	b.catchUp(0)
	in := b.examined(t, "twice")
	if in.Sends != 2 || in.LastSentAt.Sub(in.SentAt) < time.Hour {
		t.Fatalf("sends %d from %s to %s, want 2 an hour apart", in.Sends, in.SentAt, in.LastSentAt)
	}
	b.requests.take()

	res, err := b.client.LookupAttempt(ctx, b.stripe, in)
	if err != nil || !res.Consistent || len(res.Charges) != 1 || res.Charges[0].Status != provider.ChargeSucceeded {
		t.Fatalf("LookupAttempt: %+v %v, want the second send's charge, consistently", res, err)
	}
	if n := pis(t, b.bundle, "twice"); n != 1 {
		t.Fatalf("PaymentIntents for the key: %d, want 1", n)
	}
	if got := b.requests.take(); got[listPIs] > 5 || got[searchPIs] != 0 {
		t.Fatalf("requests %v, want at most 5 List pages and no Search", got)
	}
}

// The database's clock and Stripe's disagree by 10 minutes, either way:
// the skew is measured (Stripe's Date header against the database's
// clock), and the window moves with it. A window with the fixed margin of
// agreeing clocks would miss the charge (or prove a false absence).
func TestLookupAttemptMeasuresTheClocksSkew(t *testing.T) {
	t.Parallel()
	for name, skew := range map[string]time.Duration{"stripe ahead": 10 * time.Minute, "stripe behind": -10 * time.Minute} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupBusy(t, time.Now().Add(skew), 0)
			ctx := context.Background()
			b.catchUp(skew)
			b.send(t, "skewed", true)
			in := b.examined(t, "skewed")
			b.catchUp(skew)

			narrow, err := b.stripe.Lookup(ctx, provider.LookupRequest{Key: in.Key,
				From: in.SentAt.Add(-payments.MeasuredLookupMargin), To: in.LastSentAt.Add(time.Minute)})
			if err != nil || !narrow.Consistent || len(narrow.Charges) != 0 {
				t.Fatalf("a window on the database's clock: %+v %v, want a consistent none (the premise)", narrow, err)
			}
			res, err := b.client.LookupAttempt(ctx, b.stripe, in)
			if err != nil || !res.Consistent || len(res.Charges) != 1 {
				t.Fatalf("LookupAttempt: %+v %v, want the charge", res, err)
			}
		})
	}
}
