package adyen_test

import (
	"context"
	"testing"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen/adyentest"
)

// Adyen cannot tell a charge's refunds through the notifications of its reference: Lookup
// WithRefunds finds the charge and leaves RefundsKnown false, although two refunds succeeded
// and one failed (their notifications are stored, under the refunds' own references).
func TestLookupWithRefundsIsUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	req := chargeReq("order-lr", adyentest.PaymentMethodVisa)
	ch := must(b.p.Charge(ctx, req))(t)
	var refundRefs []string
	for i, amount := range []string{"5.00", "3.00", "15.00"} { // the third exceeds what is left: it fails
		ref := provider.DeriveKey("order-lr", "refund", i, 80)
		refundRefs = append(refundRefs, ref)
		must(b.p.Refund(ctx, provider.RefundRequest{Key: "order-lr", ProviderKey: ref, ChargeID: ch.ProviderID, Amount: eur(amount)}))(t)
	}
	b.wait(t)
	for i, want := range []provider.EventKind{provider.EventRefundSucceeded, provider.EventRefundSucceeded, provider.EventRefundFailed} {
		evs := b.inbox.byReference(refundRefs[i])
		if len(evs) != 1 || evs[0].Kind != want || evs[0].ChargeID != ch.ProviderID {
			t.Fatalf("refund %d: events %+v, want one %s of %s", i, evs, want, ch.ProviderID)
		}
	}
	if tot := b.srv.Totals()["EUR"]; tot.Refunded != 800 {
		t.Fatalf("the fake's totals %+v, want 8.00 refunded", tot)
	}

	for _, with := range []bool{true, false} {
		got := must(b.p.Lookup(ctx, provider.LookupRequest{Key: req.Key, ProviderKey: req.ProviderKey, WithRefunds: with}))(t)
		if len(got.Charges) != 1 || got.Charges[0].ProviderID != ch.ProviderID || got.Charges[0].Status != provider.ChargeSucceeded {
			t.Fatalf("WithRefunds %v: %+v", with, got)
		}
		if c := got.Charges[0]; c.RefundsKnown || c.Refunded != (money.Money{}) {
			t.Fatalf("WithRefunds %v: %+v, want refunds unknown", with, c)
		}
	}
}

// Lookup keeps one result per payment, even with duplicate deliveries, and several payments
// when a reference was (wrongly) used under two keys.
func TestLookupDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t, &adyentest.Config{DuplicateWebhooks: 2})
	ctx := context.Background()
	req := chargeReq("order-dup", adyentest.PaymentMethodVisa)
	res := must(b.p.Charge(ctx, req))(t)
	got := b.lookup(t, req)
	if len(got.Charges) != 1 || got.Charges[0].ProviderID != res.ProviderID {
		t.Fatalf("lookup: %+v", got)
	}
	if n := len(b.inbox.byReference(req.ProviderKey)); n != 3 {
		t.Fatalf("%d deliveries of the AUTHORISATION, want 3", n)
	}
	none := must(b.p.Lookup(ctx, provider.LookupRequest{Key: "x", ProviderKey: "nothing_charge_0"}))(t)
	if len(none.Charges) != 0 || none.Charges == nil {
		t.Fatalf("lookup of nothing: %+v", none)
	}
}
