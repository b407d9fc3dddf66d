package stripe_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// endpoint is a webhook endpoint as an application writes it: it verifies
// each delivery with a Provider and answers 400 when it refuses one.
type endpoint struct {
	p *paystripe.Provider

	mu         sync.Mutex
	events     []provider.WebhookEvent
	errs       []error
	deliveries []delivered
}

type delivered struct {
	header http.Header
	body   []byte
}

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	events, err := e.p.VerifyWebhook(r.Context(), r.Header, body)
	e.mu.Lock()
	e.deliveries = append(e.deliveries, delivered{r.Header.Clone(), body})
	e.events = append(e.events, events...)
	if err != nil {
		e.errs = append(e.errs, err)
	}
	e.mu.Unlock()
	if err != nil {
		http.Error(w, "refused", http.StatusBadRequest)
	}
}

// verifier returns a Provider used only to verify webhooks: it never calls
// Stripe.
func verifier(t *testing.T, secrets []string, tolerance time.Duration) *paystripe.Provider {
	t.Helper()
	return must(paystripe.New(&paystripe.Config{SecretKey: "sk_test_verify", WebhookSecrets: secrets, WebhookTolerance: tolerance}))(t)
}

// setupEndpoint starts an endpoint verifying with v, and a fake (cfg, with
// WebhookURL set to the endpoint) with a Provider charging on it.
func setupEndpoint(t *testing.T, v *paystripe.Provider, cfg stripetest.Config) (bundle, *endpoint) {
	t.Helper()
	ep := &endpoint{p: v}
	hs := httptest.NewServer(ep)
	t.Cleanup(hs.Close) // after the fake's Close, which stops delivery
	cfg.WebhookURL = hs.URL
	return setup(t, &cfg), ep
}

// drain waits for the fake's deliveries and returns what the endpoint got.
func (e *endpoint) drain(t *testing.T, b bundle) ([]provider.WebhookEvent, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.srv.WaitDeliveries(ctx); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.events), slices.Clone(e.errs)
}

func TestVerifyWebhookChargeEvents(t *testing.T) {
	t.Parallel()
	// Rotation: the endpoint knows the old and the new secret; the fake
	// signs with the new one.
	b, ep := setupEndpoint(t, verifier(t, []string{"whsec_old", "whsec_new"}, 0),
		stripetest.Config{WebhookSecret: "whsec_new", DuplicateWebhooks: 1})
	ctx := context.Background()
	ok := must(b.p.Charge(ctx, chargeReq("order-ok", stripetest.PaymentMethodVisa)))(t)
	generic, _ := b.p.Charge(ctx, chargeReq("order-generic", stripetest.PaymentMethodDeclined))
	funds, _ := b.p.Charge(ctx, chargeReq("order-funds", stripetest.PaymentMethodInsufficientFunds))

	events, errs := ep.drain(t, b)
	if len(errs) != 0 {
		t.Fatalf("deliveries refused: %v", errs)
	}
	sent := b.srv.Events()
	if len(sent) != 3 || len(events) != 6 {
		t.Fatalf("fake emitted %d events, endpoint verified %d; want 3 and 6 (each delivered twice)", len(sent), len(events))
	}
	want := []provider.WebhookEvent{
		{Type: "payment_intent.succeeded", Kind: provider.EventChargeSucceeded, Key: "order-ok", ProviderID: ok.ProviderID},
		{Type: "payment_intent.payment_failed", Kind: provider.EventChargeFailed, Key: "order-generic", ProviderID: generic.ProviderID, DeclineCode: "generic_decline"},
		{Type: "payment_intent.payment_failed", Kind: provider.EventChargeFailed, Key: "order-funds", ProviderID: funds.ProviderID, DeclineCode: "insufficient_funds"},
	}
	for i, w := range want {
		w.ID, w.Amount, w.Body = sent[i].ID, eur("20.00"), sent[i].Payload
		for copy := range 2 {
			if got := events[2*i+copy]; !sameEvent(got, w) {
				t.Fatalf("event %d copy %d:\n got %s\nwant %s", i, copy, show(got), show(w))
			}
		}
	}
}

