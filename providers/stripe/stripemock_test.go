package stripe_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	paystripe "github.com/payonce/payonce/providers/stripe"
)

// Request-shape conformance: the adapter's calls also run against
// stripe-mock, which validates every request against Stripe's OpenAPI spec
// (and keeps no state, so only the shapes are checked here; the stateful
// fake checks the semantics). `make test` starts stripe-mock and sets
// STRIPE_MOCK_URL.
func stripeMock(t *testing.T) *paystripe.Provider {
	t.Helper()
	url := os.Getenv("STRIPE_MOCK_URL")
	if url == "" {
		t.Fatal("STRIPE_MOCK_URL is not set. Run the suite with `make test`, which installs and starts stripe-mock " +
			"(github.com/stripe/stripe-mock@v0.203.0), or start one yourself: stripe-mock -http-addr 127.0.0.1:12111 " +
			"and STRIPE_MOCK_URL=http://127.0.0.1:12111")
	}
	p, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_123", BaseURL: url,
		HTTPClient: &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// shapeOK fails the test when stripe-mock refused the request's shape; any
// other answer (stripe-mock's canned objects do not follow our amounts or
// statuses) is not this test's business.
func shapeOK(t *testing.T, what string, err error) {
	t.Helper()
	var inv *provider.InvalidRequestError
	if errors.As(err, &inv) {
		t.Fatalf("%s: Stripe's OpenAPI spec refuses the request: %v", what, err)
	}
	if err != nil && !errors.Is(err, provider.ErrDeclined) {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestRequestShapesAgainstStripeMock(t *testing.T) {
	t.Parallel()
	p := stripeMock(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	r := chargeReq("usr_mock_charge_k1", "pm_card_visa")
	r.Metadata = map[string]string{"order": "o-1", "cart": "c-9"}
	res, err := p.Charge(ctx, r)
	shapeOK(t, "charge (PaymentIntent create+confirm with metadata and Idempotency-Key)", err)
	if res.ProviderID == "" {
		t.Fatalf("charge: no PaymentIntent id in %+v", res)
	}

	// A saved card's charge names its Customer (Config.Customer).
	withCustomer, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_123", BaseURL: os.Getenv("STRIPE_MOCK_URL"),
		HTTPClient: &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}},
		Customer:   func(r provider.ChargeRequest) string { return r.Shopper }})
	if err != nil {
		t.Fatal(err)
	}
	rc := chargeReq("usr_mock_charge_k2", "pm_card_visa")
	rc.Shopper = "cus_mock"
	_, err = withCustomer.Charge(ctx, rc)
	shapeOK(t, "charge with a customer", err)

	_, err = p.Refund(ctx, provider.RefundRequest{Key: "usr_mock_refund_r1",
		ProviderKey: provider.DeriveKey("usr_mock_refund_r1", "refund", 0, paystripe.MaxProviderKeyLen),
		ChargeID:    res.ProviderID, Amount: eur("5.00")})
	shapeOK(t, "refund (POST /v1/refunds with payment_intent, amount, metadata)", err)

	now := time.Now()
	_, err = p.Lookup(ctx, provider.LookupRequest{Key: r.Key, ProviderKey: r.ProviderKey, From: now.Add(-time.Hour), To: now})
	shapeOK(t, "lookup (GET /v1/payment_intents with created[gte|lte], limit)", err)

	_, err = p.Lookup(ctx, provider.LookupRequest{Key: r.Key, ProviderKey: r.ProviderKey, From: now.Add(-time.Hour), To: now, WithRefunds: true})
	shapeOK(t, "lookup with refunds", err)
	// stripe-mock's canned PaymentIntents carry no payonce key, so the
	// Lookup above finds none and lists no refunds: the refund list of a
	// found charge is sent directly. Its canned refund is 1.00 USD,
	// succeeded.
	ch, err := p.RefundsOf(ctx, provider.ChargeResult{ProviderID: res.ProviderID, Status: provider.ChargeSucceeded,
		Amount: money.MustParse("20.00", money.USD)})
	shapeOK(t, "refund list of a lookup with refunds (GET /v1/refunds with payment_intent, limit)", err)
	if !ch.RefundsKnown || !ch.Refunded.Equal(money.MustParse("1.00", money.USD)) {
		t.Fatalf("refund list: %+v, want stripe-mock's 1.00 USD refund, known", ch)
	}

	// LookupRefund's reads. stripe-mock's canned refunds carry no payonce
	// key: the list keeps none, and the refund read by id is refused as
	// another action's (after stripe-mock accepted the request).
	found, err := p.LookupRefund(ctx, provider.RefundLookupRequest{Key: "usr_mock_refund_r1", ChargeID: res.ProviderID})
	shapeOK(t, "refund lookup (GET /v1/refunds with payment_intent, limit)", err)
	if !found.Consistent || len(found.Refunds) != 0 {
		t.Fatalf("refund lookup: %+v, want none of stripe-mock's canned refunds, consistent", found)
	}
	_, err = p.LookupRefund(ctx, provider.RefundLookupRequest{Key: "usr_mock_refund_r1", ProviderID: "re_123"})
	var inv *provider.InvalidRequestError
	if !errors.As(err, &inv) || inv.Code != "payonce_refund_mismatch" {
		t.Fatalf("refund lookup by id (GET /v1/refunds/{id}): %v, want the canned refund refused as another key's", err)
	}

	// stripe-mock answers any window with its one canned transaction: a
	// 1.00 USD charge.
	tot, err := p.Totals(ctx, now.Add(-24*time.Hour), now)
	shapeOK(t, "totals (GET /v1/balance_transactions with created[gte|lt], limit)", err)
	if len(tot) != 1 || !tot[money.USD].Charged.Equal(money.MustParse("1.00", money.USD)) ||
		!tot[money.USD].Refunded.Equal(money.MustParse("0", money.USD)) {
		t.Fatalf("totals: %v, want stripe-mock's 1.00 USD charge", tot)
	}
}

// The check above is only worth something if stripe-mock refuses a
// request its spec does not allow: an unknown parameter next to valid ones
// (what a drifted adapter would send) gets a 400.
func TestStripeMockRefusesABadShape(t *testing.T) {
	t.Parallel()
	stripeMock(t)
	form := url.Values{"amount": {"2000"}, "currency": {"eur"}, "confirm": {"true"}, "payment_method": {"pm_card_visa"}}
	post := func(f url.Values) int {
		req, err := http.NewRequest(http.MethodPost, os.Getenv("STRIPE_MOCK_URL")+"/v1/payment_intents", strings.NewReader(f.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer sk_test_123")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Close = true
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(form); code != http.StatusOK {
		t.Fatalf("a valid create: %d, want 200", code)
	}
	form.Set("payonce_not_a_param", "1")
	if code := post(form); code != http.StatusBadRequest {
		t.Fatalf("a create with an unknown parameter: %d, want 400", code)
	}
}
