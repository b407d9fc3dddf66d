package stripe_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/testkit"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// requestCounter keeps the requests a Provider sends.
type requestCounter struct{ *testkit.Recorder }

// calls returns how many times endpoint ("GET /v1/refunds") was called since the last check
// (calls or want).
func (c requestCounter) calls(endpoint string) int { return testkit.Endpoints(c.Take())[endpoint] }

// lastQuery returns the query of the last search.
func (c requestCounter) lastQuery() string {
	searches := c.Matching("GET", "/v1/payment_intents/search")
	return searches[len(searches)-1].Query.Get("query")
}

const (
	listEndpoint   = "GET /v1/payment_intents"
	searchEndpoint = "GET /v1/payment_intents/search"
)

// want fails t unless the List and Search endpoints were called list and search times since
// the last check.
func (c requestCounter) want(t *testing.T, list, search int) {
	t.Helper()
	if got := testkit.Endpoints(c.Take()); got[listEndpoint] != list || got[searchEndpoint] != search {
		t.Fatalf("requests %v, want %d List and %d Search", got, list, search)
	}
}

type lookupBundle struct {
	bundle
	clock    *stripetest.ManualClock
	requests requestCounter
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// setupLookup starts a fake on a manual clock (at t0) whose search index
// lags by searchLag, and a Provider on it with scanLimit whose requests are
// counted.
func setupLookup(t *testing.T, searchLag time.Duration, scanLimit int) lookupBundle {
	t.Helper()
	clock := stripetest.NewManualClock(t0)
	srv := stripetest.NewServer(&stripetest.Config{Clock: clock.Now, SearchLag: searchLag})
	t.Cleanup(srv.Close)
	rc := requestCounter{&testkit.Recorder{}}
	p := must(paystripe.New(&paystripe.Config{SecretKey: "sk_test_lookup", BaseURL: srv.URL(),
		HTTPClient: &http.Client{Timeout: time.Minute, Transport: rc}, LookupScanLimit: scanLimit}))(t)
	return lookupBundle{bundle: bundle{srv: srv, p: p}, clock: clock, requests: rc}
}

func (b lookupBundle) charge(t *testing.T, key string) provider.ChargeResult {
	t.Helper()
	res := must(b.p.Charge(context.Background(), chargeReq(key, stripetest.PaymentMethodVisa)))(t)
	b.requests.want(t, 0, 0)
	return res
}

func (b lookupBundle) lookup(t *testing.T, req provider.LookupRequest) provider.LookupResult {
	t.Helper()
	return must(b.p.Lookup(context.Background(), req))(t)
}

func foundIDs(r provider.LookupResult) []string {
	var ids []string
	for _, c := range r.Charges {
		ids = append(ids, c.ProviderID)
	}
	return ids
}

// Without a creation window Lookup asks Search, whose answer lags: a
// charge is missing until the index catches up, and the answer is never
// marked consistent. With a window, List finds it at once.
func TestLookupWithoutWindowSearches(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, time.Minute, 0)
	ch := b.charge(t, "order-s")

	got := b.lookup(t, provider.LookupRequest{Key: "order-s"})
	if got.Consistent || len(got.Charges) != 0 {
		t.Fatalf("search before the index caught up: %+v", got)
	}
	b.requests.want(t, 0, 1)

	got = b.lookup(t, provider.LookupRequest{Key: "order-s", From: t0, To: t0})
	if !got.Consistent || !slices.Equal(foundIDs(got), []string{ch.ProviderID}) {
		t.Fatalf("list with a window: %+v", got)
	}
	b.requests.want(t, 1, 0)

	b.clock.Advance(time.Minute)
	got = b.lookup(t, provider.LookupRequest{Key: "order-s", ProviderKey: "ignored", ProviderID: "ignored"})
	if got.Consistent || !slices.Equal(foundIDs(got), []string{ch.ProviderID}) ||
		got.Charges[0].Status != provider.ChargeSucceeded || !got.Charges[0].Amount.Equal(eur("20.00")) {
		t.Fatalf("search after the lag: %+v", got)
	}
	b.requests.want(t, 0, 1)

	// To alone does not bound a List scan: Search.
	got = b.lookup(t, provider.LookupRequest{Key: "order-s", To: t0.Add(time.Hour)})
	if got.Consistent || len(got.Charges) != 1 {
		t.Fatalf("search with To only: %+v", got)
	}
	b.requests.want(t, 0, 1)
}

// A window holding up to LookupScanLimit PaymentIntents is listed; one more
// and Lookup turns to Search after one List page.
func TestLookupFallsBackPastScanLimit(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 5)
	target := b.charge(t, "order-target")
	for i := range 4 {
		b.clock.Advance(time.Second)
		b.charge(t, fmt.Sprintf("other-%d", i))
	}
	window := provider.LookupRequest{Key: "order-target", From: t0, To: t0.Add(time.Hour)}

	got := b.lookup(t, window)
	if !got.Consistent || !slices.Equal(foundIDs(got), []string{target.ProviderID}) {
		t.Fatalf("5 PaymentIntents, limit 5: %+v", got)
	}
	b.requests.want(t, 1, 0)

	b.clock.Advance(time.Second)
	b.charge(t, "other-4")
	got = b.lookup(t, window)
	if got.Consistent || !slices.Equal(foundIDs(got), []string{target.ProviderID}) {
		t.Fatalf("6 PaymentIntents, limit 5: %+v", got)
	}
	b.requests.want(t, 1, 1)

	// Search's answers are kept to the window too: the target lies before it.
	late := window
	late.From = t0.Add(time.Second)
	for i := range 5 {
		b.charge(t, fmt.Sprintf("late-%d", i))
	}
	if got := b.lookup(t, late); got.Consistent || len(got.Charges) != 0 {
		t.Fatalf("search answer outside the window kept: %+v", got)
	}
	b.requests.want(t, 1, 1)
}

