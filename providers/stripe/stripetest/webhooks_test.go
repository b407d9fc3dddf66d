package stripetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/payonce/payonce/providers/internal/testkit"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

type delivery struct {
	body []byte
	sig  string
}

// receiver is a webhook endpoint that records every request and answers status(n) to the
// n-th one (0-based; 200 when status is nil).
type receiver struct {
	*httptest.Server
	status func(n int) int
	hang   chan struct{} // if non-nil, requests block until it is closed or the client gives up

	mu      sync.Mutex
	got     []delivery
	arrived chan struct{}
}

func newReceiver(t *testing.T, status func(n int) int, hang bool) *receiver {
	t.Helper()
	rc := &receiver{status: status, arrived: make(chan struct{}, 100)}
	if hang {
		rc.hang = make(chan struct{})
	}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		n := len(rc.got)
		rc.got = append(rc.got, delivery{body: body, sig: r.Header.Get("Stripe-Signature")})
		rc.mu.Unlock()
		select {
		case rc.arrived <- struct{}{}:
		default:
		}
		if rc.hang != nil {
			select {
			case <-rc.hang:
			case <-r.Context().Done():
			}
			return
		}
		code := http.StatusOK
		if rc.status != nil {
			code = rc.status(n)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(func() {
		if rc.hang != nil {
			close(rc.hang)
		}
		rc.Close()
	})
	return rc
}

func (rc *receiver) deliveries() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.got...)
}

