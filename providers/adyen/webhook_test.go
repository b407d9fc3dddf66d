package adyen_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
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

// signedDelivery returns a delivery of one item signed with hexKey.
func signedDelivery(t *testing.T, it adyentest.NotificationItem, hexKey string) []byte {
	t.Helper()
	sig := must(adyentest.Sign(it, hexKey))(t)
	it.AdditionalData = map[string]string{"hmacSignature": sig}
	return must(json.Marshal(adyentest.Notification{Live: "false", NotificationItems: []adyentest.NotificationEntry{{NotificationRequestItem: it}}}))(t)
}

const (
	oldKey = "00112233445566778899AABBCCDDEEFF00112233445566778899AABBCCDDEEFF"
	newKey = "FFEEDDCCBBAA99887766554433221100FFEEDDCCBBAA99887766554433221100"
)

func verifier(t *testing.T, keys ...string) *adyen.Provider {
	return must(adyen.New(&adyen.Config{APIKey: "k", MerchantAccount: merchant, ReturnURL: "https://r.example", HMACKeys: keys}))(t)
}

func refundItem() adyentest.NotificationItem {
	return adyentest.NotificationItem{
		Amount: adyentest.Amount{Currency: "EUR", Value: 1500}, EventCode: "REFUND", EventDate: "2026-03-01T12:00:00Z",
		MerchantAccountCode: merchant, MerchantReference: "order-r_refund_0", OriginalReference: "PSP_PAYMENT_0001",
		PSPReference: "PSP_REFUND_00001", Success: "true",
	}
}

func TestVerifyWebhookRotationAndTampering(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	body := signedDelivery(t, refundItem(), newKey)

	evs := must(verifier(t, oldKey, newKey).VerifyWebhook(ctx, nil, body))(t)
	ev := evs[0]
	if len(evs) != 1 || ev.ID != "PSP_REFUND_00001:REFUND:true" || ev.Type != "REFUND" || ev.Kind != provider.EventRefundSucceeded ||
		ev.Reference != "order-r_refund_0" || ev.ProviderID != "PSP_REFUND_00001" || ev.ChargeID != "PSP_PAYMENT_0001" ||
		!ev.Amount.Equal(eur("15.00")) || !strings.Contains(string(ev.Body), `"pspReference":"PSP_REFUND_00001"`) {
		t.Fatalf("event %+v", ev)
	}
	must(verifier(t, newKey).VerifyWebhook(ctx, nil, body))(t)
	if _, err := verifier(t, oldKey).VerifyWebhook(ctx, nil, body); !errors.Is(err, provider.ErrWebhookSignature) {
		t.Fatalf("wrong key: %v", err)
	}

	p := verifier(t, newKey)
	for field, edit := range map[string]func(it *adyentest.NotificationItem){
		"pspReference":        func(it *adyentest.NotificationItem) { it.PSPReference = "PSP_FORGED_00001" },
		"originalReference":   func(it *adyentest.NotificationItem) { it.OriginalReference = "PSP_OTHER_000001" },
		"merchantAccountCode": func(it *adyentest.NotificationItem) { it.MerchantAccountCode = "OtherMerchant" },
		"merchantReference":   func(it *adyentest.NotificationItem) { it.MerchantReference = "order-x_refund_0" },
		"amount.value":        func(it *adyentest.NotificationItem) { it.Amount.Value = 150000 },
		"amount.currency":     func(it *adyentest.NotificationItem) { it.Amount.Currency = "USD" },
		"eventCode":           func(it *adyentest.NotificationItem) { it.EventCode = "CAPTURE" },
		"success":             func(it *adyentest.NotificationItem) { it.Success = "false" },
	} {
		var n adyentest.Notification
		if err := json.Unmarshal(body, &n); err != nil {
			t.Fatal(err)
		}
		edit(&n.NotificationItems[0].NotificationRequestItem)
		tampered := must(json.Marshal(n))(t)
		if _, err := p.VerifyWebhook(ctx, nil, tampered); !errors.Is(err, provider.ErrWebhookSignature) {
			t.Fatalf("tampered %s accepted: %v", field, err)
		}
	}

	unsigned := refundItem()
	noSig := must(json.Marshal(adyentest.Notification{Live: "false", NotificationItems: []adyentest.NotificationEntry{{NotificationRequestItem: unsigned}}}))(t)
	if _, err := p.VerifyWebhook(ctx, nil, noSig); !errors.Is(err, provider.ErrWebhookSignature) {
		t.Fatalf("unsigned: %v", err)
	}
	// One bad item refuses the whole batch.
	good := refundItem()
	good.AdditionalData = map[string]string{"hmacSignature": must(adyentest.Sign(good, newKey))(t)}
	bad := refundItem()
	bad.PSPReference = "PSP_REFUND_00002"
	bad.AdditionalData = map[string]string{"hmacSignature": good.AdditionalData["hmacSignature"]}
	batch := must(json.Marshal(adyentest.Notification{Live: "false", NotificationItems: []adyentest.NotificationEntry{{NotificationRequestItem: good}, {NotificationRequestItem: bad}}}))(t)
	if _, err := p.VerifyWebhook(ctx, nil, batch); !errors.Is(err, provider.ErrWebhookSignature) || !strings.Contains(err.Error(), "notificationItems[1]") {
		t.Fatalf("batch with a bad item: %v", err)
	}
}

