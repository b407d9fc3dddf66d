package payments_test

import (
	"context"
	"maps"
	"testing"

	"github.com/payonce/payonce/payments"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
)

// Adyen signs pspReference, originalReference, merchantAccountCode, merchantReference, value,
// currency, eventCode and success; additionalData (and the metadata echoed in it) is outside
// the HMAC. A notification whose signed fields name no intent of ours (a payment made outside
// payonce) or another one, and whose unsigned metadata.payonce_key names a victim's open
// intent, must not settle the victim: only signed fields identify an intent.
func TestAdyenEventNeverSettlesTheIntentItsUnsignedMetadataNames(t *testing.T) {
	t.Parallel()
	r := pvWebhookRig(t, "adyen", 0)
	ctx := context.Background()
	r.in.drop.Store(true) // the victim's own AUTHORISATION never arrives: it stays UNKNOWN
	r.loseCharge(t, "victim", "30.00")
	r.loseCharge(t, "other", "12.00")
	r.wait(t)
	victim := composed(t, "charge", "victim")

	forged := func(it adyentest.NotificationItem, psp, reference string) adyentest.NotificationItem {
		it.PSPReference, it.MerchantReference = psp, reference
		it = adyenResigned(t, it, "true", "") // signed as Adyen signs that (other) payment
		it.AdditionalData = maps.Clone(it.AdditionalData)
		it.AdditionalData["metadata."+adyen.MetadataKey] = victim // unsigned: anyone could have put it there
		return it
	}
	var victimPSP, otherPSP string
	for _, ev := range r.fakes.Adyen.Events() {
		switch ev.Item.MerchantReference {
		case provider.DeriveKey(victim, provider.StepCharge, 0, adyen.MaxReferenceLen):
			victimPSP = ev.Item.PSPReference
		case provider.DeriveKey(composed(t, "charge", "other"), provider.StepCharge, 0, adyen.MaxReferenceLen):
			otherPSP = ev.Item.PSPReference
		}
	}
	if victimPSP == "" || otherPSP == "" {
		t.Fatalf("the fake emitted no AUTHORISATION for the two charges: %+v", r.fakes.Adyen.Events())
	}
	base := adyenItem(t, r.fakes.Adyen, "AUTHORISATION", victimPSP)

	// Signed fields naming nothing of ours.
	if code, body := r.in.post(t, nil, adyenDelivery(t, forged(base, "PSPOUTSIDE000001", "not-a-payonce-reference"))); code != 200 {
		t.Fatalf("delivery answered %d %s", code, body)
	}
	// Signed fields naming the other intent: it settles that one, never the victim.
	other := adyenItem(t, r.fakes.Adyen, "AUTHORISATION", otherPSP)
	if code, body := r.in.post(t, nil, adyenDelivery(t, forged(other, other.PSPReference, other.MerchantReference))); code != 200 {
		t.Fatalf("delivery answered %d %s", code, body)
	}

	in, err := r.client.Intent(ctx, "cus_1", "victim")
	if err != nil || in.Status != payments.IntentUnknown || in.ProviderID != "" {
		t.Fatalf("victim after events naming it only in unsigned metadata: %+v %v, want still UNKNOWN", in, err)
	}
	if e, _ := pvEntries(t, r.pool, victim); e != 0 {
		t.Fatalf("%d ledger entries for the victim, want 0", e)
	}
	if in, err := r.client.Intent(ctx, "cus_1", "other"); err != nil || in.Status != payments.IntentSucceeded || in.ProviderID != otherPSP {
		t.Fatalf("other intent: %+v %v, want SUCCEEDED by its own signed reference", in, err)
	}
	outcomes := r.eventOutcomes(t)
	if got := outcomes["PSPOUTSIDE000001:AUTHORISATION:true"]; got != payments.EventUnmatched {
		t.Fatalf("outside payment's event: outcome %q, want %q (all: %v)", got, payments.EventUnmatched, outcomes)
	}
}
