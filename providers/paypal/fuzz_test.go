package paypal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// inProcess is an http.RoundTripper that serves requests with a handler in
// this goroutine, so that a fuzz iteration costs no connection. It counts
// the verify-webhook-signature calls.
type inProcess struct {
	h        http.Handler
	verifies atomic.Int64
}

func (tr *inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == "/v1/notifications/verify-webhook-signature" {
		tr.verifies.Add(1)
	}
	in := r.Clone(r.Context())
	if in.Body == nil {
		in.Body = http.NoBody
	}
	w := httptest.NewRecorder()
	tr.h.ServeHTTP(w, in)
	return w.Result(), nil
}

// fuzzDelivery is one webhook delivery the fake made.
type fuzzDelivery struct {
	header http.Header
	body   []byte
}

// fuzzSetup returns a Provider verifying on an unstarted fake served in
// process, and the deliveries the fake made for a capture, a declined
// capture and a refund. The fake runs on a manual clock and each operation's
// deliveries are awaited before the next, so that every process of a fuzz
// run makes the same transmissions (the seeds verify in each of them).
func fuzzSetup(f *testing.F) (*paypal.Provider, *inProcess, []fuzzDelivery) {
	f.Helper()
	var mu sync.Mutex
	var deliveries []fuzzDelivery
	sink := &inProcess{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		deliveries = append(deliveries, fuzzDelivery{r.Header.Clone(), body})
		mu.Unlock()
	})}
	clock := paypaltest.NewManualClock(t0)
	srv := paypaltest.NewUnstartedServer(&paypaltest.Config{Clock: clock.Now, WebhookURL: "http://sink.invalid/paypal",
		WebhookClient: &http.Client{Transport: sink}})
	f.Cleanup(srv.Close)
	api := &inProcess{h: srv}
	p, err := paypal.New(&paypal.Config{ClientID: paypaltest.DefaultClientID, Secret: paypaltest.DefaultSecret,
		BaseURL: "http://paypaltest.invalid", HTTPClient: &http.Client{Transport: api}, WebhookID: paypaltest.DefaultWebhookID,
		Clock: clock.Now})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	wait := func() {
		if err := srv.WaitDeliveries(ctx); err != nil {
			f.Fatal(err)
		}
	}
	ch, err := p.Charge(ctx, chargeReq("fz-1", paypaltest.PaymentMethodVisa))
	if err != nil {
		f.Fatal(err)
	}
	wait()
	_, _ = p.Charge(ctx, chargeReq("fz-2", paypaltest.PaymentMethodDeclined)) // a decline: its event is what we want
	wait()
	if _, err := p.Refund(ctx, provider.RefundRequest{Key: "fz-1-r", ProviderKey: "fz-1-r", ChargeID: ch.ProviderID, Amount: eur("3.00")}); err != nil {
		f.Fatal(err)
	}
	wait()
	mu.Lock()
	defer mu.Unlock()
	if len(deliveries) < 3 {
		f.Fatalf("the fake made %d deliveries, want at least 3", len(deliveries))
	}
	for _, d := range deliveries {
		if _, err := p.VerifyWebhook(ctx, d.header, d.body); err != nil {
			f.Fatalf("the fake's delivery %s: %v", d.body, err)
		}
	}
	return p, api, deliveries
}

var webhookHeaders = []string{paypal.HeaderAuthAlgo, paypal.HeaderCertURL, paypal.HeaderTransmissionID,
	paypal.HeaderTransmissionSig, paypal.HeaderTransmissionTime}

var knownKinds = map[provider.EventKind]bool{
	provider.EventChargeSucceeded: true, provider.EventChargeFailed: true, provider.EventChargePending: true,
	provider.EventRefundSucceeded: true, provider.EventIgnored: true,
}

func compactJSON(b []byte) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return nil
	}
	return buf.Bytes()
}

