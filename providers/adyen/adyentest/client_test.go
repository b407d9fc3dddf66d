package adyentest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
)

// A user's test of a lost response, written as Server.Client's documentation says: the adapter
// sends through Server.Client, a first charge opens a connection, and a ResetAfter loses the
// second charge's response. The adapter must report the outcome unknown, not the success that
// net/http's resend of a request with an Idempotency-Key on a kept-alive connection would have
// fetched from the fake's replay.
func TestClientSeesResetAfter(t *testing.T) {
	t.Parallel()
	srv := adyentest.NewServer(nil)
	t.Cleanup(srv.Close)
	p, err := adyen.New(&adyen.Config{APIKey: "AQE_user", MerchantAccount: "ShopECOM", BaseURL: srv.URL(),
		HTTPClient: srv.Client(), ReturnURL: "https://shop.example/return"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	charge := func(key string) (provider.ChargeResult, error) {
		return p.Charge(ctx, provider.ChargeRequest{Key: key, ProviderKey: provider.DeriveKey(key, "charge", 0, adyen.MaxReferenceLen),
			Amount: money.MustParse("20.00", money.EUR), PaymentMethod: adyentest.PaymentMethodVisa, Shopper: "usr_7fQ9x"})
	}
	if res, err := charge("order-a"); err != nil || res.Status != provider.ChargeSucceeded {
		t.Fatalf("first charge: %+v %v", res, err)
	}

	srv.Inject(adyentest.Fault{Kind: adyentest.ResetAfter, Path: "/payments"})
	res, err := charge("order-b")
	var unknown *provider.UnknownOutcomeError
	if !errors.As(err, &unknown) {
		t.Fatalf("a reset after the payment reached the adapter as %+v, %v; want *provider.UnknownOutcomeError "+
			"(a resend on a kept-alive connection healed the fault)", res, err)
	}
	res, err = charge("order-b")
	if err != nil || res.Status != provider.ChargeSucceeded {
		t.Fatalf("the retry: %+v %v; want the lost payment's success", res, err)
	}
	if got := srv.Counts(provider.DeriveKey("order-b", "charge", 0, adyen.MaxReferenceLen)); got.Payments != 1 {
		t.Fatalf("payments for the lost charge: %+v, want 1", got)
	}
}
