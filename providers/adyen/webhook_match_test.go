package adyen_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
)

// Adyen's HMAC covers pspReference, originalReference, merchantAccountCode, merchantReference,
// value, currency, eventCode and success, not additionalData: a notification whose
// metadata.payonce_key was rewritten still verifies. The event must then carry nothing from the
// metadata that payments could match an intent by (WebhookEvent.Key); only the signed fields
// identify what it is about.
func TestVerifyWebhookNeverMatchesOnUnsignedMetadata(t *testing.T) {
	t.Parallel()
	p := verifier(t, newKey)
	it := adyentest.NotificationItem{
		Amount: adyentest.Amount{Currency: "EUR", Value: 2000}, EventCode: "AUTHORISATION", EventDate: "2026-03-01T12:00:00Z",
		MerchantAccountCode: merchant, MerchantReference: "someone-elses-order", PSPReference: "PSP_OTHER_000001", Success: "true",
	}
	sig := must(adyentest.Sign(it, newKey))(t)
	// Signed as Adyen signed it, then the unsigned additionalData names another intent.
	it.AdditionalData = map[string]string{"hmacSignature": sig, "metadata." + adyen.MetadataKey: "cus_1_charge_victim"}
	body := must(json.Marshal(adyentest.Notification{Live: "false",
		NotificationItems: []adyentest.NotificationEntry{{NotificationRequestItem: it}}}))(t)

	evs := must(p.VerifyWebhook(context.Background(), nil, body))(t)
	if len(evs) != 1 {
		t.Fatalf("%d events", len(evs))
	}
	ev := evs[0]
	if ev.Key != "" {
		t.Fatalf("event Key %q comes from unsigned metadata: payments would settle that intent with it", ev.Key)
	}
	if ev.Kind != provider.EventChargeSucceeded || ev.Reference != "someone-elses-order" || ev.ProviderID != "PSP_OTHER_000001" {
		t.Fatalf("signed fields not carried: %+v", ev)
	}
}
