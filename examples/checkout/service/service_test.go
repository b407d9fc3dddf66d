package service_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/examples/checkout/service"
	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers/fakes"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

type env struct {
	fake  *stripetest.Server
	fakes *fakes.Set
	url   string
	db    string // the service's database (a schema of its own)
	svc   *service.Service
}

// start runs the service with every provider's fake, their webhooks
// posted to it.
func start(t *testing.T) env { return startWith(t, nil) }

// startWith is start with cfg changed by configure first.
func startWith(t *testing.T, configure func(*service.Config)) env {
	t.Helper()
	var h atomic.Pointer[http.Handler]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*h.Load()).ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	fk := fakes.Start(fakes.Options{Stripe: true, Adyen: true, PayPal: true, WebhookBase: srv.URL})
	t.Cleanup(fk.Close)
	vars := fk.Env()
	vars["DATABASE_URL"] = pgtest.SchemaURL(t)
	cfg, err := service.ConfigFrom(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	// No keep-alives: a response lost after the fake committed must
	// reach payonce, not be resent by net/http on its own.
	cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	if configure != nil {
		configure(&cfg)
	}
	svc, err := service.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	handler := svc.Handler()
	h.Store(&handler)
	return env{fake: fk.Stripe, fakes: fk, url: srv.URL, db: vars["DATABASE_URL"], svc: svc}
}

type answer struct {
	code   int
	header http.Header
	body   map[string]any
	raw    []byte
}

func (e env) do(t *testing.T, method, path, user, key, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+user)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, header: resp.Header, raw: raw}
	if err := json.Unmarshal(raw, &a.body); err != nil {
		t.Fatalf("%s %s: body %q is not JSON: %v", method, path, raw, err)
	}
	return a
}

const visa49 = `{"amount": "49.99", "currency": "EUR", "recipient": "acct_x", "payment_method": "pm_card_visa", "provider": "stripe"}`

func (e env) pis(t *testing.T, user, key string) int {
	t.Helper()
	k, err := idempotency.ComposeKey(user, "charge", key)
	if err != nil {
		t.Fatal(err)
	}
	return e.fake.CountsByMetadata(paystripe.MetadataKey, k).PaymentIntents
}

func TestChargeReplayAndRead(t *testing.T) {
	t.Parallel()
	e := start(t)
	first := e.do(t, "POST", "/charges", "alice", "order-1", visa49)
	if first.code != 201 || first.body["status"] != "SUCCEEDED" || first.body["provider_id"] == "" || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("charge: %d %v", first.code, first.body)
	}
	again := e.do(t, "POST", "/charges", "alice", `"order-1"`, visa49) // the IETF draft's quoted form
	if again.code != 201 || again.body["provider_id"] != first.body["provider_id"] || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %v %v", again.code, again.header, again.body)
	}
	got := e.do(t, "GET", "/charges/order-1", "alice", "", "")
	if got.code != 200 || got.body["status"] != "SUCCEEDED" || got.body["amount"] != "49.99" || got.body["currency"] != "EUR" {
		t.Fatalf("read: %d %v", got.code, got.body)
	}
	if other := e.do(t, "GET", "/charges/order-1", "mallory", "", ""); other.code != 404 {
		t.Fatalf("another caller reads the charge: %d %v", other.code, other.body)
	}
	if n := e.pis(t, "alice", "order-1"); n != 1 {
		t.Fatalf("%d PaymentIntents, want 1", n)
	}
	mismatch := e.do(t, "POST", "/charges", "alice", "order-1", strings.Replace(visa49, "49.99", "50.00", 1))
	if mismatch.code != 409 || mismatch.body["type"] != "https://payonce.dev/problems/idempotency-key-reused" {
		t.Fatalf("same key, other amount: %d %v", mismatch.code, mismatch.body)
	}
}

func TestDeclineIsFinal(t *testing.T) {
	t.Parallel()
	e := start(t)
	body := strings.Replace(visa49, "pm_card_visa", stripetest.PaymentMethodInsufficientFunds, 1)
	for i := 0; i < 2; i++ {
		a := e.do(t, "POST", "/charges", "bob", "order-d", body)
		if a.code != 402 || a.body["decline_code"] != "insufficient_funds" || (i == 1) != (a.header.Get("Idempotent-Replayed") == "true") {
			t.Fatalf("attempt %d: %d %v %v", i, a.code, a.header, a.body)
		}
	}
	if got := e.do(t, "GET", "/charges/order-d", "bob", "", ""); got.body["status"] != "DECLINED" {
		t.Fatalf("read: %v", got.body)
	}
}

