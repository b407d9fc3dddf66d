package provider_test

import (
	"strings"
	"testing"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

func TestAddMovement(t *testing.T) {
	totals := map[money.Currency]provider.Totals{}
	for _, m := range []struct {
		kind   provider.Movement
		amount string
	}{
		{provider.MovementCharge, "10.00"},
		{provider.MovementCharge, "5.00"},
		{provider.MovementRefund, "-3.00"}, // a refund: money given back
		{provider.MovementRefund, "1.00"},  // a refund's failure: money returned
	} {
		if err := provider.AddMovement(totals, m.kind, money.MustParse(m.amount, money.EUR)); err != nil {
			t.Fatalf("AddMovement(%v, %s): %v", m.kind, m.amount, err)
		}
	}
	got := totals[money.EUR]
	if got.Charged.AmountString() != "15.00" || got.Refunded.AmountString() != "2.00" {
		t.Fatalf("totals = charged %s, refunded %s; want 15.00, 2.00", got.Charged.AmountString(), got.Refunded.AmountString())
	}
	err := provider.AddMovement(totals, provider.Movement(0), money.MustParse("1.00", money.EUR))
	if err == nil || !strings.Contains(err.Error(), "provider.MovementCharge or provider.MovementRefund") {
		t.Fatalf("AddMovement(Movement(0)) = %v, want an error naming the kinds", err)
	}
	if got := totals[money.EUR]; got.Charged.AmountString() != "15.00" {
		t.Fatalf("a bad kind changed the totals: charged %s", got.Charged.AmountString())
	}
}
