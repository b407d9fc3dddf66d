package main

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers/fakes"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// Payments whose provider answered 5xx stay UNKNOWN, and their retries
// would be answered 503 for as long as the provider keeps its 500 for the
// key (Stripe does). With no client retry at all, the service's own
// scheduled reconciler settles them once the provider answers again (its
// first lookups get 5xx too), and GET /charges/{key} shows the final
// state: the charge the provider made SUCCEEDED, the one it never made
// FAILED.
func TestReconcilerSettlesWithoutAnyRetry(t *testing.T) {
	t.Parallel()
	// No webhooks: only the reconciler can learn what happened.
	stripe := stripetest.NewServer(&stripetest.Config{})
	t.Cleanup(stripe.Close)
	var failedLookups atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		stripe.ServeHTTP(sw, r)
		if r.Method == http.MethodGet && sw.status >= 500 {
			failedLookups.Add(1)
		}
	}))
	t.Cleanup(front.Close)
	// The first charge executes and is answered 500 (cached for its key,
	// as Stripe caches a 500 once execution started); the second is
	// answered 500 before anything happens; then the provider's next
	// lookups fail, until it recovers.
	stripe.Inject(stripetest.Fault{Kind: stripetest.FailAfter, Method: "POST", Path: "/v1/payment_intents"})
	stripe.Inject(stripetest.Fault{Kind: stripetest.FailBefore, Method: "POST", Path: "/v1/payment_intents"})
	const outage = 3
	for range outage {
		stripe.Inject(stripetest.Fault{Kind: stripetest.FailBefore, Method: "GET", Path: "/v1/"})
	}

	c := startChild(t, []string{"CHECKOUT_SERVE=1", "ADDR=127.0.0.1:0", "DATABASE_URL=" + pgtest.SchemaURL(t),
		"STRIPE_API_BASE=" + front.URL, "STRIPE_SECRET_KEY=" + fakes.StripeSecretKey, "STRIPE_WEBHOOK_SECRET=",
		"ADYEN_API_BASE=", "PAYPAL_API_BASE=", "CHECKOUT_RECOVER_SPEC=off",
		"CHECKOUT_RECONCILE_SPEC=@every 1s", "CHECKOUT_RECONCILE_GRACE=1s", "CHECKOUT_RECONCILE_RECHECK=200ms"})

	const user = "alice"
	charges := []struct{ key, want string }{{"pay-charged", "SUCCEEDED"}, {"pay-never-charged", "FAILED"}}
	for _, ch := range charges {
		a := call(t, c.url, "POST", "/charges", user, ch.key,
			`{"amount": "20.00", "currency": "EUR", "recipient": "acct_shop", "payment_method": "pm_card_visa", "provider": "stripe"}`)
		if a.code != http.StatusServiceUnavailable || a.body["status"] != "UNKNOWN" {
			t.Fatalf("%s: %d %s, want 503 with the intent UNKNOWN", ch.key, a.code, a.raw)
		}
	}
	// The event: each intent leaves UNKNOWN, or the deadline passes.
	for _, ch := range charges {
		var got answer
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			got = call(t, c.url, "GET", "/charges/"+ch.key, user, "", "")
			if got.code != http.StatusOK || got.body["status"] != "UNKNOWN" || time.Now().After(deadline) {
				break
			}
		}
		if got.code != http.StatusOK || got.body["status"] != ch.want {
			t.Fatalf("%s: GET answered %d %s, want %s settled by the service's reconciler; logs:\n%s",
				ch.key, got.code, got.raw, ch.want, c.logs.String())
		}
		if ch.want == "SUCCEEDED" && got.body["provider_id"] == "" {
			t.Fatalf("%s: settled without the provider's object: %s", ch.key, got.raw)
		}
	}
	if n := failedLookups.Load(); n != outage {
		t.Fatalf("%d lookups met the provider's outage, want %d: the reconciler must outlast it", n, outage)
	}
	// The settled charge is what a retry now gets, without a second one.
	a := call(t, c.url, "POST", "/charges", user, "pay-charged",
		`{"amount": "20.00", "currency": "EUR", "recipient": "acct_shop", "payment_method": "pm_card_visa", "provider": "stripe"}`)
	if a.code != http.StatusCreated || a.body["status"] != "SUCCEEDED" {
		t.Fatalf("retry after the reconciler: %d %s", a.code, a.raw)
	}
	for _, ch := range charges {
		key, _ := idempotency.ComposeKey(user, "charge", ch.key)
		want := 0
		if ch.want == "SUCCEEDED" {
			want = 1
		}
		if n := stripe.CountsByMetadata(paystripe.MetadataKey, key).PaymentIntents; n != want {
			t.Fatalf("%s: %d PaymentIntents at Stripe, want %d", ch.key, n, want)
		}
	}
}

// statusWriter records the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}
