package payments_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// The README's Charge and Refund, run against the Stripe fake: a charge
// retried with its key is charged once; a decline is final; a refund never
// goes beyond the charge.
func Example_chargeAndRefund() {
	ctx := context.Background()
	pool, done := pgtest.ExamplePool(ctx) // a fresh, migrated schema of TEST_DATABASE_URL
	defer done()
	fake := stripetest.NewServer(nil) // Stripe's behaviour, in-process
	defer fake.Close()

	prov, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_readme", BaseURL: fake.URL()})
	if err != nil {
		panic(err)
	}
	client, err := payments.New(pool, []provider.Provider{prov}, nil) // builds its store and ledger on pool
	if err != nil {
		panic(err)
	}

	charge := func(key, method string) {
		res, err := client.Charge(ctx, payments.ChargeParams{
			Scope: "cus_1", Key: key, Provider: "stripe",
			Amount: money.MustParse("49.99", money.EUR), PaymentMethod: method,
		})
		switch {
		case payments.OutcomeUnknown(err): // the provider's answer was lost: retry with the SAME key, never a new one
			fmt.Println("outcome pending")
		case errors.Is(err, provider.ErrDeclined): // final; every retry gets the same decline
			fmt.Println("declined, replayed:", res.Replayed)
		case idempotency.SafeToRetry(err): // each error answers for itself: not sent, in progress, unknown
			fmt.Println("retry with the same key")
		case err != nil:
			panic(err)
		default:
			fmt.Println(res.Status, res.Amount, res.Currency, "replayed:", res.Replayed)
		}
	}
	charge("order-1001", "pm_card_visa")
	charge("order-1001", "pm_card_visa") // the client's retry
	charge("order-1002", "pm_card_chargeDeclined")
	charge("order-1002", "pm_card_chargeDeclined")

	refund := func(key, amount string) {
		res, err := client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: key, ChargeKey: "order-1001",
			Amount: money.MustParse(amount, money.EUR)})
		switch {
		case errors.Is(err, provider.ErrRefundExceedsCharge): // never beyond the charge, even concurrently
			fmt.Println("refund refused: beyond the charge")
		case err != nil:
			panic(err)
		default:
			fmt.Println("refund", res.Status, res.Amount)
		}
	}
	refund("refund-1", "10.00")
	refund("refund-2", "45.00")
	fmt.Println("PaymentIntents at Stripe:", fake.CountsByMetadata(paystripe.MetadataKey, "cus_1_charge_order-1001").PaymentIntents)
	// Output:
	// SUCCEEDED 49.99 EUR replayed: false
	// SUCCEEDED 49.99 EUR replayed: true
	// declined, replayed: false
	// declined, replayed: true
	// refund SUCCEEDED 10.00
	// refund refused: beyond the charge
	// PaymentIntents at Stripe: 1
}
