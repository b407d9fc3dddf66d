package payments_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

type whBundle struct {
	bundle
	recv *httptest.Server
	// drop, when set, answers deliveries 200 without handling them: the
	// webhook that never came.
	drop *atomic.Bool
}

// setupWebhooks wires the Stripe fake's webhook deliveries to the
// client's receiver; every event is delivered 1+dup times.
func setupWebhooks(t *testing.T, dup int) whBundle {
	t.Helper()
	pool := pgtest.Pool(t)
	var h atomic.Pointer[http.Handler]
	drop := new(atomic.Bool)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if drop.Load() {
			return
		}
		(*h.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(recv.Close)
	fake := stripetest.NewServer(&stripetest.Config{WebhookURL: recv.URL, DuplicateWebhooks: dup})
	t.Cleanup(fake.Close)
	prov, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_wh", BaseURL: fake.URL(),
		HTTPClient:     &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		WebhookSecrets: []string{stripetest.DefaultWebhookSecret}})
	if err != nil {
		t.Fatal(err)
	}
	store, l := openStoreLedger(t, pool)
	c, err := payments.New(pool, []provider.Provider{prov}, &payments.Config{Store: store, Ledger: l, LockTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	handler, err := c.WebhookHandler("stripe", nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Store(&handler)
	return whBundle{bundle: bundle{pool: pool, client: c, ledger: l, fake: fake}, recv: recv, drop: drop}
}

func (b whBundle) waitDeliveries(t *testing.T) {
	t.Helper()
	waitDeliveries(t, b.fake)
}

// outcomes counts stored events by outcome.
func (b whBundle) outcomes(t *testing.T) map[string]int {
	t.Helper()
	return outcomeCounts(t, b.pool, "")
}

func entries(t *testing.T, b bundle, key string) int {
	t.Helper()
	k, _ := idempotency.ComposeKey("cus_1", "charge", key)
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM ledger_entries WHERE key = $1`, k).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A lost response leaves the intent UNKNOWN; the provider's webhook
// (delivered 5 times) settles it once; the client's retry then replays.
func TestWebhookSettlesALostResponse(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, 4)
	ctx := context.Background()
	b.fake.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	_, err := b.client.Charge(ctx, params(t, "w1", "25.00", stripetest.PaymentMethodVisa))
	if !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v", err)
	}
	b.waitDeliveries(t)
	in, err := b.client.Intent(ctx, "cus_1", "w1")
	if err != nil || in.Status != payments.IntentSucceeded || in.ProviderID == "" {
		t.Fatalf("intent after the webhook: %+v %v", in, err)
	}
	if n := entries(t, b.bundle, "w1"); n != 1 {
		t.Fatalf("%d ledger entries, want 1", n)
	}
	if got := b.outcomes(t); got[payments.EventApplied] != 1 || len(got) != 1 {
		t.Fatalf("stored events: %v, want one applied (the 4 redeliveries change nothing)", got)
	}
	out, err := b.client.Charge(ctx, params(t, "w1", "25.00", stripetest.PaymentMethodVisa))
	if err != nil || out.Status != payments.IntentSucceeded || out.ProviderID != in.ProviderID {
		t.Fatalf("retry after the webhook: %+v %v", out, err)
	}
	if n := entries(t, b.bundle, "w1"); n != 1 || pis(t, b.bundle, "w1") != 1 || balance(t, b.bundle) != "25.00" {
		t.Fatalf("after the retry: %d entries, %d PaymentIntents, cash %s", n, pis(t, b.bundle, "w1"), balance(t, b.bundle))
	}
}

// The webhook arrives while the synchronous call has the provider's
// answer but has not committed it: one posting, whoever commits first.
func TestWebhookBeforeTheSynchronousCommit(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, 0)
	payments.SetCrashHooks(b.client, payments.CrashHooks{AfterProvider: func(context.Context, string) { b.waitDeliveries(t) }})
	out, err := b.client.Charge(context.Background(), params(t, "w2", "9.99", stripetest.PaymentMethodVisa))
	if err != nil || out.Status != payments.IntentSucceeded {
		t.Fatalf("charge: %+v %v", out, err)
	}
	if got := b.outcomes(t); got[payments.EventApplied] != 1 {
		t.Fatalf("the webhook did not settle first: %v", got)
	}
	if n := entries(t, b.bundle, "w2"); n != 1 || balance(t, b.bundle) != "9.99" {
		t.Fatalf("%d ledger entries, cash %s; want 1 and 9.99", n, balance(t, b.bundle))
	}
}

// signed posts a hand-made Stripe event to the receiver.
func (b whBundle) signed(t *testing.T, payload string, secret string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.recv.URL, strings.NewReader(payload))
	req.Header.Set("Stripe-Signature", stripetest.Sign([]byte(payload), secret, time.Now()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func piEvent(id, typ, pi, key string, amount int64, status string) string {
	return fmt.Sprintf(`{"id": %q, "object": "event", "type": %q, "api_version": "2024-06-20", "created": %d,
		"data": {"object": {"id": %q, "object": "payment_intent", "amount": %d, "amount_received": %d, "currency": "eur",
		"status": %q, "metadata": {"payonce_key": %q},
		"last_payment_error": {"type": "card_error", "code": "card_declined", "decline_code": "generic_decline"}}}}`,
		id, typ, time.Now().Unix(), pi, amount, amount, status, key)
}

// The same event delivered 5 times at once has one effect; events out of
// order never move a settled intent backwards.
func TestWebhookStormAndOrder(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, 0)
	ctx := context.Background()
	// An intent left UNKNOWN by a lost response, whose webhook never came.
	b.drop.Store(true)
	b.fake.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	_, err := b.client.Charge(ctx, params(t, "w3", "40.00", stripetest.PaymentMethodVisa))
	if !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v", err)
	}
	b.waitDeliveries(t)
	b.drop.Store(false)
	key, _ := idempotency.ComposeKey("cus_1", "charge", "w3")
	lookup, err := b.client.Intent(ctx, "cus_1", "w3")
	if err != nil || lookup.Status != payments.IntentUnknown {
		t.Fatalf("intent before the events: %+v %v", lookup, err)
	}
	pi := b.fake.Events()[0].ObjectID
	// A late "processing", then "succeeded" five times at once, then a
	// stale failure and "processing" again.
	if code := b.signed(t, piEvent("evt_storm_0", "payment_intent.processing", pi, key, 4000, "processing"), stripetest.DefaultWebhookSecret); code != 200 {
		t.Fatalf("processing: %d", code)
	}
	var wg sync.WaitGroup
	codes := make(chan int, 5)
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- b.signed(t, piEvent("evt_storm_1", "payment_intent.succeeded", pi, key, 4000, "succeeded"), stripetest.DefaultWebhookSecret)
		}()
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Fatalf("a concurrent delivery got %d, want 200", c)
		}
	}
	b.signed(t, piEvent("evt_storm_2", "payment_intent.payment_failed", pi, key, 4000, "requires_payment_method"), stripetest.DefaultWebhookSecret)
	b.signed(t, piEvent("evt_storm_3", "payment_intent.processing", pi, key, 4000, "processing"), stripetest.DefaultWebhookSecret)

	in, err := b.client.Intent(ctx, "cus_1", "w3")
	if err != nil || in.Status != payments.IntentSucceeded {
		t.Fatalf("intent: %+v %v, want SUCCEEDED", in, err)
	}
	if n := entries(t, b.bundle, "w3"); n != 1 {
		t.Fatalf("%d ledger entries, want 1", n)
	}
	want := map[string]string{"evt_storm_0": payments.EventConfirmed, "evt_storm_1": payments.EventApplied,
		"evt_storm_2": payments.EventStale, "evt_storm_3": payments.EventStale}
	rows, err := b.pool.Query(ctx, `SELECT event_id, outcome FROM webhook_events`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var id, o string
		if err := rows.Scan(&id, &o); err != nil {
			t.Fatal(err)
		}
		got[id] = o
	}
	rows.Close()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stored events %v, want %v", got, want)
	}
}

// Refused deliveries store nothing; an unknown type is acknowledged and
// recorded as ignored; an event naming no intent is recorded unmatched.
func TestWebhookBadInput(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, 0)
	ok := piEvent("evt_bad_1", "payment_intent.succeeded", "pi_x", "cus_1_charge_nope", 100, "succeeded")
	if code := b.signed(t, ok, "whsec_wrong"); code != http.StatusUnauthorized {
		t.Fatalf("wrong secret: %d, want 401", code)
	}
	req, _ := http.NewRequest(http.MethodPost, b.recv.URL, strings.NewReader(ok))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no signature: %d, want 401", resp.StatusCode)
	}
	if code := b.signed(t, `{"id": "evt_bad_2", "object": "event", "type": `, stripetest.DefaultWebhookSecret); code != http.StatusBadRequest {
		t.Fatalf("malformed JSON: %d, want 400", code)
	}
	if code := b.signed(t, `{"id": "evt_big", "pad": "`+strings.Repeat("x", 2<<20)+`"}`, stripetest.DefaultWebhookSecret); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversize body: %d, want 413", code)
	}
	resp, err = http.Get(b.recv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d, want 405", resp.StatusCode)
	}
	if got := b.outcomes(t); len(got) != 0 {
		t.Fatalf("refused deliveries stored %v", got)
	}
	unknownType := strings.Replace(ok, `"payment_intent.succeeded"`, `"customer.created"`, 1)
	unknownType = strings.Replace(unknownType, "evt_bad_1", "evt_bad_3", 1)
	if code := b.signed(t, unknownType, stripetest.DefaultWebhookSecret); code != 200 {
		t.Fatalf("unknown type: %d, want 200", code)
	}
	if code := b.signed(t, ok, stripetest.DefaultWebhookSecret); code != 200 {
		t.Fatalf("event for no intent: %d, want 200", code)
	}
	if got := b.outcomes(t); got[payments.EventIgnoredOutcome] != 1 || got[payments.EventUnmatched] != 1 || len(got) != 2 {
		t.Fatalf("outcomes %v, want one ignored and one unmatched", got)
	}
}

// Stripe caches a 500 produced after the charge: every retry with the key
// gets it again. Once the webhook settled the intent, a retry records that
// state and answers it, without asking the provider.
func TestRetryAfterTheWebhookSettledACached500(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, 0)
	ctx := context.Background()
	b.drop.Store(true)
	b.fake.Inject(stripetest.Fault{Kind: stripetest.FailAfter, Method: "POST", Path: "/v1/payment_intents"})
	p := params(t, "w5", "15.00", stripetest.PaymentMethodVisa)
	if _, err := b.client.Charge(ctx, p); !payments.OutcomeUnknown(err) {
		t.Fatalf("500 after the charge: %v", err)
	}
	b.waitDeliveries(t)
	if _, err := b.client.Charge(ctx, p); !payments.OutcomeUnknown(err) {
		t.Fatalf("retry of a cached 500 before any webhook: %v, want still unknown", err)
	}
	// The provider redelivers the event; this time it is handled.
	b.drop.Store(false)
	ev := b.fake.Events()[0]
	req, _ := http.NewRequest(http.MethodPost, b.recv.URL, strings.NewReader(string(ev.Payload)))
	req.Header.Set("Stripe-Signature", stripetest.Sign(ev.Payload, stripetest.DefaultWebhookSecret, time.Now()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	out, err := b.client.Charge(ctx, p)
	if err != nil || out.Status != payments.IntentSucceeded || out.ProviderID != ev.ObjectID {
		t.Fatalf("retry after the webhook: %+v %v", out, err)
	}
	again, err := b.client.Charge(ctx, p)
	if err != nil || !again.Replayed || again.ProviderID != ev.ObjectID {
		t.Fatalf("replay: %+v %v", again, err)
	}
	if n := entries(t, b.bundle, "w5"); n != 1 || pis(t, b.bundle, "w5") != 1 || balance(t, b.bundle) != "15.00" {
		t.Fatalf("%d entries, %d PaymentIntents, cash %s", n, pis(t, b.bundle, "w5"), balance(t, b.bundle))
	}
}
