package adyen_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
)

// A charge whose response is lost after Adyen made the payment: the outcome is unknown, the
// retry with the same reference (so the same Idempotency-Key) gets the first answer, and
// exactly one payment exists.
func Example() {
	srv := adyentest.NewServer(nil)
	defer srv.Close()

	p, err := adyen.New(&adyen.Config{
		APIKey:          "AQE_example",
		MerchantAccount: "ShopECOM",
		BaseURL:         srv.URL(),
		ReturnURL:       "https://shop.example/return",
		// Keep-alives off: net/http would otherwise resend the lost request itself (it
		// carries an Idempotency-Key) and hide the lost response.
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	})
	if err != nil {
		panic(err)
	}
	req := provider.ChargeRequest{
		Key:           "order-42",
		ProviderKey:   provider.DeriveKey("order-42", "charge", 0, provider.MaxReferenceLen(p)),
		Amount:        money.MustParse("20.00", money.EUR),
		PaymentMethod: adyentest.PaymentMethodVisa,
		Shopper:       "usr_7fQ9x", // payments fills it from ChargeParams.Shopper or the Scope
	}

	srv.Inject(adyentest.Fault{Kind: adyentest.ResetAfter, Path: "/payments"})
	_, err = p.Charge(context.Background(), req)
	fmt.Println("outcome unknown:", payments.OutcomeUnknown(err), "safe to retry:", idempotency.SafeToRetry(err))

	res, err := p.Charge(context.Background(), req)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, res.Amount, "key:", adyen.IdempotencyKey(req.ProviderKey))
	fmt.Printf("%+v\n", srv.Counts(req.ProviderKey))
	// Output:
	// outcome unknown: true safe to retry: true
	// succeeded 20.00 EUR key: order-42_charge_0
	// {Payments:1 Refunds:0 Captures:0 Cancels:0 Reversals:0}
}
