package payments_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers/fakes"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// clocked is a payments client over a Stripe fake whose clock moves only
// when told to: Stripe forgets idempotency keys 24 hours after their first
// use and takes a reused one for a NEW request.
type clocked struct {
	bundle
	clock *stripetest.ManualClock
	// past is how far back the test starts: the fake's clock starts then,
	// and age moves the database's rows back by as much, so that both
	// agree on when things happened once the clock is advanced to now.
	past time.Duration
}

func setupClocked(t *testing.T, past time.Duration, wrap func(provider.Provider) provider.Provider) clocked {
	t.Helper()
	clock := stripetest.NewManualClock(time.Now().Add(-past))
	return clocked{bundle: setupStripe(t, &stripetest.Config{Clock: clock.Now}, wrap, nil), clock: clock, past: past}
}

// age moves time forward by c.past for everything the key's attempt left:
// the database's rows of the action (as if they were written c.past ago)
// and the provider fake's clock (now back at the present).
func (c clocked) age(t *testing.T, action, key string) {
	t.Helper()
	d := c.past
	k, err := idempotency.ComposeKey("cus_1", action, key)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.pool.Exec(ctx, `UPDATE payment_intents SET created_at = created_at - $2::interval,
		updated_at = updated_at - $2::interval, attempt_sent_at = attempt_sent_at - $2::interval
		WHERE idempotency_key = $1`, k, d); err != nil {
		t.Fatal(err)
	}
	if _, err := c.pool.Exec(ctx, `UPDATE idempotency_store SET created_at = created_at - $2::interval,
		expires_at = expires_at - $2::interval, locked_until = locked_until - $2::interval
		WHERE idempotency_key = $1`, k, d); err != nil {
		t.Fatal(err)
	}
	c.clock.Advance(d)
}

// sendAged charges 10.00 under key once with a fault of kind on Stripe's
// PaymentIntent create, which leaves the outcome unknown, then ages the
// attempt by c.past (see age). It returns the charge, for the retries.
func (c clocked) sendAged(t *testing.T, kind stripetest.FaultKind, key string) payments.ChargeParams {
	t.Helper()
	p := params(t, key, "10.00", stripetest.PaymentMethodVisa)
	c.fake.Inject(stripetest.Fault{Kind: kind, Method: "POST", Path: "/v1/payment_intents"})
	if _, err := c.client.Charge(context.Background(), p); !payments.OutcomeUnknown(err) {
		t.Fatalf("%s on the create of %s: %v, want an unknown outcome", kind, key, err)
	}
	c.age(t, "charge", key)
	return p
}

func (c clocked) status(t *testing.T, key string) (payments.IntentStatus, string) {
	t.Helper()
	k, _ := idempotency.ComposeKey("cus_1", "charge", key)
	var status, reason string
	if err := c.pool.QueryRow(context.Background(), `SELECT status, coalesce(review_reason, '') FROM payment_intents
		WHERE idempotency_key = $1`, k).Scan(&status, &reason); err != nil {
		t.Fatal(err)
	}
	return payments.IntentStatus(status), reason
}

// The finding: a response lost, nobody retries for a day, then a retry at
// +25h. Stripe pruned the key, so re-sending it would create a second
// PaymentIntent. payments looks the attempt up instead (Stripe's List is
// consistent) and settles it from what it finds: one PaymentIntent, one
// ledger entry.
func TestRetryPastStripeWindowLooksUpInsteadOfResending(t *testing.T) {
	t.Parallel()
	c := setupClocked(t, 25*time.Hour, nil)
	ctx := context.Background()
	p := c.sendAged(t, stripetest.ResetAfter, "late")
	res, err := c.client.Charge(ctx, p)
	if err != nil || res.Status != payments.IntentSucceeded || res.ProviderID == "" {
		t.Fatalf("retry at +25h: %+v %v", res, err)
	}
	checkCharged(t, c.bundle, "late", "10.00")
	again, err := c.client.Charge(ctx, p)
	if err != nil || !again.Replayed || again.ProviderID != res.ProviderID {
		t.Fatalf("replay: %+v %v", again, err)
	}
}

// Inside the window the retry re-sends the same key and Stripe replays it
// (the provider's lookup, which cannot tell here, is not used).
func TestRetryInsideStripeWindowResends(t *testing.T) {
	t.Parallel()
	c := setupClocked(t, 22*time.Hour, func(p provider.Provider) provider.Provider { return cannotTell{p} })
	ctx := context.Background()
	p := c.sendAged(t, stripetest.ResetAfter, "early")
	res, err := c.client.Charge(ctx, p)
	if err != nil || res.Status != payments.IntentSucceeded {
		t.Fatalf("retry at +22h: %+v %v", res, err)
	}
	if n := pis(t, c.bundle, "early"); n != 1 {
		t.Fatalf("PaymentIntents = %d, want 1", n)
	}
}

