package paypal_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/testkit"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// first returns the first request rec sent to endpoint ("POST /v2/checkout/orders").
func first(rec *testkit.Recorder, endpoint string) (testkit.Sent, bool) {
	for _, s := range rec.All() {
		if s.Endpoint() == endpoint {
			return s, true
		}
	}
	return testkit.Sent{}, false
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
	rec := &testkit.Recorder{}
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

	create, ok := first(rec, "POST /v2/checkout/orders")
	body := create.JSON(t)
	if !ok || create.Header.Get("PayPal-Request-Id") == "" || at(body, "intent") != "CAPTURE" ||
		at(body, "purchase_units", 0, "amount", "currency_code") != "EUR" || at(body, "purchase_units", 0, "amount", "value") != "20.00" ||
		at(body, "payment_source", "card", "vault_id") != paypaltest.PaymentMethodVisa {
		t.Errorf("create sent %v %s", create.Header, create.Body)
	}
	refunds := 0
	for _, s := range rec.Matching("POST", "/v2/payments/captures/*/refund") {
		if s.Header.Get("PayPal-Request-Id") != "" {
			refunds++
		}
	}
	if refunds != 1 {
		t.Errorf("%d refunds of a capture sent with a PayPal-Request-Id, want 1", refunds)
	}
	search, ok := first(rec, "GET /v1/reporting/transactions")
	if !ok || search.Query.Get("start_date") == "" || search.Query.Get("end_date") == "" {
		t.Errorf("search sent %v", search.Query)
	}
	verify, ok := first(rec, "POST /v1/notifications/verify-webhook-signature")
	for _, f := range []string{"auth_algo", "cert_url", "transmission_id", "transmission_sig", "transmission_time", "webhook_id", "webhook_event"} {
		if v := at(verify.JSON(t), f); !ok || v == nil || v == "" {
			t.Errorf("verification sent without %s: %s", f, verify.Body)
		}
	}
}

func TestBadInputsAreNamed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ok := chargeReq("bad", paypaltest.PaymentMethodVisa)
	for _, tc := range []struct {
		param  string
		modify func(r *provider.ChargeRequest)
	}{
		{"Key", func(r *provider.ChargeRequest) { r.Key = "" }},
		{"ProviderKey", func(r *provider.ChargeRequest) { r.ProviderKey = "" }},
		{"ProviderKey", func(r *provider.ChargeRequest) { r.ProviderKey = strings.Repeat("k", 128) }},
		{"Amount", func(r *provider.ChargeRequest) { r.Amount = money.Money{} }},
		{"Amount", func(r *provider.ChargeRequest) { r.Amount = eur("-1.00") }},
		{"PaymentMethod", func(r *provider.ChargeRequest) { r.PaymentMethod = "" }},
		{"Description", func(r *provider.ChargeRequest) { r.Description = strings.Repeat("d", 128) }},
		{"ProviderID", func(r *provider.ChargeRequest) { r.ProviderID = "../orders" }},
	} {
		r := ok
		tc.modify(&r)
		_, err := b.p.Charge(ctxT(t), r)
		if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != tc.param || !strings.Contains(ie.Message, tc.param) {
			t.Fatalf("%s: %+v", tc.param, ie)
		}
	}
	_, err := b.p.Charge(ctxT(t), chargeReq("bad-pm", "pm_card_unknown"))
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Code != "PAYMENT_SOURCE_CANNOT_BE_USED" {
		t.Fatalf("%+v", ie)
	}
	_, err = b.p.Refund(ctxT(t), provider.RefundRequest{Key: "k", ProviderKey: "k", Amount: eur("1.00")})
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != "ChargeID" {
		t.Fatalf("%+v", ie)
	}
	_, err = b.p.Lookup(ctxT(t), provider.LookupRequest{Key: "k"})
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != "ProviderKey" {
		t.Fatalf("%+v", ie)
	}
	if n := b.srv.CountsByCustomID(ok.ProviderKey); n != (paypaltest.Counts{}) {
		t.Fatalf("bad inputs reached the fake: %+v", n)
	}
}
