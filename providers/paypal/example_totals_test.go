package paypal_test

import (
	"context"
	"fmt"
	"time"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// The money PayPal moved in a morning, per currency, for a comparison with the ledger: a
// capture and a partial refund. Transaction Search lags up to 3 hours (the fake is told to
// lag as much), so the window must end at least 3 hours ago to be complete: the reconciler's
// DriftLag must be 3h or more for PayPal.
func ExampleProvider_Totals() {
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := paypaltest.NewManualClock(day.Add(9 * time.Hour))
	srv := paypaltest.NewServer(&paypaltest.Config{Clock: clock.Now, SearchLag: paypal.SearchLag})
	defer srv.Close()
	p, err := paypal.New(&paypal.Config{ClientID: paypaltest.DefaultClientID, Secret: paypaltest.DefaultSecret,
		BaseURL: srv.URL(), Clock: clock.Now})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	ch, err := p.Charge(ctx, provider.ChargeRequest{Key: "order-7",
		ProviderKey: provider.DeriveKey("order-7", "charge", 1, paypal.MaxProviderKeyLen),
		Amount:      money.MustParse("50.00", money.EUR), PaymentMethod: paypaltest.PaymentMethodVisa})
	if err != nil {
		panic(err)
	}
	if _, err := p.Refund(ctx, provider.RefundRequest{Key: "order-7-refund", ChargeID: ch.ProviderID,
		ProviderKey: provider.DeriveKey("order-7-refund", "refund", 1, paypal.MaxProviderKeyLen),
		Amount:      money.MustParse("12.50", money.EUR)}); err != nil {
		panic(err)
	}

	morning := func() {
		totals, err := p.Totals(ctx, day, day.Add(12*time.Hour))
		if err != nil {
			panic(err)
		}
		eur, ok := totals[money.EUR]
		if !ok {
			fmt.Println(clock.Now().Format("15:04"), "nothing in EUR (yet)")
			return
		}
		fmt.Println(clock.Now().Format("15:04"), "charged", eur.Charged, "refunded", eur.Refunded)
	}
	clock.Advance(time.Hour)
	morning() // 10:00: not indexed yet
	clock.Advance(2 * time.Hour)
	morning() // 12:00: 3 hours later
	// Output:
	// 10:00 nothing in EUR (yet)
	// 12:00 charged 50.00 EUR refunded 12.50 EUR
}