// A 500 before Stripe did anything, then a retry past the window: the
// consistent lookup finds nothing, which proves the attempt left nothing:
// the intent fails with that proof and nothing is charged.
func TestRetryPastStripeWindowNothingThereFailsWithProof(t *testing.T) {
	t.Parallel()
	c := setupClocked(t, 30*time.Hour, nil)
	ctx := context.Background()
	p := c.sendAged(t, stripetest.FailBefore, "void")
	_, err := c.client.Charge(ctx, p)
	var inv *provider.InvalidRequestError
	if !errors.As(err, &inv) || inv.Code != "payment_void" {
		t.Fatalf("retry past the window: %v, want the attempt failed with proof", err)
	}
	if n := pis(t, c.bundle, "void"); n != 0 {
		t.Fatalf("PaymentIntents = %d, want 0", n)
	}
	if st, _ := c.status(t, "void"); st != payments.IntentFailed {
		t.Fatalf("intent %s, want FAILED", st)
	}
}

// cannotTell is a provider whose lookup can no longer tell (PayPal past
// its 6-hour request-id window without an order id): no proof either way.
type cannotTell struct{ provider.Provider }

func (p cannotTell) Lookup(context.Context, provider.LookupRequest) (provider.LookupResult, error) {
	return provider.LookupResult{}, errors.Join(errors.New("request id forgotten"), provider.ErrCannotTell)
}

// Past the window with a provider that cannot tell: never re-sent, the
// intent goes to NEEDS_REVIEW with the reason, and every later retry is
// refused the same way.
func TestRetryPastWindowWithoutProofNeedsReview(t *testing.T) {
	t.Parallel()
	c := setupClocked(t, 25*time.Hour, func(p provider.Provider) provider.Provider { return cannotTell{p} })
	ctx := context.Background()
	p := c.sendAged(t, stripetest.ResetAfter, "blind")
	for i := 0; i < 2; i++ {
		_, err := c.client.Charge(ctx, p)
		if !errors.Is(err, payments.ErrUnderReview) {
			t.Fatalf("retry %d past the window: %v, want NEEDS_REVIEW", i, err)
		}
	}
	st, reason := c.status(t, "blind")
	if st != payments.IntentNeedsReview || !strings.Contains(reason, "deduplication window") {
		t.Fatalf("intent %s (%q), want NEEDS_REVIEW naming the window", st, reason)
	}
	if n := pis(t, c.bundle, "blind"); n != 1 {
		t.Fatalf("PaymentIntents = %d, want the first attempt's only", n)
	}
	if got := balance(t, c.bundle); got != "0.00" {
		t.Fatalf("posted %s without proof", got)
	}
}

// A refund whose response was lost, retried past the window: looked up
// (the charge's refunds by metadata), never re-sent: one refund.
func TestRefundRetryPastWindowLooksUp(t *testing.T) {
	t.Parallel()
	c := setupClocked(t, 25*time.Hour, nil)
	ctx := context.Background()
	if _, err := c.client.Charge(ctx, params(t, "ch", "10.00", stripetest.PaymentMethodVisa)); err != nil {
		t.Fatal(err)
	}
	c.fake.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/refunds"})
	rp := payments.RefundParams{Scope: "cus_1", Key: "rf", ChargeKey: "ch", Amount: eur(t, "4.00")}
	if _, err := c.client.Refund(ctx, rp); !payments.OutcomeUnknown(err) {
		t.Fatalf("lost refund response: %v", err)
	}
	c.age(t, "refund", "rf")
	res, err := c.client.Refund(ctx, rp)
	if err != nil || res.Status != payments.IntentSucceeded {
		t.Fatalf("refund retry at +25h: %+v %v", res, err)
	}
	k, _ := idempotency.ComposeKey("cus_1", "refund", "rf")
	if n := c.fake.CountsByMetadata(paystripe.MetadataKey, k).Refunds; n != 1 {
		t.Fatalf("refunds at Stripe = %d, want 1", n)
	}
	if got := balance(t, c.bundle); got != "6.00" {
		t.Fatalf("provider:stripe = %s, want 6.00", got)
	}
}

// A client key belongs to the scope that used it first: another scope
// sending it is refused with idempotency.ErrForeignKey and nothing is
// created (no intent, no record, no call to the provider).
func TestKeyOfAnotherScopeIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.client.Charge(ctx, params(t, "shared", "10.00", stripetest.PaymentMethodVisa)); err != nil {
		t.Fatal(err)
	}
	other := params(t, "shared", "10.00", stripetest.PaymentMethodVisa)
	other.Scope = "cus_2"
	for i := 0; i < 2; i++ {
		if _, err := b.client.Charge(ctx, other); !errors.Is(err, idempotency.ErrForeignKey) {
			t.Fatalf("charge %d with another scope's key: %v, want ErrForeignKey", i, err)
		}
	}
	if _, err := b.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: "rshared", ChargeKey: "shared", Amount: eur(t, "1.00")}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Charge(ctx, payments.ChargeParams{Scope: "cus_2", Key: "own", Provider: "stripe", Amount: eur(t, "5.00"),
		Recipient: "acct_shop", PaymentMethod: stripetest.PaymentMethodVisa}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Refund(ctx, payments.RefundParams{Scope: "cus_2", Key: "rshared", ChargeKey: "own", Amount: eur(t, "1.00")}); !errors.Is(err, idempotency.ErrForeignKey) {
		t.Fatalf("refund with another scope's key: %v, want ErrForeignKey", err)
	}
	var intents, records int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM payment_intents WHERE user_id = 'cus_2'`).Scan(&intents); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_store WHERE user_id = 'cus_2'`).Scan(&records); err != nil {
		t.Fatal(err)
	}
	if intents != 1 || records != 1 {
		t.Fatalf("cus_2 has %d intents and %d records, want its own charge only", intents, records)
	}
	if n := pis(t, b, "shared"); n != 1 {
		t.Fatalf("PaymentIntents for the shared key = %d, want 1", n)
	}
}

