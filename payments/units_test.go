package payments_test

import (
	"context"
	"errors"
	"testing"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// Amounts a provider cannot represent in its own units (Stripe: a
// three-decimal currency's amounts end in 0) are refused before anything
// is recorded: no intent, no reservation on the charge, nothing at the
// provider.
func TestUnrepresentableAmountsRecordNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	kwd := func(s string) money.Money { return money.MustParse(s, money.Currency("KWD")) }
	bad := payments.ChargeParams{Scope: "cus_1", Key: "kwd-bad", Provider: "stripe", Amount: kwd("1.235"),
		Recipient: "acct_shop", PaymentMethod: stripetest.PaymentMethodVisa}
	if _, err := b.client.Charge(ctx, bad); !errors.Is(err, provider.ErrInvalidRequest) {
		t.Fatalf("1.235 KWD: %v, want an invalid request", err)
	}
	good := bad
	good.Key, good.Amount = "kwd-good", kwd("10.000")
	if _, err := b.client.Charge(ctx, good); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: "kwd-refund", ChargeKey: "kwd-good", Amount: kwd("1.005")}); !errors.Is(err, provider.ErrInvalidRequest) {
		t.Fatalf("refund of 1.005 KWD: %v, want an invalid request", err)
	}
	var intents int
	var reserved string
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM payment_intents`).Scan(&intents); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.QueryRow(ctx, `SELECT refund_reserved::text FROM payment_intents WHERE kind = 'CHARGE'`).Scan(&reserved); err != nil {
		t.Fatal(err)
	}
	if intents != 1 || reserved != "0" {
		t.Fatalf("%d intents, %s reserved: the refused requests left something", intents, reserved)
	}
	if n := pis(t, b, "kwd-bad"); n != 0 {
		t.Fatalf("%d PaymentIntents for the refused charge", n)
	}
}
