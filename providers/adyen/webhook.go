package adyen

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
)

// ErrNoHMACKey is returned by [Provider.VerifyWebhook] without Config.HMACKeys: the delivery
// cannot be checked, and should be answered 5xx so that Adyen sends it again once configured.
var ErrNoHMACKey = errors.New("adyen: no webhook HMAC key configured (Config.HMACKeys)")

// notification is a webhook delivery's body. Items stay raw: each one's JSON is kept as the
// event's evidence.
type notification struct {
	Live              json.RawMessage `json:"live"`
	NotificationItems []struct {
		Item json.RawMessage `json:"NotificationRequestItem"`
	} `json:"notificationItems"`
}

// notificationItem is one NotificationRequestItem.
type notificationItem struct {
	AdditionalData      map[string]string `json:"additionalData"`
	Amount              *Amount           `json:"amount"`
	EventCode           string            `json:"eventCode"`
	MerchantAccountCode string            `json:"merchantAccountCode"`
	MerchantReference   string            `json:"merchantReference"`
	OriginalReference   string            `json:"originalReference"`
	PSPReference        string            `json:"pspReference"`
	Reason              string            `json:"reason"`
	Success             flag              `json:"success"`
}

// flag is Adyen's success: the string "true" or "false" (a JSON boolean is accepted too). It
// keeps the text signed.
type flag struct {
	text string
	set  bool
}

