package stripe_test

import (
	"context"
	"fmt"
	"time"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// The money Stripe's balance moved in a day, per currency, for a
// comparison with the ledger: a charge, a partial refund, and a refund
// that failed later (its money came back).
func ExampleProvider_Totals() {
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := stripetest.NewManualClock(day.Add(9 * time.Hour))
	srv := stripetest.NewServer(&stripetest.Config{Clock: clock.Now})
	defer srv.Close()
	p, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_example", BaseURL: srv.URL()})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	ch, err := p.Charge(ctx, provider.ChargeRequest{Key: "order-7",
		ProviderKey: provider.DeriveKey("order-7", "charge", 1, paystripe.MaxProviderKeyLen),
		Amount:      money.MustParse("50.00", money.EUR), PaymentMethod: stripetest.PaymentMethodVisa})
	if err != nil {
		panic(err)
	}
	for i, amount := range []string{"10.00", "5.00"} {
		key := fmt.Sprint("order-7-refund-", i)
		re, err := p.Refund(ctx, provider.RefundRequest{Key: key, ChargeID: ch.ProviderID,
			ProviderKey: provider.DeriveKey(key, "refund", 1, paystripe.MaxProviderKeyLen),
			Amount:      money.MustParse(amount, money.EUR)})
		if err != nil {
			panic(err)
		}
		if i == 1 {
			clock.Advance(time.Hour)
			if err := srv.FailRefund(re.ProviderID); err != nil {
				panic(err)
			}
		}
	}

	totals, err := p.Totals(ctx, day, day.AddDate(0, 0, 1))
	if err != nil {
		panic(err)
	}
	eur := totals[money.EUR]
	fmt.Println("charged", eur.Charged, "refunded", eur.Refunded)
	// Output:
	// charged 50.00 EUR refunded 10.00 EUR
}