func TestVerifyWebhookRefundEvents(t *testing.T) {
	t.Parallel()
	b, ep := setupEndpoint(t, verifier(t, []string{stripetest.DefaultWebhookSecret}, 0), stripetest.Config{})
	ctx := context.Background()
	ch := must(b.p.Charge(ctx, chargeReq("order-rf", stripetest.PaymentMethodVisa)))(t)
	for i, amount := range []string{"5.00", "15.00"} {
		key := fmt.Sprintf("order-rf-refund-%d", i)
		must(b.p.Refund(ctx, provider.RefundRequest{Key: key, ProviderKey: provider.DeriveKey(key, "refund", 0, paystripe.MaxProviderKeyLen),
			ChargeID: ch.ProviderID, Amount: eur(amount)}))(t)
	}

	events, errs := ep.drain(t, b)
	sent := b.srv.Events()
	if len(errs) != 0 || len(events) != 3 || len(sent) != 3 {
		t.Fatalf("events %d (fake %d), errors %v", len(events), len(sent), errs)
	}
	for i, amount := range []string{"5.00", "15.00"} {
		// The refund's delta, not the charge's cumulative amount_refunded;
		// the key is the charge's, carried by the charge object.
		w := provider.WebhookEvent{ID: sent[i+1].ID, Type: "charge.refunded", Kind: provider.EventRefundSucceeded, Key: "order-rf",
			ProviderID: ch.ProviderID, ChargeID: ch.ProviderID, Amount: eur(amount), Body: sent[i+1].Payload}
		if !sameEvent(events[i+1], w) {
			t.Fatalf("refund %d:\n got %s\nwant %s", i, show(events[i+1]), show(w))
		}
	}
}

func TestVerifyWebhookRefusesWrongSecret(t *testing.T) {
	t.Parallel()
	b, ep := setupEndpoint(t, verifier(t, []string{"whsec_old"}, 0), stripetest.Config{WebhookSecret: "whsec_new"})
	must(b.p.Charge(context.Background(), chargeReq("order-ws", stripetest.PaymentMethodVisa)))(t)

	events, errs := ep.drain(t, b)
	if len(events) != 0 || len(errs) == 0 {
		t.Fatalf("events %v, errors %v: want every delivery refused", events, errs)
	}
	for _, err := range errs {
		if !errors.Is(err, provider.ErrWebhookSignature) || !errors.Is(err, webhook.ErrNoValidSignature) || errors.Is(err, provider.ErrWebhookMalformed) {
			t.Fatalf("wrong secret: %v", err)
		}
	}
	if ev := b.srv.Events(); len(ev) != 1 || ev[0].Delivered != 0 || ev[0].Failed != 1 {
		t.Fatalf("fake's view of the deliveries: %+v", ev)
	}
}

// The fake signs with its own clock: ten minutes behind, its signatures
// are too old for the default tolerance (300 s) and fine for an hour's.
func TestVerifyWebhookOldTimestamp(t *testing.T) {
	t.Parallel()
	clock := stripetest.NewManualClock(time.Now().Add(-10 * time.Minute))
	b, ep := setupEndpoint(t, verifier(t, []string{"whsec_t"}, 0), stripetest.Config{WebhookSecret: "whsec_t", Clock: clock.Now})
	ch := must(b.p.Charge(context.Background(), chargeReq("order-old", stripetest.PaymentMethodVisa)))(t)

	events, errs := ep.drain(t, b)
	if len(events) != 0 || len(errs) == 0 {
		t.Fatalf("events %v, errors %v: want refused", events, errs)
	}
	for _, err := range errs {
		if !errors.Is(err, provider.ErrWebhookSignature) || !errors.Is(err, webhook.ErrTooOld) {
			t.Fatalf("old signature: %v", err)
		}
	}
	ep.mu.Lock()
	d := ep.deliveries[0]
	ep.mu.Unlock()
	got := must(verifier(t, []string{"whsec_t"}, time.Hour).VerifyWebhook(context.Background(), d.header, d.body))(t)
	if len(got) != 1 || got[0].Kind != provider.EventChargeSucceeded || got[0].ProviderID != ch.ProviderID {
		t.Fatalf("with an hour's tolerance: %+v", got)
	}
}