func TestLostResponseAnswers503ThenResolves(t *testing.T) {
	t.Parallel()
	e := start(t)
	e.fake.Inject(stripetest.Fault{Kind: stripetest.FailAfter, Method: "POST", Path: "/v1/payment_intents"})
	lost := e.do(t, "POST", "/charges", "carol", "order-l", visa49)
	if lost.code != 503 || lost.header.Get("Retry-After") == "" || lost.body["status"] != "UNKNOWN" {
		t.Fatalf("lost response: %d %v %v", lost.code, lost.header, lost.body)
	}
	// Stripe cached the 500 for this key: a retry would get it again. The
	// payment_intent.succeeded webhook settles the intent; the retry then
	// answers from it, without a second charge.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.fake.WaitDeliveries(ctx); err != nil {
		t.Fatal(err)
	}
	again := e.do(t, "POST", "/charges", "carol", "order-l", visa49)
	if again.code != 201 || again.body["status"] != "SUCCEEDED" {
		t.Fatalf("retry after the webhook: %d %v", again.code, again.body)
	}
	if n := e.pis(t, "carol", "order-l"); n != 1 {
		t.Fatalf("%d PaymentIntents, want 1", n)
	}

	e.fake.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	reset := e.do(t, "POST", "/charges", "carol", "order-r", visa49)
	if reset.code != 503 {
		t.Fatalf("reset after commit: %d %v", reset.code, reset.body)
	}
	ok := e.do(t, "POST", "/charges", "carol", "order-r", visa49)
	if ok.code != 201 || ok.body["status"] != "SUCCEEDED" {
		t.Fatalf("retry after a reset: %d %v", ok.code, ok.body)
	}
	if n := e.pis(t, "carol", "order-r"); n != 1 {
		t.Fatalf("%d PaymentIntents, want 1", n)
	}
}

func TestRefunds(t *testing.T) {
	t.Parallel()
	e := start(t)
	if a := e.do(t, "POST", "/charges", "dan", "order-9", visa49); a.code != 201 {
		t.Fatalf("charge: %d %v", a.code, a.body)
	}
	r := e.do(t, "POST", "/refunds", "dan", "refund-1", `{"charge_key": "order-9", "amount": "40.00"}`)
	if r.code != 201 || r.body["status"] != "SUCCEEDED" || r.body["amount"] != "40.00" {
		t.Fatalf("refund: %d %v", r.code, r.body)
	}
	if again := e.do(t, "POST", "/refunds", "dan", "refund-1", `{"charge_key": "order-9", "amount": "40.00"}`); again.code != 201 || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("refund replay: %d %v", again.code, again.body)
	}
	over := e.do(t, "POST", "/refunds", "dan", "refund-2", `{"charge_key": "order-9", "amount": "10.00"}`)
	if over.code != 422 || over.body["code"] != "refund_exceeds_charge" {
		t.Fatalf("refund beyond the charge: %d %v", over.code, over.body)
	}
	if nf := e.do(t, "POST", "/refunds", "dan", "refund-3", `{"charge_key": "nope", "amount": "1.00"}`); nf.code != 404 {
		t.Fatalf("refund of no charge: %d %v", nf.code, nf.body)
	}
	if tot := e.fake.Totals()["eur"]; tot.Refunded != 4000 {
		t.Fatalf("refunded at the provider: %+v, want 4000", tot)
	}
}

func TestBadInputIsNamedAndRecordsNothing(t *testing.T) {
	t.Parallel()
	e := start(t)
	cases := []struct {
		name, user, key, body string
		code                  int
		field                 string
	}{
		{"no auth", "", "k", visa49, 401, ""},
		{"no key", "eve", "", visa49, 400, ""},
		{"bad currency", "eve", "k", strings.Replace(visa49, `"EUR"`, `"EURO"`, 1), 400, "currency"},
		{"malformed amount", "eve", "k", strings.Replace(visa49, `"49.99"`, `"49,99"`, 1), 400, "amount"},
		{"too many decimals", "eve", "k", strings.Replace(visa49, `"49.99"`, `"49.999"`, 1), 400, "amount"},
		{"unknown provider", "eve", "k", strings.Replace(visa49, `"stripe"`, `"acme"`, 1), 400, "provider"},
		{"oversize recipient", "eve", "k", strings.Replace(visa49, `"acct_x"`, `"`+strings.Repeat("a", 256)+`"`, 1), 400, "recipient"},
		{"oversize metadata", "eve", "k", strings.Replace(visa49, `}`, `, "metadata": {"note": "`+strings.Repeat("x", 600)+`"}}`, 1), 400, "metadata"},
		{"unknown field", "eve", "k", strings.Replace(visa49, `}`, `, "amount_cents": 1}`, 1), 400, ""},
		{"not JSON", "eve", "k", `amount=1`, 400, ""},
	}
	for _, c := range cases {
		a := e.do(t, "POST", "/charges", c.user, c.key, c.body)
		if a.code != c.code || (c.field != "" && a.body["field"] != c.field) {
			t.Errorf("%s: %d %v, want %d naming %q", c.name, a.code, a.body, c.code, c.field)
		}
	}
	if tot := e.fake.Totals(); len(tot) != 0 {
		t.Fatalf("bad input reached the provider: %+v", tot)
	}
	if got := e.do(t, "GET", "/charges/k", "eve", "", ""); got.code != 404 {
		t.Fatalf("bad input left an intent: %d %v", got.code, got.body)
	}
}

