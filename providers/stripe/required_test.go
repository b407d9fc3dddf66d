package stripe_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/testkit"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// forms returns the forms of the POSTs rec sent to path.
func forms(t *testing.T, rec *testkit.Recorder, path string) []url.Values {
	t.Helper()
	var out []url.Values
	for _, s := range rec.Matching(http.MethodPost, path) {
		out = append(out, s.Form(t))
	}
	return out
}

// setupRecorded is setup with the adapter's requests recorded and its Config edited.
func setupRecorded(t *testing.T, edit func(*paystripe.Config)) (bundle, *testkit.Recorder) {
	t.Helper()
	srv := stripetest.NewServer(nil)
	t.Cleanup(srv.Close)
	rec := &testkit.Recorder{}
	cfg := &paystripe.Config{SecretKey: "sk_test_payonce", BaseURL: srv.URL(),
		HTTPClient: &http.Client{Timeout: time.Minute, Transport: rec}}
	if edit != nil {
		edit(cfg)
	}
	return bundle{srv: srv, p: must(paystripe.New(cfg))(t)}, rec
}

// The adapter's writes carry what Stripe requires: a PaymentIntent its amount and currency
// (https://docs.stripe.com/api/payment_intents/create) and payment_method_types card (without
// it, confirming takes the Dashboard's payment methods and may require a return_url), a refund
// its PaymentIntent (https://docs.stripe.com/api/refunds/create). The fake, which refuses a
// request without them, accepts both.
func TestRequestsCarryWhatStripeRequires(t *testing.T) {
	t.Parallel()
	b, rec := setupRecorded(t, nil)
	ctx := context.Background()
	ch := must(b.p.Charge(ctx, chargeReq("order-required", stripetest.PaymentMethodVisa)))(t)
	must(b.p.Refund(ctx, provider.RefundRequest{Key: "refund-required", ProviderKey: "refund-required_refund_1",
		ChargeID: ch.ProviderID, Amount: eur("5.00")}))(t)

	for path, params := range map[string][]string{
		"/v1/payment_intents": {"amount", "currency", "payment_method", "confirm", "payment_method_types[0]"},
		"/v1/refunds":         {"payment_intent", "amount"},
	} {
		sent := forms(t, rec, path)
		if len(sent) != 1 {
			t.Fatalf("%d POSTs to %s, want 1", len(sent), path)
		}
		for _, p := range params {
			if sent[0].Get(p) == "" {
				t.Errorf("%s sent without %s: %v", path, p, sent[0])
			}
		}
	}
	if f := forms(t, rec, "/v1/payment_intents")[0]; f.Get("payment_method_types[0]") != "card" || f.Has("customer") {
		t.Errorf("PaymentIntent sent %v, want payment_method_types card and no customer without Config.Customer", f)
	}
}

// A saved card is attached to a Customer, and Stripe refuses a PaymentIntent with it that does
// not name that Customer. Config.Customer names it.
func TestSavedCardChargeNamesItsCustomer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Without Config.Customer the request is refused: nothing is charged.
	b, _ := setupRecorded(t, nil)
	pm := must(b.srv.AttachPaymentMethod("cus_alice", stripetest.PaymentMethodVisa))(t)
	req := chargeReq("order-saved", pm)
	req.Shopper = "cus_alice"
	_, err := b.p.Charge(ctx, req)
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != "customer" {
		t.Fatalf("saved card without a customer: %+v", ie)
	}
	wantCount(t, b, req.ProviderKey, 0, 0)

	// With it, the PaymentIntent names the Customer and succeeds.
	b, rec := setupRecorded(t, func(c *paystripe.Config) {
		c.Customer = func(r provider.ChargeRequest) string { return r.Shopper }
	})
	pm = must(b.srv.AttachPaymentMethod("cus_alice", stripetest.PaymentMethodVisa))(t)
	req = chargeReq("order-saved", pm)
	req.Shopper = "cus_alice"
	if res := must(b.p.Charge(ctx, req))(t); res.Status != provider.ChargeSucceeded {
		t.Fatalf("charge: %+v", res)
	}
	if got := forms(t, rec, "/v1/payment_intents")[0].Get("customer"); got != "cus_alice" {
		t.Fatalf("customer sent %q, want cus_alice", got)
	}
	// An empty answer sends no customer: a card attached to none (Stripe's test cards) still works.
	req = chargeReq("order-unsaved", stripetest.PaymentMethodVisa)
	if res := must(b.p.Charge(ctx, req))(t); res.Status != provider.ChargeSucceeded {
		t.Fatalf("charge without a shopper: %+v", res)
	}
}