func TestVerifyWebhookMalformed(t *testing.T) {
	t.Parallel()
	p := verifier(t, newKey)
	for name, body := range map[string]string{
		"not json":         `notification`,
		"no items":         `{"live":"false","notificationItems":[]}`,
		"items missing":    `{"live":"false"}`,
		"no request item":  `{"live":"false","notificationItems":[{}]}`,
		"item not object":  `{"live":"false","notificationItems":[{"NotificationRequestItem":"x"}]}`,
		"no pspReference":  `{"live":"false","notificationItems":[{"NotificationRequestItem":{"eventCode":"AUTHORISATION","success":"true"}}]}`,
		"no eventCode":     `{"live":"false","notificationItems":[{"NotificationRequestItem":{"pspReference":"P","success":"true"}}]}`,
		"no success":       `{"live":"false","notificationItems":[{"NotificationRequestItem":{"pspReference":"P","eventCode":"REFUND"}}]}`,
		"bad success":      `{"live":"false","notificationItems":[{"NotificationRequestItem":{"pspReference":"P","eventCode":"REFUND","success":"maybe"}}]}`,
		"bad amount value": `{"live":"false","notificationItems":[{"NotificationRequestItem":{"pspReference":"P","eventCode":"REFUND","success":"true","amount":{"currency":"EUR","value":"10"}}}]}`,
	} {
		if _, err := p.VerifyWebhook(context.Background(), nil, []byte(body)); !errors.Is(err, provider.ErrWebhookMalformed) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// A signed item in a currency money does not know.
	it := refundItem()
	it.Amount.Currency = "XXZ"
	if _, err := p.VerifyWebhook(context.Background(), nil, signedDelivery(t, it, newKey)); !errors.Is(err, provider.ErrWebhookMalformed) ||
		!strings.Contains(err.Error(), "amount.currency") {
		t.Fatalf("unknown currency: %v", err)
	}
}

func TestWebhookEventKinds(t *testing.T) {
	t.Parallel()
	p := verifier(t, newKey)
	for _, tc := range []struct {
		code, success string
		want          provider.EventKind
	}{
		{"AUTHORISATION", "true", provider.EventChargeSucceeded},
		{"AUTHORISATION", "false", provider.EventChargeFailed},
		{"REFUND", "true", provider.EventRefundSucceeded},
		{"REFUND", "false", provider.EventRefundFailed},
		{"REFUND_FAILED", "true", provider.EventRefundReversed},
		{"REFUNDED_REVERSED", "true", provider.EventRefundReversed},
		{"CAPTURE", "true", provider.EventCaptureSucceeded},
		{"CAPTURE", "false", provider.EventCaptureFailed},
		{"CAPTURE_FAILED", "true", provider.EventCaptureFailed},
		{"TECHNICAL_CANCEL", "true", provider.EventCancelled},
		{"TECHNICAL_CANCEL", "false", provider.EventCancelFailed},
		{"CANCELLATION", "true", provider.EventCancelled},
		{"CANCELLATION", "false", provider.EventCancelFailed},
		{"CANCEL_OR_REFUND", "true", provider.EventCancelled},
		{"CANCEL_OR_REFUND", "false", provider.EventCancelFailed},
		{"REPORT_AVAILABLE", "true", provider.EventIgnored},
	} {
		it := refundItem()
		it.EventCode, it.Success, it.Reason = tc.code, tc.success, "some reason"
		evs := must(p.VerifyWebhook(context.Background(), nil, signedDelivery(t, it, newKey)))(t)
		if evs[0].Kind != tc.want || evs[0].ID != it.PSPReference+":"+tc.code+":"+tc.success {
			t.Fatalf("%s %s: %+v", tc.code, tc.success, evs[0])
		}
		if (tc.success == "false" || strings.HasSuffix(tc.code, "_FAILED") || tc.code == "REFUNDED_REVERSED") != (evs[0].DeclineCode == "some reason") {
			t.Fatalf("%s %s: DeclineCode %q", tc.code, tc.success, evs[0].DeclineCode)
		}
	}
	// A boolean success (some integrations re-encode) verifies as its string.
	it := refundItem()
	body := string(signedDelivery(t, it, newKey))
	body = strings.Replace(body, `"success":"true"`, `"success":true`, 1)
	must(p.VerifyWebhook(context.Background(), nil, []byte(body)))(t)
}

// The fake's webhooks are refused by the inbox when signed with another key.
func TestFakeDeliveriesWrongKey(t *testing.T) {
	t.Parallel()
	b := setup(t, &adyentest.Config{HMACKey: oldKey})
	must(b.p.Charge(context.Background(), chargeReq("order-wrongkey", adyentest.PaymentMethodVisa)))(t)
	b.wait(t)
	ev := b.srv.Events()
	b.inbox.mu.Lock()
	refused := b.inbox.refused
	b.inbox.mu.Unlock()
	if len(ev) != 1 || ev[0].Delivered != 0 || ev[0].Failed != 1 || refused < 2 || len(b.inbox.all()) != 0 {
		t.Fatalf("events %+v, refused %d", ev, refused)
	}
}