// verify checks every delivery's signature with stripe-go and returns the events.
func (rc *receiver) verify(t *testing.T, secret string) []stripe.Event {
	t.Helper()
	var out []stripe.Event
	for i, d := range rc.deliveries() {
		ev, err := webhook.ConstructEventWithOptions(d.body, d.sig, secret,
			webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
		if err != nil {
			t.Fatalf("delivery %d does not verify: %v\n%s", i, err, d.body)
		}
		out = append(out, ev)
	}
	return out
}

func waitDeliveries(t *testing.T, srv *stripetest.Server) {
	t.Helper()
	if err := srv.WaitDeliveries(testkit.Ctx(t)); err != nil {
		t.Fatalf("WaitDeliveries: %v", err)
	}
}

func refundParams(piID, key string, amount int64) *stripe.RefundParams {
	p := &stripe.RefundParams{PaymentIntent: stripe.String(piID), Amount: stripe.Int64(amount)}
	p.SetIdempotencyKey(key)
	return p
}

func TestWebhooksSuccessDeclineRefund(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil, false)
	b := setup(t, &stripetest.Config{Clock: time.Now, WebhookURL: rc.URL})

	pi, err := b.sc.PaymentIntents.New(chargeParams("ok", 1000, stripetest.PaymentMethodVisa))
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.sc.PaymentIntents.New(chargeParams("declined", 500, stripetest.PaymentMethodDeclined))
	declined := stripeErr(t, err).PaymentIntent
	// A replayed decline executes nothing, so it emits nothing.
	if _, err := b.sc.PaymentIntents.New(chargeParams("declined", 500, stripetest.PaymentMethodDeclined)); err == nil {
		t.Fatal("replayed decline succeeded")
	}
	if _, err := b.sc.Refunds.New(refundParams(pi.ID, "r1", 400)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.sc.Refunds.New(refundParams(pi.ID, "r2", 600)); err != nil {
		t.Fatal(err)
	}
	waitDeliveries(t, b.srv)

	events := rc.verify(t, stripetest.DefaultWebhookSecret)
	wantTypes := []stripe.EventType{"payment_intent.succeeded", "payment_intent.payment_failed", "charge.refunded", "charge.refunded"}
	if len(events) != len(wantTypes) {
		t.Fatalf("got %d deliveries, want %d", len(events), len(wantTypes))
	}
	for i, ev := range events {
		if ev.Type != wantTypes[i] || !strings.HasPrefix(ev.ID, "evt_") || ev.APIVersion != stripetest.APIVersion || ev.Created == 0 {
			t.Fatalf("event %d: type %s id %s api_version %s created %d", i, ev.Type, ev.ID, ev.APIVersion, ev.Created)
		}
	}

	var succeeded, failed stripe.PaymentIntent
	if err := json.Unmarshal(events[0].Data.Raw, &succeeded); err != nil {
		t.Fatal(err)
	}
	if succeeded.ID != pi.ID || succeeded.Status != stripe.PaymentIntentStatusSucceeded || succeeded.AmountReceived != 1000 {
		t.Fatalf("succeeded: %s", events[0].Data.Raw)
	}
	if events[0].Request == nil || events[0].Request.IdempotencyKey != "ok" || events[0].Request.ID == "" {
		t.Fatalf("succeeded request: %+v", events[0].Request)
	}
	if err := json.Unmarshal(events[1].Data.Raw, &failed); err != nil {
		t.Fatal(err)
	}
	if failed.ID != declined.ID || failed.LastPaymentError == nil || failed.LastPaymentError.DeclineCode != stripe.DeclineCodeGenericDecline {
		t.Fatalf("payment_failed: %s", events[1].Data.Raw)
	}
	for i, want := range []struct {
		refunded int64
		full     bool
	}{{400, false}, {1000, true}} {
		ev := events[2+i]
		var ch stripe.Charge
		if err := json.Unmarshal(ev.Data.Raw, &ch); err != nil {
			t.Fatal(err)
		}
		if ch.ID != pi.LatestCharge.ID || ch.PaymentIntent.ID != pi.ID || ch.AmountRefunded != want.refunded || ch.Refunded != want.full {
			t.Fatalf("charge.refunded %d: %s", i, ev.Data.Raw)
		}
		if got := ev.Data.PreviousAttributes["amount_refunded"]; got != float64(want.refunded-[]int64{400, 600}[i]) {
			t.Fatalf("charge.refunded %d: previous_attributes %v", i, ev.Data.PreviousAttributes)
		}
	}

	recorded := b.srv.Events()
	if len(recorded) != len(events) {
		t.Fatalf("Events() has %d, delivered %d", len(recorded), len(events))
	}
	for i, ev := range recorded {
		if ev.ID != events[i].ID || string(ev.Type) != string(events[i].Type) || ev.Delivered != 1 || ev.Failed != 0 {
			t.Fatalf("Events()[%d] = %+v, delivered %s", i, ev, events[i].ID)
		}
	}
}

func TestWebhooksDuplicates(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil, false)
	b := setup(t, &stripetest.Config{Clock: time.Now, WebhookURL: rc.URL, DuplicateWebhooks: 2})
	for _, key := range []string{"a", "b"} {
		pi, err := b.sc.PaymentIntents.New(chargeParams(key, 700, stripetest.PaymentMethodVisa))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.sc.Refunds.New(refundParams(pi.ID, "r"+key, 700)); err != nil {
			t.Fatal(err)
		}
	}
	waitDeliveries(t, b.srv)

	events := rc.verify(t, stripetest.DefaultWebhookSecret)
	seen := map[string]int{}
	var order []string
	for _, ev := range events {
		if seen[ev.ID] == 0 {
			order = append(order, ev.ID)
		}
		seen[ev.ID]++
	}
	if len(seen) != 4 || len(events) != 12 {
		t.Fatalf("got %d deliveries of %d events, want 12 of 4", len(events), len(seen))
	}
	for id, n := range seen {
		if n != 3 {
			t.Fatalf("event %s delivered %d times, want 3", id, n)
		}
	}
	for i, ev := range b.srv.Events() {
		if ev.ID != order[i] || ev.Delivered != 3 {
			t.Fatalf("Events()[%d] = %s delivered %d; delivery order %v", i, ev.ID, ev.Delivered, order)
		}
	}
}