func TestVerifyWebhookRefusesBadSignatures(t *testing.T) {
	t.Parallel()
	b, ep := setupEndpoint(t, verifier(t, []string{stripetest.DefaultWebhookSecret}, 0), stripetest.Config{})
	ch := must(b.p.Charge(context.Background(), chargeReq("order-bad", stripetest.PaymentMethodVisa)))(t)
	if events, errs := ep.drain(t, b); len(events) != 1 || len(errs) != 0 {
		t.Fatalf("genuine delivery: %v %v", events, errs)
	}
	ep.mu.Lock()
	d := ep.deliveries[0]
	ep.mu.Unlock()
	v := ep.p

	tampered := bytes.Replace(d.body, []byte(`"amount": 2000`), []byte(`"amount": 1`), 1)
	if bytes.Equal(tampered, d.body) {
		t.Fatalf("nothing tampered in %s", d.body)
	}
	header := func(sig string) http.Header { return http.Header{"Stripe-Signature": {sig}} }
	for _, tc := range []struct {
		name   string
		header http.Header
		body   []byte
		cause  error
	}{
		{"tampered body", d.header, tampered, webhook.ErrNoValidSignature},
		{"forged id", d.header, bytes.Replace(d.body, []byte(ch.ProviderID), []byte("pi_forged"), 1), webhook.ErrNoValidSignature},
		{"no header", http.Header{}, d.body, webhook.ErrNotSigned},
		{"nil header", nil, d.body, webhook.ErrNotSigned},
		{"garbled header", header("t=1,v1"), d.body, webhook.ErrInvalidHeader},
		{"signed by another", header(stripetest.Sign(d.body, "whsec_other", time.Now())), d.body, webhook.ErrNoValidSignature},
	} {
		events, err := v.VerifyWebhook(context.Background(), tc.header, tc.body)
		if events != nil || !errors.Is(err, provider.ErrWebhookSignature) || !errors.Is(err, tc.cause) || errors.Is(err, provider.ErrWebhookMalformed) {
			t.Fatalf("%s: %v, %v; want ErrWebhookSignature and %v", tc.name, events, err, tc.cause)
		}
	}

	_, err := verifier(t, nil, 0).VerifyWebhook(context.Background(), d.header, d.body)
	if !errors.Is(err, paystripe.ErrNoWebhookSecret) || errors.Is(err, provider.ErrWebhookSignature) {
		t.Fatalf("without secrets: %v", err)
	}
}

// signed verifies body as if Stripe had delivered it now.
func signed(t *testing.T, body string) ([]provider.WebhookEvent, error) {
	t.Helper()
	h := http.Header{"Stripe-Signature": {stripetest.Sign([]byte(body), "whsec_hand", time.Now())}}
	return verifier(t, []string{"whsec_hand"}, 0).VerifyWebhook(context.Background(), h, []byte(body))
}