// What the abandoned scan found stays in the answer even when the search
// index has not caught up, and is not repeated when it has.
func TestLookupKeepsScanFindings(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, time.Hour, 2)
	b.charge(t, "old-0")
	b.charge(t, "old-1")
	target := b.charge(t, "order-new") // newest: the first the scan sees
	window := provider.LookupRequest{Key: "order-new", From: t0, To: t0}

	got := b.lookup(t, window)
	if got.Consistent || !slices.Equal(foundIDs(got), []string{target.ProviderID}) {
		t.Fatalf("before the index caught up: %+v", got)
	}
	b.requests.want(t, 1, 1)

	b.clock.Advance(time.Hour)
	got = b.lookup(t, window)
	if got.Consistent || !slices.Equal(foundIDs(got), []string{target.ProviderID}) {
		t.Fatalf("after: %+v", got)
	}
	b.requests.want(t, 1, 1)
}

// Search matches metadata values case-insensitively; Lookup keeps exact
// matches only. Keys are escaped for the query language.
func TestLookupSearchQuery(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	upper := b.charge(t, "Order-Case")
	lower := b.charge(t, "order-case")
	quoted := b.charge(t, `o'brien\x`)

	for _, tc := range []struct {
		key, query string
		want       []string
	}{
		{"order-case", `metadata['payonce_key']:'order-case'`, []string{lower.ProviderID}},
		{"Order-Case", `metadata['payonce_key']:'Order-Case'`, []string{upper.ProviderID}},
		{`o'brien\x`, `metadata['payonce_key']:'o\'brien\\x'`, []string{quoted.ProviderID}},
		// Without escaping, the key's quotes would add an OR clause
		// matching another charge.
		{`x' OR metadata['payonce_key']:'order-case`, `metadata['payonce_key']:'x\' OR metadata[\'payonce_key\']:\'order-case'`, nil},
	} {
		got := b.lookup(t, provider.LookupRequest{Key: tc.key})
		if !slices.Equal(foundIDs(got), tc.want) {
			t.Fatalf("key %q: %+v, want %v", tc.key, got, tc.want)
		}
		if q := b.requests.lastQuery(); q != tc.query {
			t.Fatalf("key %q sent query %s, want %s", tc.key, q, tc.query)
		}
	}
	b.requests.want(t, 0, 4)
	// The fake itself matched both cases: the filter is the adapter's.
	if c := b.srv.CountsByMetadata(paystripe.MetadataKey, "order-case"); c.PaymentIntents != 1 {
		t.Fatalf("counts %+v", c)
	}
}

func TestLookupSearchFailure(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	b.srv.Inject(stripetest.Fault{Kind: stripetest.FailBefore, Path: "/v1/payment_intents/search"})
	_, err := b.p.Lookup(context.Background(), provider.LookupRequest{Key: "k"})
	if ue := errAs[*provider.UnknownOutcomeError](t, err); ue.Status != 500 || !idempotency.SafeToRetry(err) {
		t.Fatalf("%+v", ue)
	}
	b.requests.want(t, 0, 1)
}

// The Search request's shape against Stripe's OpenAPI spec.
func TestSearchShapeAgainstStripeMock(t *testing.T) {
	t.Parallel()
	p := stripeMock(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := p.Lookup(ctx, provider.LookupRequest{Key: `usr_mock_o'brien`})
	shapeOK(t, "lookup without a window (GET /v1/payment_intents/search with query, limit)", err)
}

// ReadClock reads Stripe's clock from its answers' Date header (the
// fake's clock, at t0, far from this process's): the List pages a lookup
// read are readings; without one, it asks; a reading is then reused.
func TestReadClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// check fails unless ReadClock answers within its error bound of
	// Stripe's clock (which the fake's, standing still while real time
	// passes, trails by the time since the reading at most), and that
	// bound is half a second plus half a round trip made after since.
	check := func(b lookupBundle, since time.Time) {
		t.Helper()
		now, within, err := b.p.ReadClock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		elapsed := time.Since(since)
		if d := now.Sub(b.clock.Now()); d < 0 || d > within+elapsed || within < time.Second/2 || within > time.Second/2+elapsed/2 {
			t.Fatalf("ReadClock %s within %s, the fake's clock %s", now, within, b.clock.Now())
		}
	}

	b := setupLookup(t, 0, 0)
	start := time.Now()
	b.lookup(t, provider.LookupRequest{Key: "order-clock", From: t0, To: t0.Add(time.Hour)})
	b.requests.want(t, 1, 0)
	check(b, start)
	b.requests.want(t, 0, 0)

	fresh := setupLookup(t, 0, 0)
	fresh.clock.Advance(time.Hour)
	start = time.Now()
	check(fresh, start)
	fresh.requests.want(t, 1, 0)
	check(fresh, start)
	fresh.requests.want(t, 0, 0)
}

// A clock that cannot be read is an error, never a guess.
func TestReadClockFailure(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	b.srv.Inject(stripetest.Fault{Kind: stripetest.FailBefore, Method: "GET", Path: "/v1/payment_intents"})
	_, _, err := b.p.ReadClock(context.Background())
	if ue := errAs[*provider.UnknownOutcomeError](t, err); ue.Status != 500 {
		t.Fatalf("%+v", ue)
	}
}
