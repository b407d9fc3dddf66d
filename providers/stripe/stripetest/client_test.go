package stripetest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// A user's test of a lost response, written as the package documentation says: the adapter
// sends through Server.Client, a first charge opens a connection, and a ResetAfter loses the
// second charge's response. The adapter must report the outcome unknown, not a success that
// net/http's resend on a kept-alive connection would have fetched from the fake's replay.
func TestClientSeesResetAfter(t *testing.T) {
	t.Parallel()
	srv := stripetest.NewServer(nil)
	t.Cleanup(srv.Close)
	p, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_user", BaseURL: srv.URL(), HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	charge := func(key string) (provider.ChargeResult, error) {
		return p.Charge(ctx, provider.ChargeRequest{Key: key, ProviderKey: key + "_charge_0",
			Amount: money.MustParse("10.00", money.EUR), PaymentMethod: stripetest.PaymentMethodVisa})
	}
	if res, err := charge("cus_1_charge_a"); err != nil || res.Status != provider.ChargeSucceeded {
		t.Fatalf("first charge: %+v %v", res, err)
	}

	srv.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	res, err := charge("cus_1_charge_b")
	var unknown *provider.UnknownOutcomeError
	if !errors.As(err, &unknown) {
		t.Fatalf("a reset after the commit reached the adapter as %+v, %v; want *provider.UnknownOutcomeError "+
			"(a resend on a kept-alive connection healed the fault)", res, err)
	}
	res, err = charge("cus_1_charge_b")
	if err != nil || res.Status != provider.ChargeSucceeded || !res.Replayed {
		t.Fatalf("the retry: %+v %v; want the replay of the lost answer", res, err)
	}
	if got := srv.CountsByIdempotencyKey("cus_1_charge_b_charge_0"); got.PaymentIntents != 1 {
		t.Fatalf("PaymentIntents for the lost charge: %d, want 1", got.PaymentIntents)
	}
}
