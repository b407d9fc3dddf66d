package stripetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/balancetransaction"
	"github.com/stripe/stripe-go/v79/paymentintent"
	"github.com/stripe/stripe-go/v79/refund"

	"github.com/payonce/payonce/providers/internal/testkit"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

type bundle struct {
	srv   *stripetest.Server
	sc    *clients
	clock *stripetest.ManualClock
}

// setup starts a fake with a manual clock and a stripe-go client without retries. Keep-alives
// are off: on a reused connection net/http itself resends a request carrying an
// Idempotency-Key after a reset, which would hide ResetAfter from the test.
func setup(t *testing.T, cfg *stripetest.Config) *bundle {
	t.Helper()
	if cfg == nil {
		cfg = &stripetest.Config{}
	}
	clock := stripetest.NewManualClock(t0)
	if cfg.Clock == nil {
		cfg.Clock = clock.Now
	}
	srv := stripetest.NewServer(cfg)
	t.Cleanup(srv.Close)
	return &bundle{srv: srv, sc: newClient(srv, "sk_test_x"), clock: clock}
}

// clients holds the stripe-go resource clients the tests use, one backend and key for all, as
// the adapter does (stripe-go's client.API would link every resource package).
type clients struct {
	PaymentIntents      *paymentintent.Client
	Refunds             *refund.Client
	BalanceTransactions *balancetransaction.Client
}

func newClient(srv *stripetest.Server, apiKey string) *clients {
	httpClient := &http.Client{Timeout: testkit.Patience, Transport: &http.Transport{DisableKeepAlives: true}}
	b := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(srv.URL()),
		MaxNetworkRetries: stripe.Int64(0),
		HTTPClient:        httpClient,
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return &clients{
		PaymentIntents:      &paymentintent.Client{B: b, Key: apiKey},
		Refunds:             &refund.Client{B: b, Key: apiKey},
		BalanceTransactions: &balancetransaction.Client{B: b, Key: apiKey},
	}
}

func chargeParams(key string, amount int64, pm string) *stripe.PaymentIntentParams {
	p := &stripe.PaymentIntentParams{
		Amount:        stripe.Int64(amount),
		Currency:      stripe.String("usd"),
		PaymentMethod: stripe.String(pm),
		Confirm:       stripe.Bool(true),
		Description:   stripe.String("order " + key),
	}
	p.AddMetadata("payonce_key", key)
	if key != "" {
		p.SetIdempotencyKey(key)
	}
	return p
}

func stripeErr(t *testing.T, err error) *stripe.Error {
	t.Helper()
	var se *stripe.Error
	if !errors.As(err, &se) {
		t.Fatalf("want *stripe.Error, got %T: %v", err, err)
	}
	return se
}

func wantCounts(t *testing.T, srv *stripetest.Server, key string, want stripetest.Counts) {
	t.Helper()
	if got := srv.CountsByIdempotencyKey(key); got != want {
		t.Fatalf("counts for key %q = %+v, want %+v", key, got, want)
	}
}

// apiGet GETs pathQuery from srv over raw HTTP as sk_test_x, decodes the JSON answer into v and
// returns the status.
func apiGet(t *testing.T, srv *stripetest.Server, pathQuery string, v any) int {
	t.Helper()
	resp := testkit.Get(t, srv.URL()+pathQuery, "Bearer sk_test_x")
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("answer to GET %s is not JSON: %v: %s", pathQuery, err, body)
	}
	return resp.StatusCode
}

func TestCreateSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	pi, err := b.sc.PaymentIntents.New(chargeParams("k1", 1250, stripetest.PaymentMethodVisa))
	if err != nil {
		t.Fatal(err)
	}
	if pi.Status != stripe.PaymentIntentStatusSucceeded || pi.Amount != 1250 || pi.AmountReceived != 1250 ||
		pi.Currency != "usd" || pi.Object != "payment_intent" || pi.Metadata["payonce_key"] != "k1" ||
		pi.LatestCharge == nil || pi.LatestCharge.ID == "" || pi.Created != t0.Unix() || pi.Description != "order k1" {
		t.Fatalf("unexpected PaymentIntent: %s", pi.LastResponse.RawJSON)
	}
	if h := pi.LastResponse.Header.Get("Idempotent-Replayed"); h != "" {
		t.Fatalf("first response has Idempotent-Replayed %q", h)
	}
	got, err := b.sc.PaymentIntents.Get(pi.ID, nil)
	if err != nil || got.ID != pi.ID || got.Status != pi.Status {
		t.Fatalf("Get = %v, %v", got, err)
	}
	_, err = b.sc.PaymentIntents.Get("pi_missing", nil)
	if se := stripeErr(t, err); se.HTTPStatusCode != 404 || se.Code != stripe.ErrorCodeResourceMissing {
		t.Fatalf("Get missing: %+v", se)
	}
	wantCounts(t, b.srv, "k1", stripetest.Counts{PaymentIntents: 1})
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, key := range []string{"", "sk_live_abcdefghijkl"} {
		_, err := newClient(b.srv, key).PaymentIntents.New(chargeParams("k", 100, stripetest.PaymentMethodVisa))
		if se := stripeErr(t, err); se.HTTPStatusCode != 401 || se.Type != stripe.ErrorTypeInvalidRequest {
			t.Fatalf("key %q: %+v", key, se)
		}
	}
	wantCounts(t, b.srv, "k", stripetest.Counts{})
}

func TestReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	first, err := b.sc.PaymentIntents.New(chargeParams("k1", 500, stripetest.PaymentMethodVisa))
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.sc.PaymentIntents.New(chargeParams("k1", 500, stripetest.PaymentMethodVisa))
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID {
		t.Fatalf("replay created %s, first was %s", again.ID, first.ID)
	}
	if h := again.LastResponse.Header.Get("Idempotent-Replayed"); h != "true" {
		t.Fatalf("Idempotent-Replayed = %q", h)
	}
	if again.LastResponse.Header.Get("Original-Request") != first.LastResponse.RequestID {
		t.Fatalf("Original-Request = %q, want %q", again.LastResponse.Header.Get("Original-Request"), first.LastResponse.RequestID)
	}
	wantCounts(t, b.srv, "k1", stripetest.Counts{PaymentIntents: 1})

	// Idempotency keys are scoped per API key.
	other, err := newClient(b.srv, "sk_test_other").PaymentIntents.New(chargeParams("k1", 500, stripetest.PaymentMethodVisa))
	if err != nil || other.ID == first.ID {
		t.Fatalf("other API key: %v, %v", other, err)
	}
	wantCounts(t, b.srv, "k1", stripetest.Counts{PaymentIntents: 2})
}

func TestSameKeyDifferentParams(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if _, err := b.sc.PaymentIntents.New(chargeParams("k1", 500, stripetest.PaymentMethodVisa)); err != nil {
		t.Fatal(err)
	}
	_, err := b.sc.PaymentIntents.New(chargeParams("k1", 501, stripetest.PaymentMethodVisa))
	se := stripeErr(t, err)
	if se.Type != stripe.ErrorTypeIdempotency || se.HTTPStatusCode != 400 {
		t.Fatalf("got %+v", se)
	}
	// Same key on another endpoint.
	rp := &stripe.RefundParams{PaymentIntent: stripe.String("pi_x")}
	rp.SetIdempotencyKey("k1")
	_, err = b.sc.Refunds.New(rp)
	if se := stripeErr(t, err); se.Type != stripe.ErrorTypeIdempotency || se.HTTPStatusCode != 400 {
		t.Fatalf("other endpoint: %+v", se)
	}
	wantCounts(t, b.srv, "k1", stripetest.Counts{PaymentIntents: 1})
}