// Adyen: refunds answer "received" and settle by the REFUND webhook,
// received on /webhooks/adyen.
func TestAdyenChargeAndRefundSettledByWebhook(t *testing.T) {
	t.Parallel()
	e := start(t)
	body := strings.Replace(visa49, `"stripe"`, `"adyen"`, 1)
	c := e.do(t, "POST", "/charges", "fay", "order-a", body)
	if c.code != 201 || c.body["status"] != "SUCCEEDED" || c.body["provider"] != "adyen" {
		t.Fatalf("charge: %d %v", c.code, c.body)
	}
	r := e.do(t, "POST", "/refunds", "fay", "refund-a", `{"charge_key": "order-a", "amount": "20.00"}`)
	if r.code != 202 || r.body["status"] != "PENDING" {
		t.Fatalf("refund: %d %v, want 202 PENDING until Adyen's webhook", r.code, r.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.fakes.Adyen.WaitDeliveries(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.do(t, "GET", "/refunds/refund-a", "fay", "", ""); got.code != 200 || got.body["status"] != "SUCCEEDED" {
		t.Fatalf("refund after the REFUND webhook: %d %v", got.code, got.body)
	}
	if tot := e.fakes.Adyen.Totals()["EUR"]; tot.Net != 2999 {
		t.Fatalf("Adyen totals: %+v, want net 2999", tot)
	}
}

// PayPal: create + capture, refund of the capture; the three providers'
// money stays apart in the ledger and at each fake.
func TestPayPalChargeAndRefund(t *testing.T) {
	t.Parallel()
	e := start(t)
	body := strings.Replace(visa49, `"stripe"`, `"paypal"`, 1)
	c := e.do(t, "POST", "/charges", "gus", "order-p", body)
	if c.code != 201 || c.body["status"] != "SUCCEEDED" || c.body["provider"] != "paypal" {
		t.Fatalf("charge: %d %v", c.code, c.body)
	}
	if again := e.do(t, "POST", "/charges", "gus", "order-p", body); again.code != 201 || again.body["provider_id"] != c.body["provider_id"] {
		t.Fatalf("replay: %d %v", again.code, again.body)
	}
	r := e.do(t, "POST", "/refunds", "gus", "refund-p", `{"charge_key": "order-p", "amount": "9.99"}`)
	if r.code != 201 || r.body["status"] != "SUCCEEDED" {
		t.Fatalf("refund: %d %v", r.code, r.body)
	}
	if tot := e.fakes.PayPal.Totals()["EUR"]; tot.Net != 4000 {
		t.Fatalf("PayPal totals: %+v, want net 4000", tot)
	}
}

// A key another customer used answers 404 and creates nothing, for charges
// and refunds: no PaymentIntent, no intent, nothing readable.
func TestKeyOfAnotherCustomerAnswers404(t *testing.T) {
	t.Parallel()
	e := start(t)
	if first := e.do(t, "POST", "/charges", "alice", "order-shared", visa49); first.code != 201 {
		t.Fatalf("charge: %d %v", first.code, first.body)
	}
	for i := 0; i < 2; i++ {
		other := e.do(t, "POST", "/charges", "mallory", "order-shared", visa49)
		if other.code != 404 || other.body["type"] != "https://payonce.dev/problems/not-found" {
			t.Fatalf("another customer's key (%d): %d %v", i, other.code, other.body)
		}
	}
	if n := e.pis(t, "mallory", "order-shared"); n != 0 {
		t.Fatalf("%d PaymentIntents for mallory, want 0", n)
	}
	if got := e.do(t, "GET", "/charges/order-shared", "mallory", "", ""); got.code != 404 {
		t.Fatalf("mallory reads a charge: %d %v", got.code, got.body)
	}
	if r := e.do(t, "POST", "/refunds", "alice", "refund-shared", `{"charge_key": "order-shared", "amount": "1.00"}`); r.code != 201 {
		t.Fatalf("alice's refund: %d %v", r.code, r.body)
	}
	if own := e.do(t, "POST", "/charges", "mallory", "order-mallory", visa49); own.code != 201 {
		t.Fatalf("mallory's own charge: %d %v", own.code, own.body)
	}
	if r := e.do(t, "POST", "/refunds", "mallory", "refund-shared", `{"charge_key": "order-mallory", "amount": "1.00"}`); r.code != 404 {
		t.Fatalf("another customer's refund key: %d %v", r.code, r.body)
	}
	if got := e.do(t, "GET", "/charges/order-mallory", "mallory", "", ""); got.code != 200 || got.body["status"] != "SUCCEEDED" {
		t.Fatalf("mallory's charge: %d %v", got.code, got.body)
	}
}
