package paypal_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

func refundReq(key, chargeID string, amount money.Money) provider.RefundRequest {
	return provider.RefundRequest{Key: key, ProviderKey: provider.DeriveKey(key, "refund", 0, paypal.MaxProviderKeyLen),
		ChargeID: chargeID, Amount: amount}
}

func TestRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ch := must(b.p.Charge(ctxT(t), chargeReq("refunded", paypaltest.PaymentMethodVisa)))(t)

	r1 := refundReq("refund-1", ch.ProviderID, eur("5.00"))
	res := must(b.p.Refund(ctxT(t), r1))(t)
	if res.Status != provider.RefundSucceeded || !res.Amount.Equal(eur("5.00")) || res.Replayed || !strings.HasPrefix(res.ProviderID, "REFFAKE") {
		t.Fatalf("%+v", res)
	}
	again := must(b.p.Refund(ctxT(t), r1))(t)
	if again.ProviderID != res.ProviderID || !again.Replayed {
		t.Fatalf("replay %+v", again)
	}
	wantCounts(t, b, r1.ProviderKey, paypaltest.Counts{Refunds: 1})

	// Lost response: the retry replays, one refund exists.
	r2 := refundReq("refund-2", ch.ProviderID, eur("15.00"))
	b.srv.Inject(paypaltest.Fault{Kind: paypaltest.ResetAfter, Path: "/v2/payments/captures/*/refund"})
	_, err := b.p.Refund(ctxT(t), r2)
	if !payments.OutcomeUnknown(err) {
		t.Fatalf("lost refund: %v", err)
	}
	// The capture is fully refunded now; the replay still answers.
	if res := must(b.p.Refund(ctxT(t), r2))(t); !res.Replayed || res.Status != provider.RefundSucceeded {
		t.Fatalf("%+v", res)
	}
	wantCounts(t, b, r2.ProviderKey, paypaltest.Counts{Refunds: 1})

	_, err = b.p.Refund(ctxT(t), refundReq("refund-3", ch.ProviderID, eur("0.01")))
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Code != "CAPTURE_FULLY_REFUNDED" || idempotency.SafeToRetry(err) {
		t.Fatalf("%+v", ie)
	}
	if got := b.srv.Totals()["EUR"]; got != (paypaltest.Total{Captured: 2000, Refunded: 2000}) {
		t.Fatalf("totals %+v", got)
	}
}

func TestOverRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ch := must(b.p.Charge(ctxT(t), chargeReq("over", paypaltest.PaymentMethodVisa)))(t)
	must(b.p.Refund(ctxT(t), refundReq("over-1", ch.ProviderID, eur("15.00"))))(t)
	r := refundReq("over-2", ch.ProviderID, eur("5.01"))
	_, err := b.p.Refund(ctxT(t), r)
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Code != "REFUND_AMOUNT_EXCEEDED" {
		t.Fatalf("%+v", ie)
	}
	wantCounts(t, b, r.ProviderKey, paypaltest.Counts{})
	if got := b.srv.Totals()["EUR"]; got.Refunded != 1500 || got.Net != 500 {
		t.Fatalf("totals %+v", got)
	}
	_, err = b.p.Refund(ctxT(t), refundReq("over-3", ch.ProviderID, money.MustParse("1.00", money.USD)))
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != "Amount" {
		t.Fatalf("%+v", ie)
	}
}

func TestRefundOfUncapturedOrUnknownOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ch := must(b.p.Charge(ctxT(t), chargeReq("3ds", paypaltest.PaymentMethodAuthenticationRequired)))(t)
	_, err := b.p.Refund(ctxT(t), refundReq("r", ch.ProviderID, eur("1.00")))
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != "ChargeID" {
		t.Fatalf("%+v", ie)
	}
	_, err = b.p.Refund(ctxT(t), refundReq("r", "ORDUNKNOWN", eur("1.00")))
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Code != "INVALID_RESOURCE_ID" {
		t.Fatalf("%+v", ie)
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("lookup", paypaltest.PaymentMethodVisa)
	ch := must(b.p.Charge(ctxT(t), req))(t)
	window := provider.LookupRequest{Key: req.Key, ProviderKey: req.ProviderKey, From: t0.Add(-time.Minute), To: t0.Add(time.Minute)}

	byID := window
	byID.ProviderID = ch.ProviderID
	for _, lr := range []provider.LookupRequest{byID, window} {
		got := must(b.p.Lookup(ctxT(t), lr))(t)
		if !got.Consistent || len(got.Charges) != 1 || got.Charges[0].ProviderID != ch.ProviderID ||
			got.Charges[0].Status != provider.ChargeSucceeded || !got.Charges[0].Amount.Equal(req.Amount) {
			t.Fatalf("lookup %+v: %+v", lr, got)
		}
	}
	wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1, Captures: 1})

	// An unknown order id, and a key PayPal never saw: no charges. The second leaves a probe
	// order that moves no money.
	none := must(b.p.Lookup(ctxT(t), provider.LookupRequest{ProviderID: "ORDUNKNOWN"}))(t)
	if len(none.Charges) != 0 || !none.Consistent {
		t.Fatalf("%+v", none)
	}
	absent := window
	absent.ProviderKey += "_absent"
	for range 2 {
		none = must(b.p.Lookup(ctxT(t), absent))(t)
		if len(none.Charges) != 0 {
			t.Fatalf("%+v", none)
		}
	}
	wantCounts(t, b, absent.ProviderKey, paypaltest.Counts{Orders: 1})
	if got := b.srv.Totals()["EUR"]; got.Captured != 2000 {
		t.Fatalf("totals %+v", got)
	}
	// A charge still to come for that key cannot capture the probe.
	late := req
	late.Key, late.ProviderKey = absent.Key, absent.ProviderKey
	_, err := b.p.Charge(ctxT(t), late)
	errAs[*provider.KeyMismatchError](t, err)
	wantCounts(t, b, absent.ProviderKey, paypaltest.Counts{Orders: 1})

	// Without a bound, no lookup can tell: an error the reconciler flags for review, never an
	// outage to look at again.
	for _, lr := range []provider.LookupRequest{
		{Key: req.Key, ProviderKey: req.ProviderKey, To: window.To},
		{Key: req.Key, ProviderKey: req.ProviderKey, From: window.From},
	} {
		_, err := b.p.Lookup(ctxT(t), lr)
		var ct *paypal.CannotTellError
		if !errors.As(err, &ct) || !errors.Is(err, provider.ErrCannotTell) || payments.OutcomeUnknown(err) || idempotency.SafeToRetry(err) {
			t.Fatalf("%+v: %v", lr, err)
		}
	}
	creates := b.sent.count("POST", "/v2/checkout/orders")
	// Past the create's window it searches instead of replaying (a replay would create).
	past := window
	past.From = t0.Add(-6 * time.Hour)
	got := must(b.p.Lookup(ctxT(t), past))(t)
	if len(got.Charges) != 1 || got.Charges[0].ProviderID != ch.ProviderID || got.Consistent {
		t.Fatalf("past the window: %+v, want the charge, not consistent (the period ends now)", got)
	}
	if n := b.sent.count("POST", "/v2/checkout/orders"); n != creates || b.sent.count("GET", "/v1/reporting/transactions") == 0 {
		t.Fatalf("past the window: %v", b.sent.all())
	}
}

func TestLookupStates(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	declined := chargeReq("lk-declined", paypaltest.PaymentMethodDeclined)
	d, _ := b.p.Charge(ctxT(t), declined)
	action := chargeReq("lk-3ds", paypaltest.PaymentMethodAuthenticationRequired)
	a := must(b.p.Charge(ctxT(t), action))(t)
	for _, tc := range []struct {
		id   string
		want provider.ChargeStatus
	}{{d.ProviderID, provider.ChargeFailed}, {a.ProviderID, provider.ChargeRequiresAction}} {
		got := must(b.p.Lookup(ctxT(t), provider.LookupRequest{ProviderID: tc.id}))(t)
		if len(got.Charges) != 1 || got.Charges[0].Status != tc.want {
			t.Fatalf("%s: %+v", tc.id, got)
		}
	}
	// An approved order that was never captured is no charge.
	req := chargeReq("lk-uncaptured", paypaltest.PaymentMethodAuthenticationRequired)
	orderID := must(b.p.Charge(ctxT(t), req))(t).ProviderID
	if err := b.srv.CompletePayerAction(orderID); err != nil {
		t.Fatal(err)
	}
	got := must(b.p.Lookup(ctxT(t), provider.LookupRequest{ProviderID: orderID, ProviderKey: req.ProviderKey}))(t)
	if len(got.Charges) != 0 {
		t.Fatalf("%+v", got)
	}
	_, err := b.p.Lookup(ctxT(t), provider.LookupRequest{ProviderID: orderID, ProviderKey: "other"})
	errAs[*provider.KeyMismatchError](t, err)
}

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
