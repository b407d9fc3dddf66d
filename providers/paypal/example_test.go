package paypal_test

import (
	"context"
	"fmt"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// A charge whose response is lost after PayPal committed it (the create of an order with a
// payment source captures at once): the outcome is unknown, the retry with the same ProviderKey
// replays the create, and exactly one order and one capture exist.
func Example() {
	srv := paypaltest.NewServer(nil)
	defer srv.Close()

	p, err := paypal.New(&paypal.Config{
		ClientID: paypaltest.DefaultClientID,
		Secret:   paypaltest.DefaultSecret,
		BaseURL:  srv.URL(),
		// Keep-alives off, so that the lost response is seen as lost.
		HTTPClient: srv.Client(),
	})
	if err != nil {
		panic(err)
	}

	req := provider.ChargeRequest{
		Key:           "order-42",
		ProviderKey:   provider.DeriveKey("order-42", "charge", 0, paypal.MaxProviderKeyLen),
		Amount:        money.MustParse("20.00", money.EUR),
		PaymentMethod: paypaltest.PaymentMethodVisa,
		Progress: func(ctx context.Context, orderID string) error {
			fmt.Println("order recorded")
			return nil
		},
	}

	srv.Inject(paypaltest.Fault{Kind: paypaltest.ResetAfter, Path: "/v2/checkout/orders"})
	_, err = p.Charge(context.Background(), req)
	fmt.Println("outcome unknown:", payments.OutcomeUnknown(err), "safe to retry:", idempotency.SafeToRetry(err))

	res, err := p.Charge(context.Background(), req)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, res.Amount, "replayed:", res.Replayed)
	fmt.Printf("%+v\n", srv.CountsByCustomID(req.ProviderKey))
	// Output:
	// outcome unknown: true safe to retry: true
	// order recorded
	// succeeded 20.00 EUR replayed: true
	// {Orders:1 Captures:1 Refunds:0}
}
