package stripe_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// A refund whose response is lost: LookupRefund finds it among the
// PaymentIntent's refunds by the key in its metadata, from a consistent
// list, so the reconciler can settle it without sending it again.
func ExampleProvider_LookupRefund() {
	srv := stripetest.NewServer(nil)
	defer srv.Close()
	p, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_example", BaseURL: srv.URL(),
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	ch, err := p.Charge(ctx, provider.ChargeRequest{Key: "order-42",
		ProviderKey: provider.DeriveKey("order-42", "charge", 0, paystripe.MaxProviderKeyLen),
		Amount:      money.MustParse("20.00", money.EUR), PaymentMethod: stripetest.PaymentMethodVisa})
	if err != nil {
		panic(err)
	}

	refund := provider.RefundRequest{Key: "order-42-refund",
		ProviderKey: provider.DeriveKey("order-42-refund", "refund", 0, paystripe.MaxProviderKeyLen),
		ChargeID:    ch.ProviderID, Amount: money.MustParse("5.00", money.EUR)}
	srv.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/refunds"})
	_, err = p.Refund(ctx, refund)
	fmt.Println("outcome unknown:", payments.OutcomeUnknown(err))

	found, err := p.LookupRefund(ctx, provider.RefundLookupRequest{Key: refund.Key, ProviderKey: refund.ProviderKey, ChargeID: ch.ProviderID})
	if err != nil {
		panic(err)
	}
	for _, r := range found.Refunds {
		fmt.Println(r.Status, r.Amount)
	}
	fmt.Println("consistent:", found.Consistent)
	// Output:
	// outcome unknown: true
	// succeeded 5.00 EUR
	// consistent: true
}