func TestWebhooksSecret(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil, false)
	b := setup(t, &stripetest.Config{Clock: time.Now, WebhookURL: rc.URL, WebhookSecret: "whsec_right"})
	if _, err := b.sc.PaymentIntents.New(chargeParams("k", 100, stripetest.PaymentMethodVisa)); err != nil {
		t.Fatal(err)
	}
	waitDeliveries(t, b.srv)
	got := rc.deliveries()
	if len(got) != 1 {
		t.Fatalf("got %d deliveries", len(got))
	}
	opts := webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true}
	if _, err := webhook.ConstructEventWithOptions(got[0].body, got[0].sig, "whsec_right", opts); err != nil {
		t.Fatalf("right secret: %v", err)
	}
	for _, secret := range []string{"whsec_wrong", stripetest.DefaultWebhookSecret} {
		if _, err := webhook.ConstructEventWithOptions(got[0].body, got[0].sig, secret, opts); !errors.Is(err, webhook.ErrNoValidSignature) {
			t.Fatalf("secret %q: err = %v, want ErrNoValidSignature", secret, err)
		}
	}
	tampered := []byte(strings.Replace(string(got[0].body), `"amount": 100`, `"amount": 999`, 1))
	if _, err := webhook.ConstructEventWithOptions(tampered, got[0].sig, "whsec_right", opts); !errors.Is(err, webhook.ErrNoValidSignature) {
		t.Fatalf("tampered payload: err = %v", err)
	}
}

// The signature's timestamp comes from Config.Clock, so a manual clock far from now makes
// stripe-go reject the delivery as too old unless tolerance is ignored.
func TestWebhooksSignedWithServerClock(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil, false)
	b := setup(t, &stripetest.Config{WebhookURL: rc.URL}) // manual clock at t0
	if _, err := b.sc.PaymentIntents.New(chargeParams("k", 100, stripetest.PaymentMethodVisa)); err != nil {
		t.Fatal(err)
	}
	waitDeliveries(t, b.srv)
	d := rc.deliveries()[0]
	if !strings.HasPrefix(d.sig, "t="+strconv.FormatInt(t0.Unix(), 10)+",v1=") {
		t.Fatalf("Stripe-Signature %q, want t=%d", d.sig, t0.Unix())
	}
	if d.sig != stripetest.Sign(d.body, stripetest.DefaultWebhookSecret, t0) {
		t.Fatalf("Sign disagrees with the delivered header")
	}
	secret := stripetest.DefaultWebhookSecret
	if _, err := webhook.ConstructEventWithOptions(d.body, d.sig, secret,
		webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true}); !errors.Is(err, webhook.ErrTooOld) {
		t.Fatalf("err = %v, want ErrTooOld", err)
	}
	if _, err := webhook.ConstructEventWithOptions(d.body, d.sig, secret,
		webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true, IgnoreTolerance: true}); err != nil {
		t.Fatal(err)
	}
}

func TestWebhooksRetry(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, func(n int) int {
		if n < 2 {
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	}, false)
	b := setup(t, &stripetest.Config{Clock: time.Now, WebhookURL: rc.URL})
	if _, err := b.sc.PaymentIntents.New(chargeParams("k", 100, stripetest.PaymentMethodVisa)); err != nil {
		t.Fatal(err)
	}
	waitDeliveries(t, b.srv)
	events := rc.verify(t, stripetest.DefaultWebhookSecret)
	if len(events) != 3 || events[0].ID != events[2].ID {
		t.Fatalf("got %d attempts", len(events))
	}
	if ev := b.srv.Events()[0]; ev.Delivered != 1 || ev.Failed != 0 {
		t.Fatalf("Events()[0] = %+v", ev)
	}

	// An endpoint that always fails is given up on after a few attempts.
	rc2 := newReceiver(t, func(int) int { return http.StatusBadGateway }, false)
	b2 := setup(t, &stripetest.Config{Clock: time.Now, WebhookURL: rc2.URL})
	if _, err := b2.sc.PaymentIntents.New(chargeParams("k", 100, stripetest.PaymentMethodVisa)); err != nil {
		t.Fatal(err)
	}
	waitDeliveries(t, b2.srv)
	if n := len(rc2.deliveries()); n < 2 || n > 10 {
		t.Fatalf("failing endpoint got %d attempts", n)
	}
	if ev := b2.srv.Events()[0]; ev.Delivered != 0 || ev.Failed != 1 {
		t.Fatalf("Events()[0] = %+v", ev)
	}
}

