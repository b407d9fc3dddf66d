package payments_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	paystripe "github.com/payonce/payonce/providers/stripe"
)

// Stripe does not use a Recipient, so a charge without one goes through,
// and the charge at Stripe carries the composed key that ChargeKey gives
// under payonce_key: a user searching Stripe by ChargeKey finds it.
func TestChargeWithoutRecipientWhereTheProviderUsesNone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	out, err := b.client.Charge(ctx, payments.ChargeParams{Scope: "cust_1", Key: "order-3", Provider: "stripe",
		Amount: eur(t, "12.00"), PaymentMethod: "pm_card_visa"})
	if err != nil || out.Status != payments.IntentSucceeded {
		t.Fatalf("a Stripe charge without Recipient: %+v %v", out, err)
	}
	key, err := payments.ChargeKey("cust_1", "order-3")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.fake.CountsByMetadata(paystripe.MetadataKey, key); got.PaymentIntents != 1 {
		t.Fatalf("PaymentIntents with %s=%q: %d, want 1", paystripe.MetadataKey, key, got.PaymentIntents)
	}
	if got := b.fake.CountsByMetadata(paystripe.MetadataKey, "order-3"); got.PaymentIntents != 0 {
		t.Fatalf("PaymentIntents under the client's own key: %d, want 0 (ChargeKey's doc says so)", got.PaymentIntents)
	}
}

// routing is a provider that sends the charge to ChargeRequest.Recipient.
type routing struct{ provider.Provider }

func (routing) RequiresRecipient() bool { return true }

// A provider that routes charges to a Recipient refuses a charge without
// one before anything is recorded or sent, naming the field and the
// provider; with one, the charge goes through.
func TestChargeWithoutRecipientWhereTheProviderRoutesToOne(t *testing.T) {
	t.Parallel()
	b := setupStripe(t, nil, func(p provider.Provider) provider.Provider { return routing{p} }, nil)
	ctx := context.Background()
	p := payments.ChargeParams{Scope: "cust_1", Key: "order-4", Provider: "stripe", Amount: eur(t, "12.00"),
		PaymentMethod: "pm_card_visa"}
	_, err := b.client.Charge(ctx, p)
	var ce *payments.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Recipient" || !strings.Contains(err.Error(), `required by provider "stripe"`) {
		t.Fatalf("a charge without Recipient through a provider that routes to one: %v; want *payments.ConfigError naming Recipient and the provider", err)
	}
	if _, err := b.client.Intent(ctx, "cust_1", "order-4"); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("intent after the refusal: %v; want none recorded", err)
	}
	if got := b.fake.CountsByIdempotencyKey(provider.DeriveKey("cust_1_charge_order-4", provider.StepCharge, 0, 255)); got.PaymentIntents != 0 {
		t.Fatalf("PaymentIntents after the refusal: %d, want 0", got.PaymentIntents)
	}
	p.Recipient = "acct_shop"
	if out, err := b.client.Charge(ctx, p); err != nil || out.Status != payments.IntentSucceeded {
		t.Fatalf("the same charge with a Recipient: %+v %v", out, err)
	}
}
