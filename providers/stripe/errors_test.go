package stripe_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// Stripe caches the answer of a request whose execution began and replays
// it, marked Idempotent-Replayed, to the same key; a validation failure is
// not cached. The adapter says which refusal is which: payments settles a
// resumed attempt only on a replayed one.
func TestRefusalSaysWhetherReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	ch := must(b.p.Charge(ctx, chargeReq("order-replayed", stripetest.PaymentMethodVisa)))(t)
	full := provider.RefundRequest{Key: "refund-all", ProviderKey: "refund-all_refund_0", ChargeID: ch.ProviderID, Amount: eur("20.00")}
	must(b.p.Refund(ctx, full))(t)

	// Executed and refused (nothing left to refund): cached for the key.
	late := provider.RefundRequest{Key: "refund-late", ProviderKey: "refund-late_refund_0", ChargeID: ch.ProviderID, Amount: eur("5.00")}
	_, err := b.p.Refund(ctx, late)
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Code != "charge_already_refunded" || ie.Replayed {
		t.Fatalf("first refusal: %+v, want charge_already_refunded, not replayed", ie)
	}
	_, err = b.p.Refund(ctx, late)
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Code != "charge_already_refunded" || !ie.Replayed {
		t.Fatalf("the same key again: %+v, want Stripe's replay of its refusal", ie)
	}

	// Refused before executing (no such PaymentIntent): never cached, so
	// never marked.
	missing := provider.RefundRequest{Key: "refund-missing", ProviderKey: "refund-missing_refund_0", ChargeID: "pi_missing", Amount: eur("5.00")}
	for i := range 2 {
		_, err = b.p.Refund(ctx, missing)
		if ie := errAs[*provider.InvalidRequestError](t, err); ie.Replayed {
			t.Fatalf("refusal %d of a refund of no PaymentIntent: %+v, want it not replayed", i, ie)
		}
	}
}

// Stripe's idempotency_error quotes the Idempotency-Key, which holds
// payonce's key: neither the error's text nor its Message may.
func TestKeyMismatchHoldsNoKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	req := chargeReq("usr_secret_charge_order-7f3a9c", stripetest.PaymentMethodVisa)
	must(b.p.Charge(ctx, req))(t)
	req.Description = "another description"
	_, err := b.p.Charge(ctx, req)
	km := errAs[*provider.KeyMismatchError](t, err)
	if !errors.Is(err, provider.ErrKeyMismatch) || !strings.Contains(km.Message, "same parameters") {
		t.Fatalf("%v, want a key mismatch on the parameters", err)
	}
	for _, text := range []string{err.Error(), km.Message} {
		if strings.Contains(text, req.Key) || strings.Contains(text, req.ProviderKey) || strings.Contains(text, "order-7f3a9c") {
			t.Fatalf("the error holds the key: %q", text)
		}
	}
}
