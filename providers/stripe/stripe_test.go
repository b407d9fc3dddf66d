package stripe_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/testkit"
	"github.com/payonce/payonce/providers/providertest"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

type bundle struct {
	srv *stripetest.Server
	p   *paystripe.Provider
}

// setup starts a fake and a Provider on it. Keep-alives are off so that a
// lost response is seen as lost (net/http would otherwise resend a request
// carrying an Idempotency-Key on a fresh connection).
func setup(t *testing.T, cfg *stripetest.Config) bundle {
	t.Helper()
	srv := stripetest.NewServer(cfg)
	t.Cleanup(srv.Close)
	p, err := paystripe.New(&paystripe.Config{
		SecretKey:  "sk_test_payonce",
		BaseURL:    srv.URL(),
		HTTPClient: &http.Client{Timeout: testkit.Patience, Transport: &http.Transport{DisableKeepAlives: true}},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return bundle{srv: srv, p: p}
}

func eur(s string) money.Money { return testkit.EUR(s) }

func chargeReq(key, pm string) provider.ChargeRequest {
	return provider.ChargeRequest{
		Key:           key,
		ProviderKey:   provider.DeriveKey(key, "charge", 1, paystripe.MaxProviderKeyLen),
		Amount:        eur("20.00"),
		PaymentMethod: pm,
		Description:   "order " + key,
		Metadata:      map[string]string{"order": key},
	}
}

func refundReq(key, chargeID string, amount money.Money) provider.RefundRequest {
	return testkit.RefundRequest(key, chargeID, amount, paystripe.MaxProviderKeyLen)
}

// must(call())(t) fails t if call returned an error.
func must[T any](v T, err error) func(*testing.T) T { return testkit.Must(v, err) }

func errAs[E error](t *testing.T, err error) E {
	t.Helper()
	return testkit.ErrAs[E](t, err)
}

func wantCount(t *testing.T, b bundle, providerKey string, intents, refunds int) {
	t.Helper()
	got := b.srv.CountsByIdempotencyKey(providerKey)
	if got.PaymentIntents != intents || got.Refunds != refunds {
		t.Fatalf("fake holds %+v for key %q, want %d payment intents and %d refunds", got, providerKey, intents, refunds)
	}
}

func TestProvider(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if b.p.Name() != "stripe" || b.p.DedupWindow() != 24*time.Hour {
		t.Fatalf("Name %q DedupWindow %v", b.p.Name(), b.p.DedupWindow())
	}
}

func TestChargeSucceedsAndReplays(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	req := chargeReq("order-1", stripetest.PaymentMethodVisa)

	res := must(b.p.Charge(ctx, req))(t)
	if !strings.HasPrefix(res.ProviderID, "pi_") || res.Status != provider.ChargeSucceeded ||
		!res.Amount.Equal(req.Amount) || res.Replayed {
		t.Fatalf("first charge: %+v", res)
	}
	if c := b.srv.CountsByMetadata(paystripe.MetadataKey, "order-1"); c.PaymentIntents != 1 {
		t.Fatalf("metadata %s not carried: %+v", paystripe.MetadataKey, c)
	}

	again := must(b.p.Charge(ctx, req))(t)
	if again.ProviderID != res.ProviderID || again.Status != provider.ChargeSucceeded || !again.Replayed {
		t.Fatalf("replay: %+v, first %+v", again, res)
	}
	wantCount(t, b, req.ProviderKey, 1, 0)
}

func TestChargeDeclined(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ pm, declineCode string }{
		{stripetest.PaymentMethodDeclined, "generic_decline"},
		{stripetest.PaymentMethodInsufficientFunds, "insufficient_funds"},
	} {
		t.Run(tc.declineCode, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			req := chargeReq("order-"+tc.declineCode, tc.pm)
			var ids []string
			for i, wantReplayed := range []bool{false, true} {
				res, err := b.p.Charge(context.Background(), req)
				de := errAs[*provider.DeclineError](t, err)
				if de.Code != "card_declined" || de.DeclineCode != tc.declineCode || de.Message == "" || de.Provider != "stripe" {
					t.Fatalf("attempt %d: %+v", i, de)
				}
				if idempotency.SafeToRetry(err) || !errors.Is(err, provider.ErrDeclined) {
					t.Fatalf("attempt %d: a decline must be final: %v", i, err)
				}
				if res.Status != provider.ChargeFailed || res.ProviderID == "" || res.Replayed != wantReplayed {
					t.Fatalf("attempt %d: result %+v", i, res)
				}
				ids = append(ids, res.ProviderID)
			}
			if ids[0] != ids[1] {
				t.Fatalf("replayed decline names another PaymentIntent: %v", ids)
			}
			wantCount(t, b, req.ProviderKey, 1, 0)
		})
	}
}

