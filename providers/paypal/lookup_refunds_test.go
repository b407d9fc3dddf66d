package paypal_test

import (
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/testkit"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// countedProvider is a second Provider on b's fake whose requests are counted.
func countedProvider(t *testing.T, b bundle) (*paypal.Provider, sentRequests) {
	t.Helper()
	rc := sentRequests{&testkit.Recorder{}}
	p := must(paypal.New(&paypal.Config{ClientID: paypaltest.DefaultClientID, Secret: paypaltest.DefaultSecret,
		BaseURL: b.srv.URL(), HTTPClient: &http.Client{Timeout: time.Minute, Transport: rc},
		WebhookID: paypaltest.DefaultWebhookID, Clock: b.clock.Now}))(t)
	return p, rc
}

// A captured order with two completed partial refunds and one that failed later: Lookup
// WithRefunds reports the completed sum, by order id and after a create replay (one more GET of
// the order); without WithRefunds nothing is known and no extra request is sent.
func TestLookupWithRefunds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("lookup-refunds", paypaltest.PaymentMethodVisa)
	ch := must(b.p.Charge(ctxT(t), req))(t)
	must(b.p.Refund(ctxT(t), refundReq("lr-1", ch.ProviderID, eur("5.00"))))(t)
	must(b.p.Refund(ctxT(t), refundReq("lr-2", ch.ProviderID, eur("3.00"))))(t)
	failed := must(b.p.Refund(ctxT(t), refundReq("lr-3", ch.ProviderID, eur("2.50"))))(t)
	if err := b.srv.FailRefund(failed.ProviderID); err != nil {
		t.Fatal(err)
	}
	if got := b.srv.Totals()["EUR"]; got.Refunded != 800 {
		t.Fatalf("the fake's totals %+v, want 8.00 refunded", got)
	}
	p, rc := countedProvider(t, b)
	window := provider.LookupRequest{Key: req.Key, ProviderKey: req.ProviderKey, From: t0.Add(-time.Minute), To: t0.Add(time.Minute)}
	byID := window
	byID.ProviderID = ch.ProviderID

	const (
		getOrder    = "GET /v2/checkout/orders/"
		createOrder = "POST /v2/checkout/orders"
	)
	for _, tc := range []struct {
		name  string
		req   provider.LookupRequest
		with  bool
		calls map[string]int
	}{
		{"by order id", byID, true, map[string]int{getOrder + ch.ProviderID: 1}},
		{"by order id, without refunds", byID, false, map[string]int{getOrder + ch.ProviderID: 1}},
		{"by replay", window, true, map[string]int{createOrder: 1, getOrder + ch.ProviderID: 1}},
		{"by replay, without refunds", window, false, map[string]int{createOrder: 1}},
	} {
		lr := tc.req
		lr.WithRefunds = tc.with
		got := must(p.Lookup(ctxT(t), lr))(t)
		if len(got.Charges) != 1 || got.Charges[0].ProviderID != ch.ProviderID || got.Charges[0].Status != provider.ChargeSucceeded {
			t.Fatalf("%s: %+v", tc.name, got)
		}
		c := got.Charges[0]
		switch {
		case tc.with && (!c.RefundsKnown || !c.Refunded.Equal(eur("8.00"))):
			t.Fatalf("%s: %+v, want 8.00 EUR refunded, known", tc.name, c)
		case !tc.with && (c.RefundsKnown || c.Refunded != (money.Money{})):
			t.Fatalf("%s: %+v, want nothing known", tc.name, c)
		}
		if calls := rc.take(); len(calls) != len(tc.calls) || !maps.Equal(calls, tc.calls) {
			t.Fatalf("%s: requests %v, want %v", tc.name, calls, tc.calls)
		}
	}
	wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1, Captures: 1})
}

// No refunds, a declined capture and an order waiting for the payer: zero Money of the
// charge's currency, known.
func TestLookupWithRefundsNone(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ok := must(b.p.Charge(ctxT(t), chargeReq("lrn-ok", paypaltest.PaymentMethodVisa)))(t)
	declined, _ := b.p.Charge(ctxT(t), chargeReq("lrn-declined", paypaltest.PaymentMethodDeclined))
	action := must(b.p.Charge(ctxT(t), chargeReq("lrn-3ds", paypaltest.PaymentMethodAuthenticationRequired)))(t)
	for _, id := range []string{ok.ProviderID, declined.ProviderID, action.ProviderID} {
		got := must(b.p.Lookup(ctxT(t), provider.LookupRequest{ProviderID: id, WithRefunds: true}))(t)
		if len(got.Charges) != 1 || !got.Charges[0].RefundsKnown || !got.Charges[0].Refunded.Equal(eur("0.00")) {
			t.Fatalf("%s: %+v, want 0.00 EUR refunded, known", id, got)
		}
	}
}

// FailRefund refuses what it cannot fail, and gives the amount back to the capture.
func TestFakeFailRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ch := must(b.p.Charge(ctxT(t), chargeReq("fr", paypaltest.PaymentMethodVisa)))(t)
	re := must(b.p.Refund(ctxT(t), refundReq("fr-1", ch.ProviderID, eur("20.00"))))(t)
	if err := b.srv.FailRefund(re.ProviderID); err != nil {
		t.Fatal(err)
	}
	if err := b.srv.FailRefund(re.ProviderID); err == nil {
		t.Fatal("failing a failed refund: no error")
	}
	if err := b.srv.FailRefund("REFUNKNOWN"); err == nil {
		t.Fatal("failing an unknown refund: no error")
	}
	// The whole capture is refundable again.
	if res := must(b.p.Refund(ctxT(t), refundReq("fr-2", ch.ProviderID, eur("20.00"))))(t); res.Status != provider.RefundSucceeded {
		t.Fatalf("%+v", res)
	}
	if got := b.srv.Totals()["EUR"]; got != (paypaltest.Total{Captured: 2000, Refunded: 2000}) {
		t.Fatalf("totals %+v", got)
	}
}
