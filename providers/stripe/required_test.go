package stripe_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/payonce/payonce/payments/provider"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// formRecorder is a transport that keeps the form of every POST it sends, by path.
type formRecorder struct {
	mu    sync.Mutex
	next  http.RoundTripper
	forms map[string][]url.Values
}

func (r *formRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.forms[req.URL.Path] = append(r.forms[req.URL.Path], form)
		r.mu.Unlock()
	}
	return r.next.RoundTrip(req)
}

// setupRecorded is setup with the adapter's requests recorded and its Config edited.
func setupRecorded(t *testing.T, edit func(*paystripe.Config)) (bundle, *formRecorder) {
	t.Helper()
	srv := stripetest.NewServer(nil)
	t.Cleanup(srv.Close)
	rec := &formRecorder{next: &http.Transport{DisableKeepAlives: true}, forms: map[string][]url.Values{}}
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

	rec.mu.Lock()
	defer rec.mu.Unlock()
	for path, params := range map[string][]string{
		"/v1/payment_intents": {"amount", "currency", "payment_method", "confirm", "payment_method_types[0]"},
		"/v1/refunds":         {"payment_intent", "amount"},
	} {
		forms := rec.forms[path]
		if len(forms) != 1 {
			t.Fatalf("%d POSTs to %s, want 1", len(forms), path)
		}
		for _, p := range params {
			if forms[0].Get(p) == "" {
				t.Errorf("%s sent without %s: %v", path, p, forms[0])
			}
		}
	}
	if f := rec.forms["/v1/payment_intents"][0]; f.Get("payment_method_types[0]") != "card" || f.Has("customer") {
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
	rec.mu.Lock()
	got := rec.forms["/v1/payment_intents"][0].Get("customer")
	rec.mu.Unlock()
	if got != "cus_alice" {
		t.Fatalf("customer sent %q, want cus_alice", got)
	}
	// An empty answer sends no customer: a card attached to none (Stripe's test cards) still works.
	req = chargeReq("order-unsaved", stripetest.PaymentMethodVisa)
	if res := must(b.p.Charge(ctx, req))(t); res.Status != provider.ChargeSucceeded {
		t.Fatalf("charge without a shopper: %+v", res)
	}
}
