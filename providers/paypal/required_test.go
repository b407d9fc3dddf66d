package paypal_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// sentRequest is one API request as the adapter sent it.
type sentRequest struct {
	path      string
	query     url.Values
	requestID string
	body      map[string]any
}

// bodyRecorder is a transport that keeps every API request's body, query and PayPal-Request-Id.
type bodyRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	sent []sentRequest
}

func (r *bodyRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	s := sentRequest{path: req.Method + " " + req.URL.Path, query: req.URL.Query(), requestID: req.Header.Get("PayPal-Request-Id")}
	if req.Body != nil && req.URL.Path != "/v1/oauth2/token" {
		raw, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(raw))
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &s.body); err != nil {
				return nil, err
			}
		}
	}
	r.mu.Lock()
	r.sent = append(r.sent, s)
	r.mu.Unlock()
	return r.next.RoundTrip(req)
}

func (r *bodyRecorder) first(path string) (sentRequest, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.sent {
		if s.path == path {
			return s, true
		}
	}
	return sentRequest{}, false
}

// at returns the value at a JSON path whose segments are object keys or array indexes (int).
func at(v any, path ...any) any {
	for _, seg := range path {
		switch k := seg.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

// Every request the adapter makes carries what PayPal's API reference requires of it, and the
// fake, which refuses a request without a required field, accepts each one: the single-step
// create (intent, purchase_units with amount.currency_code and amount.value, PayPal-Request-Id
// with a payment source), the refund of a capture, Transaction Search past the create's window
// (start_date, end_date) and the webhook signature verification (all seven fields).
func TestRequestsCarryWhatPayPalRequires(t *testing.T) {
	t.Parallel()
	sk, hook := newSink(t)
	clock := paypaltest.NewManualClock(t0)
	srv := paypaltest.NewServer(&paypaltest.Config{Clock: clock.Now, WebhookURL: hook})
	t.Cleanup(srv.Close)
	rec := &bodyRecorder{next: &http.Transport{DisableKeepAlives: true}}
	p := must(paypal.New(&paypal.Config{ClientID: paypaltest.DefaultClientID, Secret: paypaltest.DefaultSecret, BaseURL: srv.URL(),
		HTTPClient: &http.Client{Timeout: time.Minute, Transport: rec}, WebhookID: paypaltest.DefaultWebhookID, Clock: clock.Now}))(t)

	req := chargeReq("order-required", paypaltest.PaymentMethodVisa)
	ch := must(p.Charge(ctxT(t), req))(t)
	if ch.Status != provider.ChargeSucceeded {
		t.Fatalf("charge: %+v", ch)
	}
	must(p.Refund(ctxT(t), refundReq("order-required-r", ch.ProviderID, eur("5.00"))))(t)
	clock.Advance(7 * time.Hour) // past the create's window: the lookup searches
	must(p.Lookup(ctxT(t), provider.LookupRequest{Key: req.Key, ProviderKey: req.ProviderKey, From: t0.Add(-time.Minute), To: t0.Add(time.Minute)}))(t)
	ctx := ctxT(t)
	if err := srv.WaitDeliveries(ctx); err != nil {
		t.Fatal(err)
	}
	d := sk.all()
	if len(d) == 0 {
		t.Fatal("no webhook delivered")
	}
	must(p.VerifyWebhook(ctx, d[0].header, d[0].body))(t)

	create, ok := rec.first("POST /v2/checkout/orders")
	if !ok || create.requestID == "" || at(create.body, "intent") != "CAPTURE" ||
		at(create.body, "purchase_units", 0, "amount", "currency_code") != "EUR" || at(create.body, "purchase_units", 0, "amount", "value") != "20.00" ||
		at(create.body, "payment_source", "card", "vault_id") != paypaltest.PaymentMethodVisa {
		t.Errorf("create sent %+v", create)
	}
	refunds := 0
	rec.mu.Lock()
	for _, s := range rec.sent {
		if strings.HasPrefix(s.path, "POST /v2/payments/captures/") && strings.HasSuffix(s.path, "/refund") && s.requestID != "" {
			refunds++
		}
	}
	rec.mu.Unlock()
	if refunds != 1 {
		t.Errorf("%d refunds of a capture sent with a PayPal-Request-Id, want 1", refunds)
	}
	search, ok := rec.first("GET /v1/reporting/transactions")
	if !ok || search.query.Get("start_date") == "" || search.query.Get("end_date") == "" {
		t.Errorf("search sent %+v", search)
	}
	verify, ok := rec.first("POST /v1/notifications/verify-webhook-signature")
	for _, f := range []string{"auth_algo", "cert_url", "transmission_id", "transmission_sig", "transmission_time", "webhook_id", "webhook_event"} {
		if v := at(verify.body, f); !ok || v == nil || v == "" {
			t.Errorf("verification sent without %s: %+v", f, verify)
		}
	}
}