// FuzzVerifyWebhook fuzzes the PAYPAL-* headers and the body of a delivery,
// verified against the fake (in process). A missing header is a signature
// error naming it, and a body that is not an event is malformed, both
// without asking PayPal; otherwise PayPal is asked once, and the delivery
// is accepted exactly when the fake transmitted it (the same five headers,
// the same JSON up to whitespace), as one event with the body's id and type.
// Nothing else is answered while PayPal is reachable, and the answer is
// deterministic.
func FuzzVerifyWebhook(f *testing.F) {
	p, api, deliveries := fuzzSetup(f)
	add := func(h http.Header, body []byte) {
		f.Add(h.Get(webhookHeaders[0]), h.Get(webhookHeaders[1]), h.Get(webhookHeaders[2]), h.Get(webhookHeaders[3]), h.Get(webhookHeaders[4]), body)
	}
	for i, d := range deliveries {
		add(d.header, d.body)
		add(d.header, bytes.ReplaceAll(d.body, []byte(","), []byte(", "))) // the same JSON
		add(d.header, d.body[:len(d.body)/2])
		add(d.header, bytes.Replace(d.body, []byte(`"value":"`), []byte(`"value":"1`), 1))
		add(d.header, deliveries[(i+1)%len(deliveries)].body) // another delivery's body
		h := d.header.Clone()
		h.Set(webhookHeaders[i%len(webhookHeaders)], "")
		add(h, d.body)
		h = d.header.Clone()
		h.Set(paypal.HeaderTransmissionSig, strings.Repeat("A", 44))
		add(h, d.body)
		h = d.header.Clone()
		h.Set(paypal.HeaderTransmissionTime, "2025-03-01T12:00:01Z")
		add(h, d.body)
	}
	for _, body := range []string{``, `null`, `{}`, `{"id":"WH-1"}`, `{"id":"WH-1","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":5}`,
		`{"id":"WH-1","event_type":"PAYMENT.CAPTURE.REFUNDED","resource":{"id":"R","amount":{"currency_code":"EUR","value":"x"}}}`} {
		add(deliveries[0].header, []byte(body))
	}
	f.Fuzz(func(t *testing.T, algo, certURL, id, sig, at string, body []byte) {
		h := http.Header{}
		for i, v := range []string{algo, certURL, id, sig, at} {
			h.Set(webhookHeaders[i], v)
		}
		calls := api.verifies.Load()
		evs, err := p.VerifyWebhook(context.Background(), h, body)
		calls = api.verifies.Load() - calls
		evs2, err2 := p.VerifyWebhook(context.Background(), h, body)
		if !reflect.DeepEqual(evs, evs2) || (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("not deterministic: %v, %v then %v, %v", evs, err, evs2, err2)
		}
		signature, malformed := errors.Is(err, provider.ErrWebhookSignature), errors.Is(err, provider.ErrWebhookMalformed)
		if err != nil && (evs != nil || signature == malformed) {
			t.Fatalf("refusal %v with events %v: want a signature error or a malformed body, and no events", err, evs)
		}

		for _, name := range webhookHeaders {
			if h.Get(name) == "" {
				if !signature || !strings.Contains(err.Error(), name) || calls != 0 {
					t.Fatalf("without %s: %v after %d verification calls", name, err, calls)
				}
				return
			}
		}
		var envelope struct {
			ID        string `json:"id"`
			EventType string `json:"event_type"`
		}
		if json.Unmarshal(body, &envelope) != nil || envelope.ID == "" || envelope.EventType == "" {
			if !malformed {
				t.Fatalf("body %q is not an event: %v", body, err)
			}
		}
		if malformed {
			if calls != 0 {
				t.Fatalf("a malformed body was sent to verification (%d calls)", calls)
			}
			return
		}
		if calls != 1 {
			t.Fatalf("%d verification calls, want 1", calls)
		}

		transmitted := false
		for _, d := range deliveries {
			same := bytes.Equal(compactJSON(body), compactJSON(d.body))
			for _, name := range webhookHeaders {
				same = same && h.Get(name) == d.header.Get(name)
			}
			transmitted = transmitted || same
		}
		switch {
		case !transmitted && err == nil:
			t.Fatalf("a delivery the fake never made accepted: %v %q", h, body)
		case transmitted && err != nil:
			t.Fatalf("a delivery the fake made refused: %v", err)
		case err == nil:
			if len(evs) != 1 || evs[0].ID != envelope.ID || evs[0].Type != envelope.EventType || !knownKinds[evs[0].Kind] ||
				!bytes.Equal(evs[0].Body, body) {
				t.Fatalf("events %+v from %s", evs, body)
			}
		}
	})
}
