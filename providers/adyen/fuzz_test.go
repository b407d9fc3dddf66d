package adyen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/internal/testkit"
)

// fuzzItems returns the signed notification items the fake emits for a
// charge, a declined charge, a partial refund and a reversal, under
// adyentest.DefaultHMACKey.
func fuzzItems(f *testing.F) []adyentest.NotificationItem {
	f.Helper()
	srv := adyentest.NewServer(nil)
	defer srv.Close()
	p, err := adyen.New(&adyen.Config{
		APIKey: "AQE_test_key", MerchantAccount: merchant, BaseURL: srv.URL(), ReturnURL: "https://shop.example/return",
		HTTPClient: &http.Client{Timeout: testkit.Patience, Transport: &http.Transport{DisableKeepAlives: true}},
		HMACKeys:   []string{adyentest.DefaultHMACKey},
	})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	charged := chargeReq("fz-1", adyentest.PaymentMethodVisa)
	ch, err := p.Charge(ctx, charged)
	if err != nil {
		f.Fatal(err)
	}
	declined := chargeReq("fz-2", adyentest.PaymentMethodDeclined)
	_, _ = p.Charge(ctx, declined) // a refusal: its item is what we want
	if _, err := p.Refund(ctx, provider.RefundRequest{Key: "fz-1-r", ProviderKey: "fz-1-r", ChargeID: ch.ProviderID, Amount: testkit.EUR("3.00")}); err != nil {
		f.Fatal(err)
	}
	// A reversal of the captured payment, and a technical cancel of the refused one.
	if err := p.Void(ctx, provider.VoidRequest{Key: "fz-1", ProviderKey: charged.ProviderKey, ProviderID: ch.ProviderID}); err != nil {
		f.Fatal(err)
	}
	if err := p.Void(ctx, provider.VoidRequest{Key: "fz-2", ProviderKey: declined.ProviderKey}); err != nil {
		f.Fatal(err)
	}
	var items []adyentest.NotificationItem
	for _, ev := range srv.Events() {
		items = append(items, ev.Item)
	}
	if len(items) < 4 {
		f.Fatalf("the fake emitted %d items, want at least 4", len(items))
	}
	return items
}

