package paypal_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/testkit"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
	"github.com/payonce/payonce/providers/providertest"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

type bundle struct {
	srv   *paypaltest.Server
	p     *paypal.Provider
	clock *paypaltest.ManualClock
	sent  sentRequests
}

// sentRequests keeps the requests a Provider sends; its methods leave the token's out.
type sentRequests struct{ *testkit.Recorder }

const tokenEndpoint = "POST /v1/oauth2/token"

// all returns the API requests sent so far ("POST /v2/checkout/orders").
func (r sentRequests) all() []string {
	var out []string
	for _, s := range r.All() {
		if s.Endpoint() != tokenEndpoint {
			out = append(out, s.Endpoint())
		}
	}
	return out
}

// count returns how many requests matched method and the path.Match pattern ("*" is one
// segment).
func (r sentRequests) count(method, pattern string) int { return len(r.Matching(method, pattern)) }

// take counts the API requests sent since the last take per "METHOD path".
func (r sentRequests) take() map[string]int {
	got := testkit.Endpoints(r.Take())
	delete(got, tokenEndpoint)
	return got
}

// setup starts a fake on a manual clock and a Provider on it sharing that clock. Keep-alives are
// off so that a lost response is seen as lost.
func setup(t *testing.T, cfg *paypaltest.Config) bundle {
	t.Helper()
	if cfg == nil {
		cfg = &paypaltest.Config{}
	}
	clock := paypaltest.NewManualClock(t0)
	if cfg.Clock == nil {
		cfg.Clock = clock.Now
	}
	srv := paypaltest.NewServer(cfg)
	t.Cleanup(srv.Close)
	sent := sentRequests{&testkit.Recorder{}}
	return bundle{srv: srv, p: newProvider(t, srv, clock, sent), clock: clock, sent: sent}
}

// newProvider returns a Provider on srv's default credentials and webhook, on clock, that
// sends its requests through transport.
func newProvider(t *testing.T, srv *paypaltest.Server, clock *paypaltest.ManualClock, transport http.RoundTripper) *paypal.Provider {
	t.Helper()
	p, err := paypal.New(&paypal.Config{
		ClientID:   paypaltest.DefaultClientID,
		Secret:     paypaltest.DefaultSecret,
		BaseURL:    srv.URL(),
		HTTPClient: &http.Client{Timeout: time.Minute, Transport: transport},
		WebhookID:  paypaltest.DefaultWebhookID,
		Clock:      clock.Now,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

// countedProvider is a second Provider on b's fake whose requests are counted.
func countedProvider(t *testing.T, b bundle) (*paypal.Provider, sentRequests) {
	t.Helper()
	rc := sentRequests{&testkit.Recorder{}}
	return newProvider(t, b.srv, b.clock, rc), rc
}

// sink is a webhook endpoint recording deliveries.
type sink struct {
	mu         sync.Mutex
	deliveries []delivery
}

type delivery struct {
	header http.Header
	body   []byte
}

func newSink(t *testing.T) (*sink, string) {
	s := &sink{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.deliveries = append(s.deliveries, delivery{r.Header.Clone(), b})
		s.mu.Unlock()
	}))
	t.Cleanup(ts.Close)
	return s, ts.URL
}

func (s *sink) all() []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]delivery(nil), s.deliveries...)
}

func setupWithSink(t *testing.T, cfg *paypaltest.Config) (bundle, *sink) {
	s, u := newSink(t)
	if cfg == nil {
		cfg = &paypaltest.Config{}
	}
	cfg.WebhookURL = u
	return setup(t, cfg), s
}

func eur(s string) money.Money { return testkit.EUR(s) }

func chargeReq(key, pm string) provider.ChargeRequest {
	return provider.ChargeRequest{
		Key:           key,
		ProviderKey:   provider.DeriveKey(key, "charge", 0, paypal.MaxProviderKeyLen),
		Amount:        eur("20.00"),
		PaymentMethod: pm,
		Description:   "order " + key,
	}
}