// WindowMargin must leave most of every window.
func TestWindowMarginRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, m := range []time.Duration{-time.Minute, 12 * time.Hour} {
		checkConfigRefused(t, b, payments.Config{WindowMargin: m}, "Config.WindowMargin")
	}
}

// PayPal captures a vaulted-card order in its create and keeps the
// request id 6 hours. A create whose answer was lost, retried at +7h: the
// same request id would create and capture a second order. payments looks
// the attempt up instead (Transaction Search, matched on custom_id), and
// settles it: one order, one capture, one ledger entry. With nothing at
// PayPal the search, once its lag has passed, proves it: the intent fails
// with that proof.
func TestRetryPastPayPalWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fault    paypaltest.FaultKind
		past     time.Duration
		captures int
		want     payments.IntentStatus
	}{
		{"charged", paypaltest.ResetAfter, 7 * time.Hour, 1, payments.IntentSucceeded},
		{"nothing there", paypaltest.FailBefore, 10 * time.Hour, 0, payments.IntentFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			ctx := context.Background()
			clock := paypaltest.NewManualClock(time.Now().Add(-tc.past))
			fake := paypaltest.NewServer(&paypaltest.Config{Clock: clock.Now, SearchLag: 3 * time.Hour})
			t.Cleanup(fake.Close)
			prov, err := paypal.New(&paypal.Config{ClientID: fakes.PayPalClientID, Secret: fakes.PayPalSecret,
				BaseURL: fake.URL(), HTTPClient: noKeepAliveClient(nil), WebhookID: fakes.PayPalWebhookID, Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			client, _ := pvClient(t, pool, prov, 0) // 0: the default lock timeout
			p := payments.ChargeParams{Scope: "cus_1", Key: "pp", Provider: "paypal", Amount: money.MustParse("10.00", money.EUR),
				Recipient: "acct_shop", PaymentMethod: paypaltest.PaymentMethodVisa}
			fake.Inject(paypaltest.Fault{Kind: tc.fault, Method: "POST", Path: "/v2/checkout/orders"})
			if _, err := client.Charge(ctx, p); !payments.OutcomeUnknown(err) {
				t.Fatalf("lost create: %v", err)
			}
			k, _ := idempotency.ComposeKey("cus_1", "charge", "pp")
			for _, q := range []string{
				`UPDATE payment_intents SET created_at = created_at - $2::interval, updated_at = updated_at - $2::interval,
				 attempt_sent_at = attempt_sent_at - $2::interval WHERE idempotency_key = $1`,
				`UPDATE idempotency_store SET created_at = created_at - $2::interval, locked_until = locked_until - $2::interval
				 WHERE idempotency_key = $1`,
			} {
				if _, err := pool.Exec(ctx, q, k, tc.past); err != nil {
					t.Fatal(err)
				}
			}
			clock.Advance(tc.past)
			res, err := client.Charge(ctx, p)
			switch tc.want {
			case payments.IntentSucceeded:
				if err != nil || res.Status != payments.IntentSucceeded {
					t.Fatalf("retry past the window: %+v %v", res, err)
				}
			case payments.IntentFailed:
				if !errors.Is(err, provider.ErrInvalidRequest) {
					t.Fatalf("retry past the window: %+v %v, want the attempt failed with proof", res, err)
				}
			}
			got := fake.CountsByCustomID(provider.DeriveKey(k, provider.StepCharge, 0, paypal.MaxProviderKeyLen))
			if got.Orders != tc.captures || got.Captures != tc.captures {
				t.Fatalf("at PayPal: %+v, want %d order(s) and capture(s)", got, tc.captures)
			}
			in, err := client.Intent(ctx, "cus_1", "pp")
			if err != nil || in.Status != tc.want {
				t.Fatalf("intent %+v %v, want %s", in, err, tc.want)
			}
		})
	}
}

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
	sp, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_busy", BaseURL: fake.URL(), HTTPClient: noKeepAliveClient(rc)})
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
		WHERE idempotency_key = $1`, composed(t, "charge", key), b.clock.Now()); err != nil {
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

// examined reads the open intent of key as the reconciler examines it.
func (b busy) examined(t *testing.T, key string) payments.Examined {
	t.Helper()
	in := payments.Examined{Scope: "cus_1", Key: composed(t, "charge", key), Kind: payments.KindCharge, Provider: "stripe",
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