func TestVerifyWebhookMalformed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body, says string }{
		{"not JSON", `{"id":`, "parse"},
		{"not an event", `{}`, "not a Stripe event"},
		{"another object", `{"id":"cus_1","object":"customer","type":"x"}`, "not a Stripe event"},
		{"no data", `{"id":"evt_1","object":"event","type":"payment_intent.succeeded"}`, "data.object"},
		{"wrong object", `{"id":"evt_1","object":"event","type":"payment_intent.succeeded","data":{"object":{"object":"charge","id":"ch_1"}}}`, `"charge"`},
		{"bad object field", `{"id":"evt_1","object":"event","type":"payment_intent.succeeded","data":{"object":{"object":"payment_intent","amount":"ten"}}}`, "data.object"},
		{"unknown currency", `{"id":"evt_1","object":"event","type":"payment_intent.succeeded","data":{"object":{"object":"payment_intent","id":"pi_1","amount":100,"currency":"xyz"}}}`, "currency"},
		{"bad previous amount", `{"id":"evt_1","object":"event","type":"charge.refunded","data":{"object":{"object":"charge","id":"ch_1","amount_refunded":100,"currency":"eur"},"previous_attributes":{"amount_refunded":500}}}`, "previous_attributes"},
	} {
		events, err := signed(t, tc.body)
		if events != nil || !errors.Is(err, provider.ErrWebhookMalformed) || errors.Is(err, provider.ErrWebhookSignature) ||
			!strings.Contains(err.Error(), tc.says) {
			t.Fatalf("%s: %v, %v; want ErrWebhookMalformed saying %q", tc.name, events, err, tc.says)
		}
	}
}

// Events the fake does not emit, built by hand.
func TestVerifyWebhookMapping(t *testing.T) {
	t.Parallel()
	pi := func(status, extra string) string {
		return `{"object":"payment_intent","id":"pi_1","amount":1234,"currency":"usd","status":"` + status +
			`","metadata":{"payonce_key":"k-pi"}` + extra + `}`
	}
	refund := func(status, extra string) string {
		return `{"object":"refund","id":"re_1","amount":500,"currency":"jpy","payment_intent":"pi_9","status":"` + status +
			`","metadata":{"payonce_key":"k-re"}` + extra + `}`
	}
	usd := func(s string) money.Money { return money.MustParse(s, money.USD) }
	jpy := money.MustParse("500", money.JPY)
	for _, tc := range []struct {
		typ, object, previous string
		want                  provider.WebhookEvent
	}{
		{"payment_intent.processing", pi("processing", ""), "",
			provider.WebhookEvent{Kind: provider.EventChargePending, Key: "k-pi", ProviderID: "pi_1", Amount: usd("12.34")}},
		{"payment_intent.payment_failed", pi("requires_payment_method", `,"last_payment_error":{"type":"card_error","code":"expired_card"}`), "",
			provider.WebhookEvent{Kind: provider.EventChargeFailed, Key: "k-pi", ProviderID: "pi_1", Amount: usd("12.34"), DeclineCode: "expired_card"}},
		{"payment_intent.canceled", pi("canceled", ""), "",
			provider.WebhookEvent{Kind: provider.EventIgnored, Key: "k-pi"}},
		{"refund.updated", refund("failed", `,"failure_reason":"expired_or_canceled_card"`), "",
			provider.WebhookEvent{Kind: provider.EventRefundReversed, Key: "k-re", ProviderID: "re_1", ChargeID: "pi_9", Amount: jpy, DeclineCode: "expired_or_canceled_card"}},
		{"refund.failed", refund("failed", ""), "",
			provider.WebhookEvent{Kind: provider.EventRefundReversed, Key: "k-re", ProviderID: "re_1", ChargeID: "pi_9", Amount: jpy}},
		{"charge.refund.updated", refund("canceled", ""), "",
			provider.WebhookEvent{Kind: provider.EventRefundFailed, Key: "k-re", ProviderID: "re_1", ChargeID: "pi_9", Amount: jpy}},
		{"refund.updated", refund("succeeded", ""), "",
			provider.WebhookEvent{Kind: provider.EventIgnored, Key: "k-re", ProviderID: "re_1", ChargeID: "pi_9", Amount: jpy}},
		{"charge.refunded", `{"object":"charge","id":"ch_1","amount":2000,"amount_refunded":700,"currency":"usd","payment_intent":"pi_2","metadata":{"payonce_key":"k-ch"}}`, "",
			provider.WebhookEvent{Kind: provider.EventRefundSucceeded, Key: "k-ch", ProviderID: "pi_2", ChargeID: "pi_2", Amount: usd("7.00")}},
		{"charge.refunded", `{"object":"charge","id":"ch_1","amount":2000,"amount_refunded":700,"currency":"usd","payment_intent":"pi_2","metadata":{}}`, `{"amount_refunded":200}`,
			provider.WebhookEvent{Kind: provider.EventRefundSucceeded, ProviderID: "pi_2", ChargeID: "pi_2", Amount: usd("5.00")}},
		{"customer.created", `{"object":"customer","id":"cus_1","metadata":{"payonce_key":"k-cus"}}`, "",
			provider.WebhookEvent{Kind: provider.EventIgnored, Key: "k-cus"}},
		{"payment_intent.created", `{"object":"payment_intent","id":"pi_3"}`, "",
			provider.WebhookEvent{Kind: provider.EventIgnored}},
	} {
		body := `{"id":"evt_hand","object":"event","api_version":"2020-08-27","type":"` + tc.typ + `","data":{"object":` + tc.object
		if tc.previous != "" {
			body += `,"previous_attributes":` + tc.previous
		}
		body += `}}`
		events, err := signed(t, body)
		want := tc.want
		want.ID, want.Type, want.Body = "evt_hand", tc.typ, []byte(body)
		if err != nil || len(events) != 1 || !sameEvent(events[0], want) {
			t.Fatalf("%s: %v\n got %v\nwant %s", tc.typ, err, events, show(want))
		}
	}
}