// fuzzDelivery is a delivery of items, as the fake POSTs it.
func fuzzDelivery(t testing.TB, items ...adyentest.NotificationItem) []byte {
	n := adyentest.Notification{Live: "false"}
	for _, it := range items {
		n.NotificationItems = append(n.NotificationItems, adyentest.NotificationEntry{NotificationRequestItem: it})
	}
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fuzzVerifier(tb testing.TB, keys ...string) *adyen.Provider {
	p, err := adyen.New(&adyen.Config{APIKey: "k", MerchantAccount: merchant, ReturnURL: "https://r.example", HMACKeys: keys})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

var knownKinds = map[provider.EventKind]bool{
	provider.EventChargeSucceeded: true, provider.EventChargeFailed: true, provider.EventChargePending: true,
	provider.EventRefundSucceeded: true, provider.EventRefundFailed: true, provider.EventRefundReversed: true, provider.EventCaptureSucceeded: true,
	provider.EventCaptureFailed: true, provider.EventCancelled: true, provider.EventCancelFailed: true,
	provider.EventIgnored: true,
}

// verifyTwice verifies body twice and fails t unless both answers are the
// same, and unless the error (if any) is exactly one of a signature error
// and a malformed body, with no events.
func verifyTwice(t *testing.T, p *adyen.Provider, body []byte) ([]provider.WebhookEvent, error) {
	t.Helper()
	evs, err := p.VerifyWebhook(context.Background(), nil, body)
	evs2, err2 := p.VerifyWebhook(context.Background(), nil, body)
	if !reflect.DeepEqual(evs, evs2) || (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
		t.Fatalf("not deterministic: %v, %v then %v, %v", evs, err, evs2, err2)
	}
	if err != nil && (evs != nil || errors.Is(err, provider.ErrWebhookSignature) == errors.Is(err, provider.ErrWebhookMalformed)) {
		t.Fatalf("refusal %v with events %v: want a signature error or a malformed body, and no events", err, evs)
	}
	return evs, err
}

// checkEvents fails t unless evs are one well-formed event per item of body.
func checkEvents(t *testing.T, evs []provider.WebhookEvent, body []byte) {
	t.Helper()
	var n struct {
		NotificationItems []json.RawMessage `json:"notificationItems"`
	}
	if err := json.Unmarshal(body, &n); err != nil || len(evs) != len(n.NotificationItems) {
		t.Fatalf("%d events from a delivery of %d items (%v)", len(evs), len(n.NotificationItems), err)
	}
	for _, ev := range evs {
		if ev.ID != ev.ProviderID+":"+ev.Type+":true" && ev.ID != ev.ProviderID+":"+ev.Type+":false" ||
			ev.ProviderID == "" || ev.Type == "" || !knownKinds[ev.Kind] || !json.Valid(ev.Body) {
			t.Fatalf("event %+v (Body %s)", ev, ev.Body)
		}
		if ev.Kind == provider.EventCancelFailed && ev.DeclineCode == "" {
			t.Fatalf("a failed cancellation without a reason: %+v", ev)
		}
	}
}

// FuzzVerifyWebhookBody: whatever the body, verification is deterministic,
// refuses as exactly one of a signature error and a malformed body, accepts
// one well-formed event per item, and a verifier holding only another key
// never accepts it.
func FuzzVerifyWebhookBody(f *testing.F) {
	p := fuzzVerifier(f, "00112233445566778899AABBCCDDEEFF00112233445566778899AABBCCDDEEFF", adyentest.DefaultHMACKey)
	other := fuzzVerifier(f, "FFEEDDCCBBAA99887766554433221100FFEEDDCCBBAA99887766554433221100")
	items := fuzzItems(f)
	all := fuzzDelivery(f, items...)
	if evs, err := p.VerifyWebhook(context.Background(), nil, all); err != nil || len(evs) != len(items) {
		f.Fatalf("the fake's delivery: %d events, %v", len(evs), err)
	}
	f.Add(all)
	for _, it := range items {
		body := fuzzDelivery(f, it)
		f.Add(body)
		f.Add(body[:len(body)/2])
		f.Add(bytes.Replace(body, []byte(`"value":`), []byte(`"value":1`), 1))
		f.Add(bytes.Replace(body, []byte(`"success":"true"`), []byte(`"success":true`), 1))
		f.Add(bytes.Replace(body, []byte(`"success":"false"`), []byte(`"success":"true"`), 1))
		f.Add(bytes.Replace(body, []byte(`"hmacSignature":"`), []byte(`"hmacSignature":"A`), 1))
		f.Add(bytes.Replace(body, []byte(`"currency":"EUR"`), []byte(`"currency":"EUX"`), 1))
		f.Add(bytes.Replace(body, []byte(`"pspReference"`), []byte(`"PSPReference"`), 1))
	}
	for _, body := range []string{
		``, `null`, `[]`, `{}`, `{"notificationItems":null}`, `{"notificationItems":[null]}`,
		`{"live":"false","notificationItems":[{"NotificationRequestItem":null}]}`,
		`{"live":"false","notificationItems":[{"NotificationRequestItem":{"pspReference":"P","eventCode":"REFUND","success":"maybe"}}]}`,
		`{"live":"false","notificationItems":[{"NotificationRequestItem":{"pspReference":"P","eventCode":"REFUND","success":"true","amount":{"currency":"EUR","value":"10"}}}]}`,
		`{"live":"false","notificationItems":[{"NotificationRequestItem":{"pspReference":"P","eventCode":"REFUND","success":"true","additionalData":{"hmacSignature":"` + strings.Repeat("A", 44) + `"}}}]}`,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := verifyTwice(t, p, body)
		if err == nil {
			checkEvents(t, evs, body)
		}
		if evs, err := verifyTwice(t, other, body); err == nil {
			t.Fatalf("accepted under a key that signed nothing: %+v", evs)
		}
	})
}

// wellFormed reports whether the adapter reads it as an item (signed or not).
func wellFormed(it adyentest.NotificationItem) bool {
	return it.PSPReference != "" && it.EventCode != "" && (it.Success == "true" || it.Success == "false")
}

// roundTrip is it as the adapter reads it back from JSON (strings that are
// not UTF-8 come back changed): what a signature can cover.
func roundTrip(t *testing.T, it adyentest.NotificationItem) adyentest.NotificationItem {
	b, err := json.Marshal(it)
	if err != nil {
		t.Fatal(err)
	}
	var out adyentest.NotificationItem
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzVerifyWebhookSignedItem: an item signed with the configured key, as
// the fake signs it, is accepted with the fields it carries, or refused as
// malformed; the same item with one signed field changed and not re-signed
// is refused, as a signature error when it is still well formed.
func FuzzVerifyWebhookSignedItem(f *testing.F) {
	p := fuzzVerifier(f, adyentest.DefaultHMACKey)
	for i, it := range fuzzItems(f) {
		f.Add(it.PSPReference, it.OriginalReference, it.MerchantAccountCode, it.MerchantReference, it.Amount.Value,
			it.Amount.Currency, it.EventCode, it.Success, it.Reason, it.AdditionalData["metadata."+adyen.MetadataKey], uint8(i), "x")
	}
	for _, code := range []string{"REFUND_FAILED", "CAPTURE", "CAPTURE_FAILED", "CANCELLATION", "REPORT_AVAILABLE"} {
		f.Add("PSP_MODIFICATION_1", "PSP_PAYMENT_0001", merchant, "order-1", int64(1500), "EUR", code, "true", "not enough balance", "k", uint8(6), code)
	}
	f.Add("P", "", "M", "order:1", int64(-1), "", "CANCEL_OR_REFUND", "true", "", "k", uint8(3), "order")
	f.Add("P:Q", "", "", "", int64(0), "EUR", "REFUND", "false", "why", "", uint8(0), "P")
	f.Add("P", "O", "M", "R", int64(1)<<62, "JPY", "TECHNICAL_CANCEL", "false", "", "", uint8(4), "\xff")
	f.Add("", "", "", "", int64(0), "", "", "", "", "", uint8(7), "true")
	f.Fuzz(func(t *testing.T, psp, orig, account, ref string, value int64, currency, eventCode, success, reason, key string,
		field uint8, edit string) {
		it := roundTrip(t, adyentest.NotificationItem{
			AdditionalData: map[string]string{"metadata." + adyen.MetadataKey: key},
			Amount:         adyentest.Amount{Currency: currency, Value: value}, EventCode: eventCode, EventDate: "2026-03-01T12:00:00Z",
			MerchantAccountCode: account, MerchantReference: ref, OriginalReference: orig, PSPReference: psp,
			Reason: reason, Success: success,
		})
		sig, err := adyentest.Sign(it, adyentest.DefaultHMACKey)
		if err != nil {
			t.Fatal(err)
		}
		it.AdditionalData["hmacSignature"] = sig

		evs, err := verifyTwice(t, p, fuzzDelivery(t, it))
		switch {
		case err != nil && !errors.Is(err, provider.ErrWebhookMalformed):
			t.Fatalf("a signed item refused: %v", err)
		case err != nil && wellFormed(it) && (currency == "" || currency == "EUR" && value >= 0 && value < 1e15):
			t.Fatalf("a signed, well formed item with a readable amount refused: %v", err)
		case err == nil:
			ev := evs[0]
			if len(evs) != 1 || ev.ID != it.PSPReference+":"+it.EventCode+":"+it.Success || ev.Type != it.EventCode || ev.ProviderID != it.PSPReference ||
				ev.Reference != it.MerchantReference || ev.ChargeID != it.OriginalReference || ev.Key != "" ||
				!knownKinds[ev.Kind] {
				t.Fatalf("events %+v from %+v", evs, it)
			}
			switch ev.Kind {
			case provider.EventChargeSucceeded, provider.EventChargePending, provider.EventRefundSucceeded, provider.EventCaptureSucceeded:
				if ev.DeclineCode != "" || it.Success != "true" {
					t.Fatalf("a success from %q with decline code %q", it.Success, ev.DeclineCode)
				}
			}
		}

		// One signed field changed, not re-signed.
		tampered := it
		tampered.AdditionalData = map[string]string{"hmacSignature": sig}
		switch field % 8 {
		case 0:
			tampered.PSPReference = edit
		case 1:
			tampered.OriginalReference = edit
		case 2:
			tampered.MerchantAccountCode = edit
		case 3:
			tampered.MerchantReference = edit
		case 4:
			tampered.Amount.Value = value + 1 + int64(len(edit))
			if n, err := strconv.ParseInt(edit, 10, 64); err == nil {
				tampered.Amount.Value = n
			}
		case 5:
			tampered.Amount.Currency = edit
		case 6:
			tampered.EventCode = edit
		case 7:
			tampered.Success = edit
		}
		tampered = roundTrip(t, tampered)
		if tampered.SigningString() == it.SigningString() {
			// Unchanged, or a ':' moved between two fields: Adyen's signing string does not
			// escape its separator, so the signature covers both alike.
			return
		}
		evs, err = verifyTwice(t, p, fuzzDelivery(t, tampered))
		switch {
		case err == nil:
			t.Fatalf("a tampered item accepted: %+v signed as %+v (events %+v)", tampered, it, evs)
		case wellFormed(tampered) && !errors.Is(err, provider.ErrWebhookSignature):
			t.Fatalf("a well formed tampered item refused as other than a signature error: %v", err)
		}
		// A signed item next to the tampered one does not make the delivery pass.
		if wellFormed(it) && wellFormed(tampered) {
			if _, err := verifyTwice(t, p, fuzzDelivery(t, it, tampered)); !errors.Is(err, provider.ErrWebhookSignature) {
				t.Fatalf("a delivery with a tampered second item: %v", err)
			}
		}
	})
}