func (f *flag) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"true"`, `true`:
		*f = flag{"true", true}
	case `"false"`, `false`:
		*f = flag{"false", true}
	default:
		return fmt.Errorf("success is %s, want \"true\" or \"false\"", b)
	}
	return nil
}

func (it *notificationItem) signingString() string {
	var a Amount
	if it.Amount != nil {
		a = *it.Amount
	}
	return strings.Join([]string{it.PSPReference, it.OriginalReference, it.MerchantAccountCode, it.MerchantReference,
		strconv.FormatInt(a.Value, 10), a.Currency, it.EventCode, it.Success.text}, ":")
}

// VerifyWebhook authenticates one delivery of Adyen's standard notifications and returns its
// items as events, in order. Adyen signs each item, not the delivery: every item's
// additionalData.hmacSignature must be base64(HMAC-SHA256(key, signing string)) under one of
// Config.HMACKeys (hex-decoded; several during a rotation), compared in constant time, where
// the signing string is
// "pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success"
// (empty for absent fields). One bad item refuses the whole delivery. header is not used.
//
// Events: ID "pspReference:eventCode:success" (Adyen's dedup key), Type the eventCode,
// Reference the merchantReference, ProviderID the pspReference, ChargeID the
// originalReference, Amount the amount, DeclineCode the reason of a failure, Key the
// metadata.payonce_key Adyen echoes in additionalData, Body the item's JSON. Kinds:
//
//	AUTHORISATION success / failure       EventChargeSucceeded / EventChargeFailed
//	REFUND success / failure              EventRefundSucceeded / EventRefundFailed
//	REFUND_FAILED                         EventRefundFailed (a refund failed after success)
//	CAPTURE success / failure             EventCaptureSucceeded / EventCaptureFailed
//	CAPTURE_FAILED                        EventCaptureFailed
//	TECHNICAL_CANCEL, CANCELLATION ok     EventCancelled
//	TECHNICAL_CANCEL, CANCELLATION failed EventCancelFailed (DeclineCode = reason)
//	anything else                         EventIgnored
//
// Errors: wrapping [payments.ErrWebhookSignature] when an item's signature is missing or
// matches no key; wrapping [payments.ErrWebhookMalformed] when the body is not a delivery of
// well-formed items; [ErrNoHMACKey].
func (p *Provider) VerifyWebhook(ctx context.Context, header http.Header, body []byte) ([]payments.WebhookEvent, error) {
	if len(p.hmacKeys) == 0 {
		return nil, ErrNoHMACKey
	}
	var n notification
	if err := json.Unmarshal(body, &n); err != nil {
		return nil, fmt.Errorf("adyen: %w: %v", payments.ErrWebhookMalformed, err)
	}
	if len(n.NotificationItems) == 0 {
		return nil, fmt.Errorf("adyen: %w: no notificationItems", payments.ErrWebhookMalformed)
	}
	items := make([]notificationItem, len(n.NotificationItems))
	for i, wrapped := range n.NotificationItems {
		if len(wrapped.Item) == 0 || bytes.Equal(wrapped.Item, []byte("null")) {
			return nil, fmt.Errorf("adyen: %w: notificationItems[%d] has no NotificationRequestItem", payments.ErrWebhookMalformed, i)
		}
		it := &items[i]
		if err := json.Unmarshal(wrapped.Item, it); err != nil {
			return nil, fmt.Errorf("adyen: %w: notificationItems[%d]: %v", payments.ErrWebhookMalformed, i, err)
		}
		switch {
		case it.PSPReference == "":
			return nil, fmt.Errorf("adyen: %w: notificationItems[%d] has no pspReference", payments.ErrWebhookMalformed, i)
		case it.EventCode == "":
			return nil, fmt.Errorf("adyen: %w: notificationItems[%d] has no eventCode", payments.ErrWebhookMalformed, i)
		case !it.Success.set:
			return nil, fmt.Errorf("adyen: %w: notificationItems[%d] has no success", payments.ErrWebhookMalformed, i)
		}
	}
	// Signatures before anything else is interpreted: an unsigned item tells nothing.
	for i := range items {
		if !p.signed(&items[i]) {
			return nil, fmt.Errorf("adyen: %w: notificationItems[%d] (pspReference %s, %s)", payments.ErrWebhookSignature, i,
				items[i].PSPReference, items[i].EventCode)
		}
	}
	events := make([]payments.WebhookEvent, len(items))
	for i := range items {
		ev, err := event(&items[i], n.NotificationItems[i].Item)
		if err != nil {
			return nil, fmt.Errorf("adyen: %w: notificationItems[%d]: %v", payments.ErrWebhookMalformed, i, err)
		}
		events[i] = ev
	}
	return events, nil
}

func (p *Provider) signed(it *notificationItem) bool {
	got, err := base64.StdEncoding.DecodeString(it.AdditionalData["hmacSignature"])
	if err != nil || len(got) != sha256.Size {
		return false
	}
	msg := []byte(it.signingString())
	ok := false
	for _, key := range p.hmacKeys {
		mac := hmac.New(sha256.New, key)
		mac.Write(msg)
		// Every key is tried, whatever matched: the time taken does not tell which key signed.
		if hmac.Equal(mac.Sum(nil), got) {
			ok = true
		}
	}
	return ok
}

func event(it *notificationItem, raw json.RawMessage) (payments.WebhookEvent, error) {
	ev := payments.WebhookEvent{
		ID:         it.PSPReference + ":" + it.EventCode + ":" + it.Success.text,
		Type:       it.EventCode,
		Reference:  it.MerchantReference,
		Key:        it.AdditionalData["metadata."+MetadataKey],
		ProviderID: it.PSPReference,
		ChargeID:   it.OriginalReference,
		Body:       append(json.RawMessage(nil), raw...),
	}
	if it.Amount != nil && it.Amount.Currency != "" {
		c, err := money.ParseCurrency(it.Amount.Currency)
		if err != nil {
			return ev, fmt.Errorf("amount.currency: %v", err)
		}
		if ev.Amount, err = money.FromMinor(it.Amount.Value, c); err != nil {
			return ev, fmt.Errorf("amount.value: %v", err)
		}
	}
	ok := it.Success.text == "true"
	if !ok {
		ev.DeclineCode = it.Reason
	}
	switch it.EventCode {
	case "AUTHORISATION":
		ev.Kind = pick(ok, payments.EventChargeSucceeded, payments.EventChargeFailed)
	case "REFUND":
		ev.Kind = pick(ok, payments.EventRefundSucceeded, payments.EventRefundFailed)
	case "REFUND_FAILED":
		ev.Kind, ev.DeclineCode = payments.EventRefundFailed, it.Reason
	case "CAPTURE":
		ev.Kind = pick(ok, payments.EventCaptureSucceeded, payments.EventCaptureFailed)
	case "CAPTURE_FAILED":
		ev.Kind, ev.DeclineCode = payments.EventCaptureFailed, it.Reason
	case "TECHNICAL_CANCEL", "CANCELLATION":
		ev.Kind = pick(ok, payments.EventCancelled, payments.EventCancelFailed)
		if !ok {
			ev.DeclineCode = it.Reason
		}
	default:
		ev.Kind = payments.EventIgnored
	}
	return ev, nil
}

func pick(ok bool, yes, no payments.EventKind) payments.EventKind {
	if ok {
		return yes
	}
	return no
}

var _ payments.WebhookAcknowledger = (*Provider)(nil)

// WebhookAck is the body Adyen's documentation asks an endpoint to answer a
// delivery with, once it has stored it: "[accepted]".
func (p *Provider) WebhookAck() (contentType string, body []byte) {
	return "text/plain", []byte("[accepted]")
}

var _ payments.Voider = (*Provider)(nil)

// Void sends a technical cancel (POST /cancels) for the payment with
// reference req.ProviderKey, with a deterministic Idempotency-Key: Adyen
// cancels the payment if it exists and is cancellable. The outcome comes
// by the TECHNICAL_CANCEL notification (success true: the payment is void;
// false: nothing was cancelled, which proves nothing about a request still
// in flight). Errors: as [Provider.Charge]'s transport and API errors.
func (p *Provider) Void(ctx context.Context, req payments.VoidRequest) error {
	if req.ProviderKey == "" || len(req.ProviderKey) > MaxReferenceLen {
		return &payments.InvalidRequestError{Provider: providerName, Code: "invalid_reference", Param: "ProviderKey",
			Message: fmt.Sprintf("1 to %d characters", MaxReferenceLen)}
	}
	ref := payments.ProviderKey(req.ProviderKey, "cancel", 0, MaxReferenceLen)
	_, err := p.c.Cancel(ctx, req.ProviderKey, ref, IdempotencyKey(ref))
	if err != nil {
		return classify(err)
	}
	return nil
}