// Stripe answers a request whose key another request is still executing with 409 Conflict
// (https://docs.stripe.com/api/errors) and the code idempotency_key_in_use
// (https://docs.stripe.com/error-codes); the type is invalid_request_error as observed. It saves
// nothing for the collision (https://docs.stripe.com/api/idempotent_requests): once the first
// request completed, the same key replays the first answer.
func TestConcurrentSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// Whichever request claims the key is held until the others have all been answered: they
	// collide with it however slowly they arrive.
	b.srv.Inject(stripetest.Fault{Kind: stripetest.Latency, Delay: time.Hour, Path: "/v1/payment_intents"})

	const n = 6
	var wg sync.WaitGroup
	pis := make([]*stripe.PaymentIntent, n)
	errs := make([]error, n)
	answered := make(chan struct{}, n)
	for i := range n {
		wg.Go(func() {
			pis[i], errs[i] = b.sc.PaymentIntents.New(chargeParams("k1", 700, stripetest.PaymentMethodVisa))
			answered <- struct{}{}
		})
	}
	for range n - 1 {
		<-answered
	}
	b.srv.EndLatency()
	wg.Wait()
	var first *stripe.PaymentIntent
	inUse := 0
	for i, err := range errs {
		if err == nil {
			first = pis[i]
			continue
		}
		se := stripeErr(t, err)
		if se.HTTPStatusCode != http.StatusConflict || se.Type != stripe.ErrorTypeInvalidRequest ||
			se.Code != stripe.ErrorCodeIdempotencyKeyInUse || !strings.Contains(se.Msg, "k1") {
			t.Fatalf("got %+v", se)
		}
		if h := se.LastResponse.Header.Get("Idempotent-Replayed"); h != "" {
			t.Fatalf("a collision is not a replay: Idempotent-Replayed %q", h)
		}
		inUse++
	}
	if first == nil || inUse != n-1 {
		t.Fatalf("ok=%v inUse=%d", first != nil, inUse)
	}
	again, err := b.sc.PaymentIntents.New(chargeParams("k1", 700, stripetest.PaymentMethodVisa))
	if err != nil || again.ID != first.ID || again.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after the collisions the key must replay the first answer: %v, %v", again, err)
	}
	wantCounts(t, b.srv, "k1", stripetest.Counts{PaymentIntents: 1})
}

func TestDeclines(t *testing.T) {
	t.Parallel()
	for pm, code := range map[string]stripe.DeclineCode{
		stripetest.PaymentMethodDeclined:          stripe.DeclineCodeGenericDecline,
		stripetest.PaymentMethodInsufficientFunds: stripe.DeclineCodeInsufficientFunds,
	} {
		t.Run(pm, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			var piID string
			for attempt := range 2 {
				_, err := b.sc.PaymentIntents.New(chargeParams("k1", 900, pm))
				se := stripeErr(t, err)
				if se.HTTPStatusCode != 402 || se.Type != stripe.ErrorTypeCard || se.Code != stripe.ErrorCodeCardDeclined ||
					se.DeclineCode != code || se.PaymentIntent == nil || se.ChargeID == "" {
					t.Fatalf("attempt %d: %+v", attempt, se)
				}
				if se.PaymentIntent.Status != stripe.PaymentIntentStatusRequiresPaymentMethod ||
					se.PaymentIntent.LastPaymentError == nil || se.PaymentIntent.LastPaymentError.DeclineCode != code {
					t.Fatalf("attempt %d: PaymentIntent %+v", attempt, se.PaymentIntent)
				}
				replayed := se.LastResponse.Header.Get("Idempotent-Replayed") == "true"
				if replayed != (attempt == 1) {
					t.Fatalf("attempt %d: replayed=%v", attempt, replayed)
				}
				if attempt == 1 && se.PaymentIntent.ID != piID {
					t.Fatalf("replayed decline names %s, first %s", se.PaymentIntent.ID, piID)
				}
				piID = se.PaymentIntent.ID
			}
			wantCounts(t, b.srv, "k1", stripetest.Counts{PaymentIntents: 1})
			if tot := b.srv.Totals(); tot["usd"].Succeeded != 0 {
				t.Fatalf("declined charge counted in totals: %+v", tot)
			}
		})
	}
}

func TestAuthenticationRequired(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	pi, err := b.sc.PaymentIntents.New(chargeParams("k1", 900, stripetest.PaymentMethodAuthenticationRequired))
	if err != nil {
		t.Fatal(err)
	}
	if pi.Status != stripe.PaymentIntentStatusRequiresAction || pi.NextAction == nil || pi.NextAction.Type != "use_stripe_sdk" {
		t.Fatalf("got %s", pi.LastResponse.RawJSON)
	}
}

func TestValidationFailureIsNotCached(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	bad := chargeParams("k1", 900, stripetest.PaymentMethodVisa)
	bad.Currency = nil
	_, err := b.sc.PaymentIntents.New(bad)
	if se := stripeErr(t, err); se.HTTPStatusCode != 400 || se.Code != stripe.ErrorCodeParameterMissing || se.Param != "currency" {
		t.Fatalf("got %+v", se)
	}
	// Different parameters, same key: accepted, because nothing was saved for the key.
	pi, err := b.sc.PaymentIntents.New(chargeParams("k1", 900, stripetest.PaymentMethodVisa))
	if err != nil || pi.LastResponse.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("after validation failure: %v, %v", pi, err)
	}
	wantCounts(t, b.srv, "k1", stripetest.Counts{PaymentIntents: 1})
}

