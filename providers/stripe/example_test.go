package stripe_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// A charge whose response is lost after Stripe committed it: the outcome is
// unknown, the retry with the same provider key replays the success, and
// exactly one PaymentIntent exists.
func Example() {
	srv := stripetest.NewServer(nil)
	defer srv.Close()

	p, err := paystripe.New(&paystripe.Config{
		SecretKey: "sk_test_example",
		BaseURL:   srv.URL(),
		// Keep-alives off: net/http would otherwise resend the lost request
		// itself (it carries an Idempotency-Key) and hide the lost response.
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	})
	if err != nil {
		panic(err)
	}

	req := provider.ChargeRequest{
		Key:           "order-42",
		ProviderKey:   provider.DeriveKey("order-42", "charge", 1, paystripe.MaxProviderKeyLen),
		Amount:        money.MustParse("20.00", money.EUR),
		PaymentMethod: stripetest.PaymentMethodVisa,
	}

	srv.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Path: "/v1/payment_intents"})
	_, err = p.Charge(context.Background(), req)
	fmt.Println("outcome unknown:", payments.OutcomeUnknown(err), "safe to retry:", idempotency.SafeToRetry(err))

	res, err := p.Charge(context.Background(), req)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, res.Amount, "replayed:", res.Replayed)
	fmt.Printf("%+v\n", srv.CountsByIdempotencyKey(req.ProviderKey))
	// Output:
	// outcome unknown: true safe to retry: true
	// succeeded 20.00 EUR replayed: true
	// {PaymentIntents:1 Refunds:0}
}