func sameEvent(a, b provider.WebhookEvent) bool {
	return a.ID == b.ID && a.Type == b.Type && a.Kind == b.Kind && a.Reference == b.Reference && a.Key == b.Key &&
		a.ProviderID == b.ProviderID && a.ChargeID == b.ChargeID && a.Amount.Equal(b.Amount) &&
		a.DeclineCode == b.DeclineCode && bytes.Equal(a.Body, b.Body)
}

func show(e provider.WebhookEvent) string {
	return fmt.Sprintf("{ID:%s Type:%s Kind:%s Key:%s ProviderID:%s ChargeID:%s Amount:%v DeclineCode:%s Body:%d bytes}",
		e.ID, e.Type, e.Kind, e.Key, e.ProviderID, e.ChargeID, e.Amount, e.DeclineCode, len(e.Body))
}

func TestNewConfigWebhookAndLookup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   paystripe.Config
		field string
	}{
		{paystripe.Config{WebhookSecrets: []string{"whsec_a", " "}}, "WebhookSecrets[1]"},
		{paystripe.Config{WebhookTolerance: -time.Second}, "WebhookTolerance"},
		{paystripe.Config{LookupScanLimit: -1}, "LookupScanLimit"},
	} {
		tc.cfg.SecretKey = "sk_test_x"
		_, err := paystripe.New(&tc.cfg)
		if ce := errAs[*paystripe.ConfigError](t, err); ce.Field != tc.field || !strings.Contains(err.Error(), tc.field) {
			t.Fatalf("%+v: %v, want a ConfigError naming %s", tc.cfg, err, tc.field)
		}
	}
	// The secrets are copied: changing the caller's slice later changes nothing.
	secrets := []string{"whsec_a"}
	v := verifier(t, secrets, 0)
	secrets[0] = "whsec_b"
	body := `{"id":"evt_1","object":"event","type":"customer.created","data":{"object":{}}}`
	h := http.Header{"Stripe-Signature": {stripetest.Sign([]byte(body), "whsec_a", time.Now())}}
	if _, err := v.VerifyWebhook(context.Background(), h, []byte(body)); err != nil {
		t.Fatalf("secrets not copied: %v", err)
	}
}
