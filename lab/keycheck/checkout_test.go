package keycheck

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/payonce/payonce/examples/checkout/service"
	"github.com/payonce/payonce/lab/internal/keyscan"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers/fakes"
)

// When a provider answers one customer's charge with another customer's
// object (PayPal replays the order of a request id it knows, whatever the
// body), or refuses its key as already used with other parameters (Stripe
// names that key in its message), the payment fails loudly and the
// service logs an "unexpected error". No log record, error answer or span
// of it holds either customer's idempotency key, composed or as the client
// sent it: only idempotency.ShortHash of one.
//
// Not parallel: slog's default logger is the check's while it runs (what
// logs through it is checked too).
func TestNoFullKeyWhenAProviderAnswersForAnotherKey(t *testing.T) {
	for _, p := range []struct {
		name, env, method, path, header string
	}{
		{"stripe", "STRIPE_API_BASE", "POST", "/v1/payment_intents", "Idempotency-Key"},
		{"adyen", "ADYEN_API_BASE", "POST", "/payments", "Idempotency-Key"},
		{"paypal", "PAYPAL_API_BASE", "POST", "/v2/checkout/orders", "PayPal-Request-Id"},
	} {
		t.Run(p.name, func(t *testing.T) {
			const alice, bob = "order-alice-5d1c0e", "order-bob-77e0a4"
			keys := keyscan.NewSet()
			keys.Add(alice, bob)
			check := keyscan.NewChecker(keys)
			logger := slog.New(check.Handler("the service's log", nil))
			defer slog.SetDefault(slog.Default())
			slog.SetDefault(logger)
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
				sdktrace.WithSpanProcessor(check.SpanProcessor("the service's span")))
			defer tp.Shutdown(context.Background())

			fk := fakes.Start(fakes.Options{Stripe: true, Adyen: true, PayPal: true})
			t.Cleanup(fk.Close)
			vars := fk.Env()
			// The provider, seen through a proxy that sends every creation
			// after the first with the first one's idempotency key.
			vars[p.env] = reusingFirstKey(t, vars[p.env], p.method, p.path, p.header)
			vars["DATABASE_URL"] = pgtest.SchemaURL(t)
			cfg, err := service.ConfigFrom(func(k string) string { return vars[k] })
			if err != nil {
				t.Fatal(err)
			}
			cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			cfg.Logger, cfg.TracerProvider = logger, tp
			cfg.RecoverSpec, cfg.Reconcile.Spec = "off", "off"
			svc, err := service.Open(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(svc.Close)
			srv := httptest.NewServer(svc.Handler())
			t.Cleanup(srv.Close)

			charge := func(user, key string) (int, string) {
				req, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(
					`{"amount": "12.00", "currency": "EUR", "recipient": "acct_x", "payment_method": "pm_card_visa", "provider": "`+p.name+`"}`))
				req.Header.Set("Authorization", "Bearer "+user)
				req.Header.Set("Idempotency-Key", key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode >= 400 {
					check.Scan(keyscan.ErrorText, "the answer to "+user, string(body))
				}
				return resp.StatusCode, string(body)
			}
			if code, body := charge("alice", alice); code != http.StatusCreated {
				t.Fatalf("alice's charge: %d %s", code, body)
			}
			code, body := charge("bob", bob)
			if code == http.StatusCreated || code == http.StatusAccepted {
				t.Fatalf("bob's charge was answered with alice's object: %d %s", code, body)
			}
			if err := tp.ForceFlush(context.Background()); err != nil {
				t.Fatal(err)
			}
			records, spans, texts := check.Scanned()
			if records == 0 || spans == 0 || texts == 0 {
				t.Fatalf("scanned %d records, %d spans, %d error texts: the mismatch was not seen", records, spans, texts)
			}
			for _, l := range check.Leaks() {
				t.Errorf("a full key in %s: %s", l.Where, l.Text)
			}
		})
	}
}

// reusingFirstKey serves base through a proxy that rewrites the
// idempotency header of every method path request (at base's path)
// after the first to the first one's value, and returns the proxy's base.
func reusingFirstKey(t *testing.T, base, method, path, header string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	first := ""
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(&url.URL{Scheme: u.Scheme, Host: u.Host})
		if r.In.Method != method || r.In.URL.Path != u.Path+path {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if first == "" {
			first = r.In.Header.Get(header)
		}
		r.Out.Header.Set(header, first)
	}}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL + u.Path
}