func TestChargeRequiresAction(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	res := must(b.p.Charge(context.Background(), chargeReq("order-3ds", stripetest.PaymentMethodAuthenticationRequired)))(t)
	if res.Status != provider.ChargeRequiresAction || res.ProviderID == "" {
		t.Fatalf("%+v", res)
	}
}

// A 500 before execution: unknown from where the client stands; Stripe
// cached nothing, so the retry with the same key executes.
func TestChargeFailBefore(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-fb", stripetest.PaymentMethodVisa)
	b.srv.Inject(stripetest.Fault{Kind: stripetest.FailBefore, Path: "/v1/payment_intents"})

	_, err := b.p.Charge(context.Background(), req)
	ue := errAs[*provider.UnknownOutcomeError](t, err)
	if ue.Status != 500 || !idempotency.SafeToRetry(err) {
		t.Fatalf("%+v", ue)
	}
	wantCount(t, b, req.ProviderKey, 0, 0)

	res := must(b.p.Charge(context.Background(), req))(t)
	if res.Status != provider.ChargeSucceeded || res.Replayed {
		t.Fatalf("retry: %+v", res)
	}
	wantCount(t, b, req.ProviderKey, 1, 0)
}

// The response is lost after Stripe committed the charge: the retry
// replays the success.
func TestChargeResetAfter(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-reset", stripetest.PaymentMethodVisa)
	b.srv.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Path: "/v1/payment_intents"})

	_, err := b.p.Charge(context.Background(), req)
	ue := errAs[*provider.UnknownOutcomeError](t, err)
	if ue.Status != 0 || !payments.OutcomeUnknown(err) || !idempotency.SafeToRetry(err) {
		t.Fatalf("%+v", ue)
	}

	res := must(b.p.Charge(context.Background(), req))(t)
	if res.Status != provider.ChargeSucceeded || !res.Replayed {
		t.Fatalf("retry: %+v", res)
	}
	wantCount(t, b, req.ProviderKey, 1, 0)
	found := must(b.p.Lookup(context.Background(), provider.LookupRequest{Key: req.Key}))(t)
	if len(found.Charges) != 1 || found.Charges[0].ProviderID != res.ProviderID {
		t.Fatalf("lookup %+v, replay %+v", found, res)
	}
}

// A 500 after execution is cached by Stripe for the key: the retry replays
// the 500 and the outcome stays unknown; only Lookup reveals the charge.
func TestChargeFailAfter(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-fa", stripetest.PaymentMethodVisa)
	b.srv.Inject(stripetest.Fault{Kind: stripetest.FailAfter, Path: "/v1/payment_intents"})

	for i := range 2 {
		_, err := b.p.Charge(context.Background(), req)
		if ue := errAs[*provider.UnknownOutcomeError](t, err); ue.Status != 500 {
			t.Fatalf("attempt %d: %+v", i, ue)
		}
	}
	wantCount(t, b, req.ProviderKey, 1, 0)
	found := must(b.p.Lookup(context.Background(), provider.LookupRequest{Key: req.Key}))(t)
	if len(found.Charges) != 1 || found.Charges[0].Status != provider.ChargeSucceeded {
		t.Fatalf("lookup: %+v", found)
	}
}

// The context ends while Stripe still works on the request: unknown.
func TestChargeDeadlineWhileWaiting(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-hang", stripetest.PaymentMethodVisa)
	b.srv.Inject(stripetest.Fault{Kind: stripetest.Hang, Path: "/v1/payment_intents"})
	// The deadline passes once the fake holds the request, never before it was written.
	_, err := b.p.Charge(testkit.DeadlineWhenHeld(t, b.srv.WaitHeld), req)
	errAs[*provider.UnknownOutcomeError](t, err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cause lost: %v", err)
	}
}

func TestChargeConcurrentSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-conc", stripetest.PaymentMethodVisa)
	// Whichever request claims the key first is held until the others have all been answered:
	// they collide with it however slowly they arrive.
	b.srv.Inject(stripetest.Fault{Kind: stripetest.Latency, Delay: time.Hour, IdempotencyKey: req.ProviderKey})

	const n = 5
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results [n]provider.ChargeResult
		errs    [n]error
		done    = make(chan struct{}, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = b.p.Charge(context.Background(), req)
			done <- struct{}{}
		})
	}
	close(start)
	for range n - 1 {
		<-done
	}
	b.srv.EndLatency()
	wg.Wait()

	executed, inProgress := 0, 0
	for i := range n {
		switch {
		case errs[i] == nil && !results[i].Replayed:
			executed++
		case errors.As(errs[i], new(*provider.InProgressError)):
			if !idempotency.SafeToRetry(errs[i]) {
				t.Fatalf("in progress must be retryable")
			}
			inProgress++
		default:
			t.Fatalf("unexpected error: %v", errs[i])
		}
	}
	if executed != 1 || inProgress != n-1 {
		t.Fatalf("executed %d, in progress %d: %v", executed, inProgress, errs)
	}
	wantCount(t, b, req.ProviderKey, 1, 0)
}

func TestChargeKeyMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-mm", stripetest.PaymentMethodVisa)
	must(b.p.Charge(context.Background(), req))(t)
	req.Amount = eur("21.00")
	_, err := b.p.Charge(context.Background(), req)
	errAs[*provider.KeyMismatchError](t, err)
	if idempotency.SafeToRetry(err) {
		t.Fatalf("a key mismatch is not retryable")
	}
	wantCount(t, b, req.ProviderKey, 1, 0)
}

func TestChargeNotSent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := must(paystripe.New(&paystripe.Config{
		SecretKey:  "sk_test_x",
		BaseURL:    "http://" + addr,
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	}))(t)
	_, err = p.Charge(context.Background(), chargeReq("order-ns", stripetest.PaymentMethodVisa))
	errAs[*provider.NotSentError](t, err)
	if !errors.Is(err, provider.ErrNotSent) || !idempotency.SafeToRetry(err) {
		t.Fatalf("%v", err)
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("cause is not the dial error: %v", err)
	}
}

func TestChargeBadAPIKey(t *testing.T) {
	t.Parallel()
	srv := stripetest.NewServer(nil)
	t.Cleanup(srv.Close)
	p := must(paystripe.New(&paystripe.Config{SecretKey: "sk_live_nope", BaseURL: srv.URL(),
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}))(t)
	_, err := p.Charge(context.Background(), chargeReq("order-auth", stripetest.PaymentMethodVisa))
	ce := errAs[*provider.CredentialsError](t, err)
	if ce.Status != http.StatusUnauthorized || ce.Setting != "Config.SecretKey" || idempotency.SafeToRetry(err) ||
		errors.Is(err, provider.ErrInvalidRequest) || !strings.Contains(err.Error(), "check the API key") {
		t.Fatalf("a 401: %v, want a configuration error, never a refusal of the payment", err)
	}
}

func TestChargeRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	tooMany := map[string]string{}
	for i := range 50 { // plus payonce_key: 51
		tooMany[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, tc := range []struct {
		name, param string
		edit        func(*provider.ChargeRequest)
	}{
		{"too many keys", "Metadata", func(r *provider.ChargeRequest) { r.Metadata = tooMany }},
		{"long key", "Metadata[" + strings.Repeat("k", 41) + "]", func(r *provider.ChargeRequest) {
			r.Metadata = map[string]string{strings.Repeat("k", 41): "v"}
		}},
		{"long value", "Metadata[note]", func(r *provider.ChargeRequest) {
			r.Metadata = map[string]string{"note": strings.Repeat("v", 501)}
		}},
		{"brackets", "Metadata[a[b]]", func(r *provider.ChargeRequest) { r.Metadata = map[string]string{"a[b]": "v"} }},
		{"reserved key", "Metadata[payonce_key]", func(r *provider.ChargeRequest) {
			r.Metadata = map[string]string{paystripe.MetadataKey: "other"}
		}},
		{"no provider key", "ProviderKey", func(r *provider.ChargeRequest) { r.ProviderKey = "" }},
		{"long provider key", "ProviderKey", func(r *provider.ChargeRequest) { r.ProviderKey = strings.Repeat("k", 256) }},
		{"no key", "Key", func(r *provider.ChargeRequest) { r.Key = "" }},
		{"zero amount", "Amount", func(r *provider.ChargeRequest) { r.Amount = eur("0") }},
		{"no amount", "Amount", func(r *provider.ChargeRequest) { r.Amount = money.Money{} }},
		{"no payment method", "PaymentMethod", func(r *provider.ChargeRequest) { r.PaymentMethod = "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := chargeReq("order-bad", stripetest.PaymentMethodVisa)
			tc.edit(&req)
			_, err := b.p.Charge(context.Background(), req)
			ie := errAs[*provider.InvalidRequestError](t, err)
			if ie.Param != tc.param {
				t.Fatalf("Param %q, want %q (%v)", ie.Param, tc.param, ie)
			}
		})
	}
	if tot := b.srv.Totals(); len(tot) != 0 {
		t.Fatalf("something reached the fake: %+v", tot)
	}
}

func TestNewConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   *paystripe.Config
		field string
	}{
		{nil, "SecretKey"},
		{&paystripe.Config{}, "SecretKey"},
		{&paystripe.Config{SecretKey: "sk_test_x", BaseURL: "api.stripe.com"}, "BaseURL"},
		{&paystripe.Config{SecretKey: "sk_test_x", MaxNetworkRetries: -1}, "MaxNetworkRetries"},
		{&paystripe.Config{SecretKey: "pk_test_51Hx"}, "SecretKey"},
		{&paystripe.Config{SecretKey: "pk_live_51Hx"}, "SecretKey"},
		{&paystripe.Config{SecretKey: "whsec_x"}, "SecretKey"},
	} {
		_, err := paystripe.New(tc.cfg)
		ce := errAs[*paystripe.ConfigError](t, err)
		if ce.Field != tc.field || !strings.Contains(err.Error(), "Config."+tc.field) {
			t.Fatalf("%+v: got %v, want field %s", tc.cfg, err, tc.field)
		}
	}
	for _, key := range []string{"sk_test_x", "rk_test_x", "sk_live_x"} {
		if _, err := paystripe.New(&paystripe.Config{SecretKey: key}); err != nil {
			t.Fatalf("%s with defaults: %v", key, err)
		}
	}
	// A publishable key is named as such, with what to give instead.
	_, err := paystripe.New(&paystripe.Config{SecretKey: "pk_test_51Hx"})
	if err == nil || !strings.Contains(err.Error(), "publishable") || !strings.Contains(err.Error(), "sk_") || !strings.Contains(err.Error(), "rk_") {
		t.Fatalf("publishable key: %v, want an error naming it and the secret and restricted keys", err)
	}
}

func TestRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	ch := must(b.p.Charge(ctx, chargeReq("order-r", stripetest.PaymentMethodVisa)))(t)
	refund := func(step string, amount money.Money) (provider.RefundResult, error) {
		return b.p.Refund(ctx, provider.RefundRequest{
			Key:         "order-r",
			ProviderKey: provider.DeriveKey("order-r", step, 1, paystripe.MaxProviderKeyLen),
			ChargeID:    ch.ProviderID,
			Amount:      amount,
		})
	}

	first := must(refund("refund1", eur("5.00")))(t)
	if !strings.HasPrefix(first.ProviderID, "re_") || first.Status != provider.RefundSucceeded ||
		!first.Amount.Equal(eur("5.00")) || first.Replayed {
		t.Fatalf("refund: %+v", first)
	}
	again := must(refund("refund1", eur("5.00")))(t)
	if again.ProviderID != first.ProviderID || !again.Replayed {
		t.Fatalf("replay: %+v", again)
	}
	wantCount(t, b, provider.DeriveKey("order-r", "refund1", 1, paystripe.MaxProviderKeyLen), 0, 1)

	_, err := refund("refund2", eur("20.00"))
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Code != "amount_too_large" || ie.Param != "amount" {
		t.Fatalf("over-refund: %+v", ie)
	}
	must(refund("refund3", eur("15.00")))(t)
	_, err = refund("refund4", eur("1.00"))
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Code != "charge_already_refunded" {
		t.Fatalf("refund of a refunded charge: %+v", ie)
	}
	if c := b.srv.CountsByMetadata(paystripe.MetadataKey, "order-r"); c.Refunds != 2 {
		t.Fatalf("refunds carrying the key: %+v", c)
	}

	_, err = b.p.Refund(ctx, provider.RefundRequest{Key: "x", ProviderKey: "x_refund_1", ChargeID: "pi_missing", Amount: eur("1.00")})
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Code != "resource_missing" {
		t.Fatalf("unknown charge: %+v", ie)
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	clock := stripetest.NewManualClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	b := setup(t, &stripetest.Config{Clock: clock.Now})
	ctx := context.Background()

	target := must(b.p.Charge(ctx, chargeReq("order-lookup", stripetest.PaymentMethodVisa)))(t)
	clock.Advance(time.Minute)
	// More than a page of newer charges: Lookup must paginate to find it.
	for i := range 101 {
		must(b.p.Charge(ctx, chargeReq(fmt.Sprintf("other-%d", i), stripetest.PaymentMethodVisa)))(t)
	}
	declined, _ := b.p.Charge(ctx, chargeReq("order-lookup-declined", stripetest.PaymentMethodDeclined))

	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	found := must(b.p.Lookup(ctx, provider.LookupRequest{Key: "order-lookup", From: start.Add(-time.Minute), To: start.Add(time.Hour)}))(t)
	if !found.Consistent || len(found.Charges) != 1 || found.Charges[0].ProviderID != target.ProviderID ||
		found.Charges[0].Status != provider.ChargeSucceeded || !found.Charges[0].Amount.Equal(eur("20.00")) {
		t.Fatalf("lookup: %+v", found)
	}
	got := must(b.p.Lookup(ctx, provider.LookupRequest{Key: "order-lookup-declined", From: start, To: start.Add(time.Hour)}))(t)
	if len(got.Charges) != 1 || got.Charges[0].ProviderID != declined.ProviderID || got.Charges[0].Status != provider.ChargeFailed {
		t.Fatalf("lookup of a decline: %+v", got)
	}
	none := must(b.p.Lookup(ctx, provider.LookupRequest{Key: "order-unknown", From: start, To: start.Add(time.Hour)}))(t)
	if len(none.Charges) != 0 {
		t.Fatalf("unknown key: %+v", none)
	}
	// Outside the window.
	late := must(b.p.Lookup(ctx, provider.LookupRequest{Key: "order-lookup", From: start.Add(30 * time.Second), To: start.Add(time.Hour)}))(t)
	if len(late.Charges) != 0 {
		t.Fatalf("window ignored: %+v", late)
	}
	_, err := b.p.Lookup(ctx, provider.LookupRequest{Key: "k", From: start, To: start.Add(-time.Second)})
	errAs[*provider.InvalidRequestError](t, err)
}

// webhookSink receives the fake's deliveries.
type webhookSink struct {
	mu         sync.Mutex
	payloads   [][]byte
	signatures []string
}

func (s *webhookSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.payloads = append(s.payloads, body)
	s.signatures = append(s.signatures, r.Header.Get("Stripe-Signature"))
}

// firstDelivery charges through b (whose fake delivers to sink) and
// returns the first webhook delivered and its signature.
func firstDelivery(t *testing.T, b bundle, sink *webhookSink) (ch provider.ChargeResult, payload []byte, sig string) {
	t.Helper()
	ch = must(b.p.Charge(context.Background(), chargeReq("order-wh", stripetest.PaymentMethodVisa)))(t)
	if err := b.srv.WaitDeliveries(testkit.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.payloads) != 1 {
		t.Fatalf("%d deliveries", len(sink.payloads))
	}
	return ch, sink.payloads[0], sink.signatures[0]
}

func setupWithSink(t *testing.T, secret string) (bundle, *webhookSink) {
	sink := &webhookSink{}
	hs := httptest.NewServer(sink)
	t.Cleanup(hs.Close)
	return setup(t, &stripetest.Config{WebhookURL: hs.URL, WebhookSecret: secret}), sink
}