func refundReq(key, chargeID string, amount money.Money) provider.RefundRequest {
	return testkit.RefundRequest(key, chargeID, amount, paypal.MaxProviderKeyLen)
}

func ctxT(t *testing.T) context.Context { return testkit.Ctx(t) }

// must(call())(t) fails t if call returned an error.
func must[T any](v T, err error) func(*testing.T) T { return testkit.Must(v, err) }

func errAs[E error](t *testing.T, err error) E {
	t.Helper()
	return testkit.ErrAs[E](t, err)
}

func wantCounts(t *testing.T, b bundle, customID string, want paypaltest.Counts) {
	t.Helper()
	if got := b.srv.CountsByCustomID(customID); got != want {
		t.Fatalf("fake holds %+v for custom_id %q, want %+v", got, customID, want)
	}
}

// charged charges key with a card that succeeds: the order is captured at its create.
func charged(t *testing.T, b bundle, key string) provider.ChargeResult {
	t.Helper()
	return must(b.p.Charge(ctxT(t), chargeReq(key, paypaltest.PaymentMethodVisa)))(t)
}

// wantCaptured fails t unless the fake holds what a charge that succeeded leaves for customID:
// one order, captured once.
func wantCaptured(t *testing.T, b bundle, customID string) {
	t.Helper()
	wantCounts(t, b, customID, paypaltest.Counts{Orders: 1, Captures: 1})
}

// wantCaptureCalls fails t unless the Provider sent n explicit captures (POST
// /v2/checkout/orders/{id}/capture) so far.
func wantCaptureCalls(t *testing.T, b bundle, n int) {
	t.Helper()
	if got := b.sent.count("POST", "/v2/checkout/orders/*/capture"); got != n {
		t.Fatalf("capture sent %d times, want %d", got, n)
	}
}

// firstDelivery charges once and returns the first webhook delivery.
func firstDelivery(t *testing.T, b bundle, s *sink) delivery {
	t.Helper()
	must(b.p.Charge(ctxT(t), chargeReq("wh-"+t.Name(), paypaltest.PaymentMethodVisa)))(t)
	if err := b.srv.WaitDeliveries(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	d := s.all()
	if len(d) == 0 {
		t.Fatal("no webhook delivered")
	}
	return d[0]
}

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Exercise(t, func(t *testing.T) providertest.Harness {
		b, s := setupWithSink(t, nil)
		return providertest.Harness{
			Provider: b.p,
			Succeeds: paypaltest.PaymentMethodVisa,
			Declines: paypaltest.PaymentMethodDeclined,
			Charges: func(key string) int {
				return b.srv.CountsByCustomID(provider.DeriveKey(key, "charge", 0, provider.MaxReferenceLen(b.p))).Captures
			},
			LoseNextResponse: func() {
				// The create captures (single-step): losing its answer loses the charge's.
				b.srv.Inject(paypaltest.Fault{Kind: paypaltest.ResetAfter, Method: "POST", Path: "/v2/checkout/orders"})
			},
			HoldNext: func() (func(context.Context) error, func()) {
				b.srv.Inject(paypaltest.Fault{Kind: paypaltest.Latency, Delay: time.Hour, Method: "POST", Path: "/v2/checkout/orders"})
				return func(ctx context.Context) error { return b.srv.WaitHeld(ctx, 1) }, b.srv.EndLatency
			},
			Webhook: func(t *testing.T) (good, bad error) {
				d := firstDelivery(t, b, s)
				_, good = b.p.VerifyWebhook(ctxT(t), d.header, d.body)
				forged := d.header.Clone()
				forged.Set(paypal.HeaderTransmissionSig, strings.Repeat("A", 44))
				_, bad = b.p.VerifyWebhook(ctxT(t), forged, d.body)
				return good, bad
			},
		}
	})
}

func jpy(t *testing.T, s string) money.Money {
	t.Helper()
	return money.MustParse(s, money.JPY)
}
