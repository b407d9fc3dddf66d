package stripetest_test

import (
	"errors"
	"fmt"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/paymentintent"

	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// A charge whose response is lost after Stripe committed it: the retry with the same key
// replays the original outcome, and the fake proves exactly one PaymentIntent exists.
func Example() {
	srv := stripetest.NewServer(nil)
	defer srv.Close()

	b := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(srv.URL()),
		MaxNetworkRetries: stripe.Int64(0),
		HTTPClient:        srv.Client(), // no keep-alives: the lost response reaches the caller
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	paymentIntents := paymentintent.Client{B: b, Key: "sk_test_example"}

	charge := func() (*stripe.PaymentIntent, error) {
		p := &stripe.PaymentIntentParams{
			Amount:        stripe.Int64(2000),
			Currency:      stripe.String("eur"),
			PaymentMethod: stripe.String(stripetest.PaymentMethodVisa),
			Confirm:       stripe.Bool(true),
		}
		p.SetIdempotencyKey("order-42")
		return paymentIntents.New(p)
	}

	srv.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Path: "/v1/payment_intents"})
	_, err := charge()
	var se *stripe.Error
	fmt.Println("first attempt lost:", err != nil && !errors.As(err, &se))

	pi, err := charge()
	if err != nil {
		panic(err)
	}
	fmt.Println("retry:", pi.Status, "replayed:", pi.LastResponse.Header.Get("Idempotent-Replayed"))
	fmt.Printf("%+v\n", srv.CountsByIdempotencyKey("order-42"))
	fmt.Printf("%+v\n", srv.Totals()["eur"])
	// Output:
	// first attempt lost: true
	// retry: succeeded replayed: true
	// {PaymentIntents:1 Refunds:0}
	// {Succeeded:2000 Refunded:0 Net:2000}
}