func TestVerifyWebhook(t *testing.T) {
	t.Parallel()
	b, sink := setupWithSink(t, "whsec_new")
	ch, payload, sig := firstDelivery(t, b, sink)

	ev := must(paystripe.VerifyWebhook(payload, sig, []string{"whsec_new"}, 0))(t)
	if ev.Type != "payment_intent.succeeded" || !strings.HasPrefix(ev.ID, "evt_") || ev.Data.Object["id"] != ch.ProviderID {
		t.Fatalf("event %s %s %v", ev.Type, ev.ID, ev.Data.Object["id"])
	}
	// Rotation: the endpoint knows the old and the new secret.
	must(paystripe.VerifyWebhook(payload, sig, []string{"whsec_old", "whsec_new"}, 0))(t)

	if _, err := paystripe.VerifyWebhook(payload, sig, []string{"whsec_old"}, 0); !errors.Is(err, webhook.ErrNoValidSignature) {
		t.Fatalf("wrong secret: %v", err)
	}
	tampered := []byte(strings.Replace(string(payload), ch.ProviderID, "pi_forged", 1))
	if _, err := paystripe.VerifyWebhook(tampered, sig, []string{"whsec_new"}, 0); !errors.Is(err, webhook.ErrNoValidSignature) {
		t.Fatalf("tampered payload: %v", err)
	}
	old := stripetest.Sign(payload, "whsec_new", time.Now().Add(-10*time.Minute))
	if _, err := paystripe.VerifyWebhook(payload, old, []string{"whsec_new"}, 0); !errors.Is(err, webhook.ErrTooOld) {
		t.Fatalf("old signature: %v", err)
	}
	must(paystripe.VerifyWebhook(payload, old, []string{"whsec_new"}, time.Hour))(t)
	if _, err := paystripe.VerifyWebhook(payload, "", []string{"whsec_new"}, 0); !errors.Is(err, webhook.ErrNotSigned) {
		t.Fatalf("unsigned: %v", err)
	}
	if _, err := paystripe.VerifyWebhook(payload, sig, nil, 0); !errors.Is(err, paystripe.ErrNoWebhookSecret) {
		t.Fatalf("no secret: %v", err)
	}
}

func TestConformance(t *testing.T) {
	providertest.Exercise(t, func(t *testing.T) providertest.Harness {
		b, sink := setupWithSink(t, stripetest.DefaultWebhookSecret)
		return providertest.Harness{
			Provider: b.p,
			Succeeds: stripetest.PaymentMethodVisa,
			Declines: stripetest.PaymentMethodInsufficientFunds,
			Charges: func(key string) int {
				return b.srv.CountsByMetadata(paystripe.MetadataKey, key).PaymentIntents
			},
			LoseNextResponse: func() {
				b.srv.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
			},
			HoldNext: func() (func(context.Context) error, func()) {
				b.srv.Inject(stripetest.Fault{Kind: stripetest.Latency, Delay: time.Hour, Method: "POST"})
				return func(ctx context.Context) error { return b.srv.WaitHeld(ctx, 1) }, b.srv.EndLatency
			},
			Webhook: func(t *testing.T) (good, bad error) {
				_, payload, sig := firstDelivery(t, b, sink)
				_, good = paystripe.VerifyWebhook(payload, sig, []string{stripetest.DefaultWebhookSecret}, 0)
				_, bad = paystripe.VerifyWebhook(payload, sig, []string{"whsec_wrong"}, 0)
				return good, bad
			},
		}
	})
}

// Answers the fake does not produce, from a stub server.
func TestChargeStatusMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   string
		check  func(t *testing.T, err error)
	}{
		{"rate limited", http.StatusTooManyRequests,
			`{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`,
			testkit.UnknownOutcome(429)},
		{"forbidden", http.StatusForbidden,
			`{"error":{"type":"invalid_request_error","message":"The provided key does not have access"}}`,
			func(t *testing.T, err error) {
				if ce := errAs[*provider.CredentialsError](t, err); ce.Status != 403 || idempotency.SafeToRetry(err) {
					t.Fatalf("%+v", ce)
				}
			}},
		{"service unavailable", http.StatusServiceUnavailable,
			`{"error":{"type":"api_error","message":"try later"}}`,
			testkit.UnknownOutcome(503)},
		{"proxy error page", http.StatusBadGateway, `<html>bad gateway</html>`,
			testkit.UnknownOutcome(0)}, // stripe-go reports no status for an undecodable body
		{"garbled success", http.StatusOK, `{"id":`,
			testkit.UnknownOutcome(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			t.Cleanup(hs.Close)
			p := must(paystripe.New(&paystripe.Config{SecretKey: "sk_test_x", BaseURL: hs.URL,
				HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}))(t)
			_, err := p.Charge(context.Background(), chargeReq("order-stub", stripetest.PaymentMethodVisa))
			tc.check(t, err)
		})
	}
}