// Stripe caches a 500 produced after the endpoint started executing and replays it for the same
// key, so a retry with the same key never learns that the charge succeeded. Only the List API
// (or the metadata) reveals it.
func TestFailAfterReplaysCached500(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.Inject(stripetest.Fault{Kind: stripetest.FailAfter, Method: "POST", IdempotencyKey: "k1"})
	for attempt := range 2 {
		_, err := b.sc.PaymentIntents.New(chargeParams("k1", 1000, stripetest.PaymentMethodVisa))
		se := stripeErr(t, err)
		if se.HTTPStatusCode != 500 || se.Type != stripe.ErrorTypeAPI {
			t.Fatalf("attempt %d: %+v", attempt, se)
		}
		if replayed := se.LastResponse.Header.Get("Idempotent-Replayed") == "true"; replayed != (attempt == 1) {
			t.Fatalf("attempt %d: replayed=%v", attempt, replayed)
		}
	}
	wantCounts(t, b.srv, "k1", stripetest.Counts{PaymentIntents: 1})
	if got := b.srv.CountsByMetadata("payonce_key", "k1"); got.PaymentIntents != 1 {
		t.Fatalf("by metadata: %+v", got)
	}
	if tot := b.srv.Totals()["usd"]; tot.Succeeded != 1000 {
		t.Fatalf("totals %+v: the charge happened", tot)
	}
}

func TestResetAfterReplaysSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Path: "/v1/payment_intents"})
	_, err := b.sc.PaymentIntents.New(chargeParams("k1", 1000, stripetest.PaymentMethodVisa))
	var se *stripe.Error
	if err == nil || errors.As(err, &se) {
		t.Fatalf("want a transport error, got %v", err)
	}
	pi, err := b.sc.PaymentIntents.New(chargeParams("k1", 1000, stripetest.PaymentMethodVisa))
	if err != nil {
		t.Fatal(err)
	}
	if pi.LastResponse.Header.Get("Idempotent-Replayed") != "true" || pi.Status != stripe.PaymentIntentStatusSucceeded {
		t.Fatalf("retry: %s", pi.LastResponse.RawJSON)
	}
	it := b.sc.PaymentIntents.List(&stripe.PaymentIntentListParams{})
	if !it.Next() || it.PaymentIntent().ID != pi.ID || it.Next() {
		t.Fatalf("list does not hold exactly %s (err %v)", pi.ID, it.Err())
	}
	wantCounts(t, b.srv, "k1", stripetest.Counts{PaymentIntents: 1})
}

func TestFailBeforeThenRetrySucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.Inject(stripetest.Fault{Kind: stripetest.FailBefore, Path: "/v1/payment_intents"})
	_, err := b.sc.PaymentIntents.New(chargeParams("k1", 1000, stripetest.PaymentMethodVisa))
	if se := stripeErr(t, err); se.HTTPStatusCode != 500 {
		t.Fatalf("got %+v", se)
	}
	wantCounts(t, b.srv, "k1", stripetest.Counts{})
	pi, err := b.sc.PaymentIntents.New(chargeParams("k1", 1000, stripetest.PaymentMethodVisa))
	if err != nil || pi.LastResponse.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry: %v, %v", pi, err)
	}
	wantCounts(t, b.srv, "k1", stripetest.Counts{PaymentIntents: 1})
}

func TestHangReleasesKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.Inject(stripetest.Fault{Kind: stripetest.Hang})
	p := chargeParams("k1", 1000, stripetest.PaymentMethodVisa)
	p.Context = testkit.DeadlineWhenHeld(t, b.srv.WaitHeld) // passes once the fake holds the request
	if _, err := b.sc.PaymentIntents.New(p); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want deadline exceeded, got %v", err)
	}
	// The server notices the abandoned request asynchronously; until then the key is in use.
	deadline := time.Now().Add(testkit.Patience)
	for {
		_, err := b.sc.PaymentIntents.New(chargeParams("k1", 1000, stripetest.PaymentMethodVisa))
		if err == nil {
			break
		}
		if se := stripeErr(t, err); se.Code != stripe.ErrorCodeIdempotencyKeyInUse || time.Now().After(deadline) {
			t.Fatalf("retry: %+v", se)
		}
		time.Sleep(10 * time.Millisecond)
	}
	wantCounts(t, b.srv, "k1", stripetest.Counts{PaymentIntents: 1})
}

