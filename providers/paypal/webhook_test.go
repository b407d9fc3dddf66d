package paypal_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

func TestWebhooks(t *testing.T) {
	t.Parallel()
	b, s := setupWithSink(t, &paypaltest.Config{DuplicateWebhooks: 1})
	ctx := ctxT(t)
	req := chargeReq("wh", paypaltest.PaymentMethodVisa)
	ch := must(b.p.Charge(ctx, req))(t)
	must(b.p.Refund(ctx, refundReq("wh-refund", ch.ProviderID, eur("2.50"))))(t)
	dreq := chargeReq("wh-declined", paypaltest.PaymentMethodInsufficientFunds)
	dch, _ := b.p.Charge(ctx, dreq)
	if err := b.srv.WaitDeliveries(ctx); err != nil {
		t.Fatal(err)
	}
	ds := s.all()
	if len(ds) != 6 {
		t.Fatalf("%d deliveries, want 3 events twice", len(ds))
	}
	var evs []provider.WebhookEvent
	for _, d := range ds {
		got, err := b.p.VerifyWebhook(ctx, d.header, d.body)
		if err != nil || len(got) != 1 {
			t.Fatalf("verify: %v %v", got, err)
		}
		evs = append(evs, got[0])
	}
	if evs[0].ID != evs[1].ID || ds[0].header.Get(paypal.HeaderTransmissionID) == ds[1].header.Get(paypal.HeaderTransmissionID) {
		t.Fatal("a duplicate must keep the event id and get a new transmission")
	}
	c, r, d := evs[0], evs[2], evs[4]
	if c.Kind != provider.EventChargeSucceeded || c.Type != "PAYMENT.CAPTURE.COMPLETED" || c.Reference != req.ProviderKey ||
		c.ProviderID != ch.ProviderID || !c.Amount.Equal(req.Amount) || len(c.Body) == 0 {
		t.Fatalf("capture event %+v", c)
	}
	if r.Kind != provider.EventRefundSucceeded || r.Reference != provider.DeriveKey("wh-refund", "refund", 0, 127) ||
		!strings.HasPrefix(r.ProviderID, "REFFAKE") || !r.Amount.Equal(eur("2.50")) {
		t.Fatalf("refund event %+v", r)
	}
	if d.Kind != provider.EventChargeFailed || d.DeclineCode != paypaltest.ResponseCodeInsufficientFunds || d.ProviderID != dch.ProviderID {
		t.Fatalf("decline event %+v", d)
	}

	good := ds[0]
	for name, mutate := range map[string]func(h http.Header) []byte{
		"forged signature": func(h http.Header) []byte { h.Set(paypal.HeaderTransmissionSig, "Zm9yZ2Vk"); return good.body },
		"other body": func(h http.Header) []byte {
			return []byte(strings.Replace(string(good.body), req.ProviderKey, "someone_else", 1))
		},
		"unknown transmission": func(h http.Header) []byte { h.Set(paypal.HeaderTransmissionID, "nope"); return good.body },
	} {
		h := good.header.Clone()
		body := mutate(h)
		_, err := b.p.VerifyWebhook(ctx, h, body)
		if !errors.Is(err, provider.ErrWebhookSignature) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for _, hdr := range []string{paypal.HeaderAuthAlgo, paypal.HeaderCertURL, paypal.HeaderTransmissionID, paypal.HeaderTransmissionSig, paypal.HeaderTransmissionTime} {
		h := good.header.Clone()
		h.Del(hdr)
		_, err := b.p.VerifyWebhook(ctx, h, good.body)
		if !errors.Is(err, provider.ErrWebhookSignature) || !strings.Contains(err.Error(), hdr) {
			t.Fatalf("without %s: %v", hdr, err)
		}
	}
	for _, body := range []string{`{"id":`, `{"summary":"no id"}`, `[]`} {
		_, err := b.p.VerifyWebhook(ctx, good.header, []byte(body))
		if !errors.Is(err, provider.ErrWebhookMalformed) {
			t.Fatalf("%s: %v", body, err)
		}
	}

	// The verification API failing: a plain error, so the delivery is answered 5xx.
	b.srv.Inject(paypaltest.Fault{Kind: paypaltest.FailBefore, Path: "/v1/notifications/verify-webhook-signature"})
	_, err := b.p.VerifyWebhook(ctx, good.header, good.body)
	if err == nil || errors.Is(err, provider.ErrWebhookSignature) || errors.Is(err, provider.ErrWebhookMalformed) {
		t.Fatalf("verification API down: %v", err)
	}

	// Another subscription's id: FAILURE.
	other := must(paypal.New(&paypal.Config{ClientID: paypaltest.DefaultClientID, Secret: paypaltest.DefaultSecret,
		BaseURL: b.srv.URL(), WebhookID: "WH-OTHER", Clock: b.clock.Now}))(t)
	if _, err := other.VerifyWebhook(ctx, good.header, good.body); !errors.Is(err, provider.ErrWebhookSignature) {
		t.Fatalf("other webhook id: %v", err)
	}
	noID := must(paypal.New(&paypal.Config{ClientID: "id", Secret: "s", BaseURL: b.srv.URL()}))(t)
	if _, err := noID.VerifyWebhook(ctx, good.header, good.body); errAs[*paypal.ConfigError](t, err).Field != "WebhookID" {
		t.Fatal(err)
	}
}

func TestWebhookEventMapping(t *testing.T) {
	t.Parallel()
	// Event types the fake does not emit, verified by a stub that answers SUCCESS.
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/oauth2/token" {
			fmt.Fprint(w, `{"access_token":"tok","token_type":"Bearer","expires_in":32400}`)
			return
		}
		fmt.Fprint(w, `{"verification_status":"SUCCESS"}`)
	}))
	defer ts.Close()
	p := stubProvider(t, ts.URL)
	h := http.Header{}
	for _, k := range []string{paypal.HeaderAuthAlgo, paypal.HeaderCertURL, paypal.HeaderTransmissionID, paypal.HeaderTransmissionSig, paypal.HeaderTransmissionTime} {
		h.Set(k, "x")
	}
	for _, tc := range []struct {
		typ  string
		kind provider.EventKind
	}{
		{"PAYMENT.CAPTURE.PENDING", provider.EventChargePending},
		{"PAYMENT.CAPTURE.DENIED", provider.EventChargeFailed},
		{"CHECKOUT.ORDER.APPROVED", provider.EventIgnored},
	} {
		body := `{"id":"WH-1","event_type":"` + tc.typ + `","resource":{"id":"CAP1","status":"X","custom_id":"k",` +
			`"amount":{"currency_code":"EUR","value":"1.50"},"supplementary_data":{"related_ids":{"order_id":"ORD1"}}}}`
		got := must(p.VerifyWebhook(ctxT(t), h, []byte(body)))(t)
		e := got[0]
		if e.Kind != tc.kind || e.ID != "WH-1" || (tc.kind != provider.EventIgnored && (e.ProviderID != "ORD1" || e.Reference != "k" || !e.Amount.Equal(eur("1.50")))) {
			t.Fatalf("%s: %+v", tc.typ, e)
		}
	}
}