func TestWebhooksWithoutURL(t *testing.T) {
	t.Parallel()
	b := setup(t, &stripetest.Config{Clock: time.Now})
	if _, err := b.sc.PaymentIntents.New(chargeParams("k", 100, stripetest.PaymentMethodVisa)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // nothing to wait for: must not need the context
	if err := b.srv.WaitDeliveries(ctx); err != nil {
		t.Fatal(err)
	}
	if evs := b.srv.Events(); len(evs) != 1 || evs[0].Type != "payment_intent.succeeded" || evs[0].Delivered != 0 {
		t.Fatalf("Events() = %+v", evs)
	}
}

func deliveryGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "fakekit.(*Deliveries[...]).run")
}

func TestWebhooksCloseStopsDelivery(t *testing.T) {
	rc := newReceiver(t, nil, true) // the endpoint never answers
	srv := stripetest.NewServer(&stripetest.Config{WebhookURL: rc.URL, DuplicateWebhooks: 1})
	sc := newClient(srv, "sk_test_x")
	for _, key := range []string{"a", "b"} {
		if _, err := sc.PaymentIntents.New(chargeParams(key, 100, stripetest.PaymentMethodVisa)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-rc.arrived:
	case <-time.After(testkit.Patience):
		t.Fatal("no delivery arrived")
	}
	if deliveryGoroutines() == 0 {
		t.Fatal("no delivery goroutine while delivering")
	}

	// Close cuts the delivery short rather than waiting for the endpoint: were it to wait,
	// each attempt would last the delivery client's timeout (5 s), 4 attempts, 2 copies, 2
	// events, and the endpoint would get more than the one request.
	waitErr := make(chan error, 1)
	go func() { waitErr <- srv.WaitDeliveries(context.Background()) }()
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(testkit.Patience):
		t.Fatal("Close waited for the endpoint")
	}
	select {
	case err := <-waitErr:
		if !errors.Is(err, stripetest.ErrClosed) {
			t.Fatalf("WaitDeliveries = %v, want ErrClosed", err)
		}
	case <-time.After(testkit.Patience):
		t.Fatal("WaitDeliveries did not return after Close")
	}
	// The delivery goroutine has returned once Close has; its last frames may still be on
	// its stack for a moment.
	for deadline := time.Now().Add(testkit.Patience); deliveryGoroutines() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d delivery goroutines after Close", deliveryGoroutines())
		}
	}

	// Events after Close (a standalone Server can still be called) are recorded, not delivered.
	req := httptest.NewRequest(http.MethodPost, "/v1/payment_intents",
		strings.NewReader("amount=100&currency=usd&confirm=true&payment_method="+stripetest.PaymentMethodVisa))
	req.Header.Set("Authorization", "Bearer sk_test_x")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("after Close: %d %s", w.Code, w.Body)
	}
	// A delivery goroutine, had the event started one, would exist by now: the go statement
	// runs inside ServeHTTP.
	if n := deliveryGoroutines(); n != 0 {
		t.Fatalf("%d delivery goroutines started after Close", n)
	}
	if n := len(rc.deliveries()); n != 1 {
		t.Fatalf("endpoint got %d requests, want only the one cut short by Close", n)
	}
	evs := srv.Events()
	if len(evs) != 3 || evs[0].Delivered != 0 || evs[0].Failed == 0 || evs[1].Delivered+evs[1].Failed != 0 ||
		evs[2].Delivered+evs[2].Failed != 0 {
		t.Fatalf("Events() = %+v", evs)
	}
}