// "You can remove keys from the system automatically after they're at least 24 hours old. We
// generate a new request if a key is reused after the original is pruned."
// (https://docs.stripe.com/api/idempotent_requests) Within 24 hours on the fake's clock the key
// replays; past them it creates a second PaymentIntent, which the key then replays.
func TestKeyPrunedAfter24Hours(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	charge := func() *stripe.PaymentIntent {
		t.Helper()
		pi, err := b.sc.PaymentIntents.New(chargeParams("k1", 300, stripetest.PaymentMethodVisa))
		if err != nil {
			t.Fatal(err)
		}
		return pi
	}
	replayed := func(pi *stripe.PaymentIntent) bool {
		return pi.LastResponse.Header.Get("Idempotent-Replayed") == "true"
	}

	first := charge()
	for _, d := range []time.Duration{time.Hour, 22 * time.Hour, 59*time.Minute + 59*time.Second} { // up to 24h - 1s
		b.clock.Advance(d)
		if again := charge(); again.ID != first.ID || !replayed(again) {
			t.Fatalf("%v after the first request: %s (replayed %v), want a replay of %s",
				b.clock.Now().Sub(t0), again.ID, replayed(again), first.ID)
		}
	}
	wantCounts(t, b.srv, "k1", stripetest.Counts{PaymentIntents: 1})

	b.clock.Advance(2 * time.Second) // 24h + 1s
	fresh := charge()
	if fresh.ID == first.ID || replayed(fresh) || fresh.Created != b.clock.Now().Unix() {
		t.Fatalf("after 24h the key must start a new request, got %s", fresh.LastResponse.RawJSON)
	}
	wantCounts(t, b.srv, "k1", stripetest.Counts{PaymentIntents: 2})
	if tot := b.srv.Totals()["usd"]; tot.Succeeded != 600 {
		t.Fatalf("totals %+v: both PaymentIntents charged", tot)
	}

	// The key now belongs to the second request, for another 24 hours.
	b.clock.Advance(23 * time.Hour)
	if again := charge(); again.ID != fresh.ID || !replayed(again) {
		t.Fatalf("the pruned key's new request is not replayed: %s", again.LastResponse.RawJSON)
	}
	wantCounts(t, b.srv, "k1", stripetest.Counts{PaymentIntents: 2})
}

func TestRefundsBoundedByAmount(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	pi, err := b.sc.PaymentIntents.New(chargeParams("charge", 1000, stripetest.PaymentMethodVisa))
	if err != nil {
		t.Fatal(err)
	}
	refund := func(key string, amount int64) (*stripe.Refund, error) {
		p := &stripe.RefundParams{PaymentIntent: stripe.String(pi.ID)}
		if amount > 0 {
			p.Amount = stripe.Int64(amount)
		}
		p.AddMetadata("payonce_key", key)
		p.SetIdempotencyKey(key)
		return b.sc.Refunds.New(p)
	}
	r1, err := refund("r1", 600)
	if err != nil || r1.Amount != 600 || r1.Status != stripe.RefundStatusSucceeded || r1.PaymentIntent.ID != pi.ID {
		t.Fatalf("r1: %v, %v", r1, err)
	}
	if again, err := refund("r1", 600); err != nil || again.ID != r1.ID || again.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("r1 replay: %v, %v", again, err)
	}
	_, err = refund("r2", 500)
	if se := stripeErr(t, err); se.HTTPStatusCode != 400 || se.Code != stripe.ErrorCodeAmountTooLarge {
		t.Fatalf("r2: %+v", se)
	}
	r3, err := refund("r3", 0) // the rest
	if err != nil || r3.Amount != 400 {
		t.Fatalf("r3: %v, %v", r3, err)
	}
	_, err = refund("r4", 1)
	if se := stripeErr(t, err); se.HTTPStatusCode != 400 || se.Code != stripe.ErrorCodeChargeAlreadyRefunded {
		t.Fatalf("r4: %+v", se)
	}
	got, err := b.sc.Refunds.Get(r3.ID, nil)
	if err != nil || got.Amount != 400 {
		t.Fatalf("Get: %v, %v", got, err)
	}
	wantCounts(t, b.srv, "r1", stripetest.Counts{Refunds: 1})
	wantCounts(t, b.srv, "r2", stripetest.Counts{})
	if c := b.srv.CountsByMetadata("payonce_key", "r3"); c != (stripetest.Counts{Refunds: 1}) {
		t.Fatalf("by metadata: %+v", c)
	}
	if tot := b.srv.Totals()["usd"]; tot != (stripetest.Total{Succeeded: 1000, Refunded: 1000, Net: 0}) {
		t.Fatalf("totals %+v", tot)
	}
}

func TestListCreatedFilter(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var ids []string
	for i := range 3 {
		pi, err := b.sc.PaymentIntents.New(chargeParams("k"+strconv.Itoa(i), 100, stripetest.PaymentMethodVisa))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, pi.ID)
		b.clock.Advance(time.Hour)
	}
	collect := func(p *stripe.PaymentIntentListParams) []string {
		t.Helper()
		var got []string
		it := b.sc.PaymentIntents.List(p)
		for it.Next() {
			got = append(got, it.PaymentIntent().ID)
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
		return got
	}
	mid := t0.Add(time.Hour).Unix()
	only := collect(&stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: mid, LesserThanOrEqual: mid}})
	if len(only) != 1 || only[0] != ids[1] {
		t.Fatalf("created = mid: %v, want [%s]", only, ids[1])
	}
	// Newest first, paginated two at a time by the iterator through starting_after.
	p := &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: t0.Unix()}}
	p.Limit = stripe.Int64(2)
	all := collect(p)
	if fmt.Sprint(all) != fmt.Sprint([]string{ids[2], ids[1], ids[0]}) {
		t.Fatalf("list = %v, ids %v", all, ids)
	}
}

func TestFaultsDeterministicUnderSeed(t *testing.T) {
	t.Parallel()
	pattern := func(seed int64) string {
		b := setup(t, &stripetest.Config{Seed: seed, Faults: []stripetest.Fault{
			{Kind: stripetest.FailBefore, Path: "/v1/payment_intents", Probability: 0.3},
		}})
		out := make([]byte, 0, 40)
		for i := range 40 {
			if _, err := b.sc.PaymentIntents.New(chargeParams("k"+strconv.Itoa(i), 100, stripetest.PaymentMethodVisa)); err != nil {
				out = append(out, 'x')
			} else {
				out = append(out, '.')
			}
		}
		return string(out)
	}
	a, again, other := pattern(42), pattern(42), pattern(7)
	if a != again {
		t.Fatalf("same seed, different faults:\n%s\n%s", a, again)
	}
	if a == other {
		t.Fatalf("different seeds gave the same faults: %s", a)
	}
	if n := strings.Count(a, "x"); n == 0 || n == len(a) {
		t.Fatalf("probability 0.3 gave %q", a)
	}
}

func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if _, err := b.sc.PaymentIntents.New(chargeParams("k1", 1000, stripetest.PaymentMethodVisa)); err != nil {
		t.Fatal(err)
	}
	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get(b.srv.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	var c stripetest.Counts
	get("/_fake/counts?idempotency_key=k1", &c)
	if c != (stripetest.Counts{PaymentIntents: 1}) {
		t.Fatalf("by key: %+v", c)
	}
	get("/_fake/counts?metadata_key=payonce_key&metadata_value=k1", &c)
	if c != (stripetest.Counts{PaymentIntents: 1}) {
		t.Fatalf("by metadata: %+v", c)
	}
	var tot map[string]stripetest.Total
	get("/_fake/totals", &tot)
	if tot["usd"] != (stripetest.Total{Succeeded: 1000, Net: 1000}) {
		t.Fatalf("totals: %+v", tot)
	}
}

func TestInvalidConfigPanicsNamingField(t *testing.T) {
	t.Parallel()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Config.Faults[0].Probability") {
			t.Fatalf("recover() = %v", r)
		}
	}()
	stripetest.NewUnstartedServer(&stripetest.Config{Faults: []stripetest.Fault{{Kind: stripetest.FailBefore}}})
}
