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
	"unicode/utf8"

	"github.com/payonce/payonce/payments/provider"
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
// originalReference (for a modification: the payment it modifies), Amount the amount read in
// Adyen's minor units ([Decimals]), DeclineCode Adyen's reason of a failure, Body the item's
// JSON. Key is always empty: the metadata.payonce_key Adyen echoes in additionalData is not
// covered by the signature, and a field anyone on the path could have changed must not name the
// intent an event settles (payments matches an event by Key). Only the signed pspReference,
// merchantReference (the reference payonce derived from the key) and originalReference
// identify an intent. Kinds:
//
//	AUTHORISATION success                 EventChargeSucceeded ([CaptureAutomatic]: the money moved)
//	                                      EventChargePending ([CaptureManual]: funds reserved only)
//	AUTHORISATION failure                 EventChargeFailed
//	REFUND success / failure              EventRefundSucceeded / EventRefundFailed
//	REFUND_FAILED, REFUNDED_REVERSED      EventRefundReversed (a refund failed, or came back,
//	                                      after success: the money is back at Adyen)
//	CAPTURE success / failure             EventCaptureSucceeded / EventCaptureFailed
//	CAPTURE_FAILED                        EventCaptureFailed
//	TECHNICAL_CANCEL, CANCELLATION ok     EventCancelled, DeclineCode "cancelled"
//	CANCEL_OR_REFUND ok                   EventCancelled, DeclineCode "cancelled" or "refunded"
//	                                      (additionalData "modification.action" cancel or refund)
//	TECHNICAL_CANCEL, CANCELLATION,       EventCancelFailed, DeclineCode = reason: nothing was
//	  CANCEL_OR_REFUND failed               voided, which is no proof that no payment exists (a
//	                                        captured payment cannot be cancelled)
//	anything else                         EventIgnored
//
// Errors: wrapping [provider.ErrWebhookSignature] when an item's signature is missing or
// matches no key; wrapping [provider.ErrWebhookMalformed] when the body is not a delivery of
// well-formed items; [ErrNoHMACKey].
func (p *Provider) VerifyWebhook(ctx context.Context, header http.Header, body []byte) ([]provider.WebhookEvent, error) {
	if len(p.hmacKeys) == 0 {
		return nil, ErrNoHMACKey
	}
	var n notification
	if err := json.Unmarshal(body, &n); err != nil {
		return nil, fmt.Errorf("adyen: %w: %v", provider.ErrWebhookMalformed, err)
	}
	if len(n.NotificationItems) == 0 {
		return nil, fmt.Errorf("adyen: %w: no notificationItems", provider.ErrWebhookMalformed)
	}
	items := make([]notificationItem, len(n.NotificationItems))
	for i, wrapped := range n.NotificationItems {
		if len(wrapped.Item) == 0 || bytes.Equal(wrapped.Item, []byte("null")) {
			return nil, fmt.Errorf("adyen: %w: notificationItems[%d] has no NotificationRequestItem", provider.ErrWebhookMalformed, i)
		}
		it := &items[i]
		if err := json.Unmarshal(wrapped.Item, it); err != nil {
			return nil, fmt.Errorf("adyen: %w: notificationItems[%d]: %v", provider.ErrWebhookMalformed, i, err)
		}
		switch {
		case it.PSPReference == "":
			return nil, fmt.Errorf("adyen: %w: notificationItems[%d] has no pspReference", provider.ErrWebhookMalformed, i)
		case it.EventCode == "":
			return nil, fmt.Errorf("adyen: %w: notificationItems[%d] has no eventCode", provider.ErrWebhookMalformed, i)
		case !it.Success.set:
			return nil, fmt.Errorf("adyen: %w: notificationItems[%d] has no success", provider.ErrWebhookMalformed, i)
		}
	}
	// Signatures before anything else is interpreted: an unsigned item tells nothing.
	for i := range items {
		if !p.signed(&items[i]) {
			return nil, fmt.Errorf("adyen: %w: notificationItems[%d] (pspReference %s, %s)", provider.ErrWebhookSignature, i,
				items[i].PSPReference, items[i].EventCode)
		}
	}
	events := make([]provider.WebhookEvent, len(items))
	for i := range items {
		ev, err := p.event(&items[i], n.NotificationItems[i].Item)
		if err != nil {
			return nil, fmt.Errorf("adyen: %w: notificationItems[%d]: %v", provider.ErrWebhookMalformed, i, err)
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

// Decline codes of a provider.EventCancelled: what the void did.
const (
	declineCancelled = "cancelled" // an uncaptured authorisation was cancelled
	declineRefunded  = "refunded"  // a captured payment was refunded in full (CANCEL_OR_REFUND)
)

// modificationAction is the additionalData key of a CANCEL_OR_REFUND naming what the reversal
// did, "cancel" or "refund" (https://docs.adyen.com/api-explorer/Webhooks/1/post/REVERSAL; the
// CANCEL_OR_REFUND example of Adyen's webhook specification carries it).
const modificationAction = "modification.action"

func (p *Provider) event(it *notificationItem, raw json.RawMessage) (provider.WebhookEvent, error) {
	ev := provider.WebhookEvent{
		ID:        it.PSPReference + ":" + it.EventCode + ":" + it.Success.text,
		Type:      it.EventCode,
		Reference: it.MerchantReference,
		// No Key: additionalData is outside the HMAC (see signingString), so its
		// metadata.payonce_key proves nothing about which intent the event is about.
		ProviderID: it.PSPReference,
		ChargeID:   it.OriginalReference,
		Body:       append(json.RawMessage(nil), raw...),
	}
	if it.Amount != nil && it.Amount.Currency != "" {
		m, err := fromAmount(*it.Amount)
		if err != nil {
			return ev, err
		}
		ev.Amount = m
	}
	ok := it.Success.text == "true"
	if !ok {
		ev.DeclineCode = it.Reason
	}
	switch it.EventCode {
	case "AUTHORISATION":
		authorised := provider.EventChargeSucceeded
		if p.cfg.CaptureMode == CaptureManual {
			authorised = provider.EventChargePending // reserved, not moved: the CAPTURE decides
		}
		ev.Kind = pick(ok, authorised, provider.EventChargeFailed)
	case "REFUND":
		ev.Kind = pick(ok, provider.EventRefundSucceeded, provider.EventRefundFailed)
	case "REFUND_FAILED", "REFUNDED_REVERSED":
		// The card scheme rejected the refund, or the refunded amount was
		// returned (https://docs.adyen.com/api-explorer/Webhooks/1/post/REFUND_FAILED,
		// .../REFUNDED_REVERSED): whatever success says, the refund did not reach the shopper.
		ev.Kind, ev.DeclineCode = provider.EventRefundReversed, it.Reason
	case "CAPTURE":
		ev.Kind = pick(ok, provider.EventCaptureSucceeded, provider.EventCaptureFailed)
	case "CAPTURE_FAILED":
		ev.Kind, ev.DeclineCode = provider.EventCaptureFailed, it.Reason
	case "TECHNICAL_CANCEL", "CANCELLATION":
		ev.Kind = pick(ok, provider.EventCancelled, provider.EventCancelFailed)
		if ok {
			ev.DeclineCode = declineCancelled
		}
	case "CANCEL_OR_REFUND":
		ev.Kind = pick(ok, provider.EventCancelled, provider.EventCancelFailed)
		if ok {
			switch act := it.AdditionalData[modificationAction]; act {
			case "cancel":
				ev.DeclineCode = declineCancelled
			case "refund":
				ev.DeclineCode = declineRefunded
			case "":
				ev.DeclineCode = "cancelled_or_refunded"
			default:
				ev.DeclineCode = act
			}
		}
	default:
		ev.Kind = provider.EventIgnored
	}
	if ev.Kind == provider.EventCancelFailed && ev.DeclineCode == "" {
		ev.DeclineCode = "not_cancelled" // Adyen gave no reason; the failure still needs one for review
	}
	return ev, nil
}

func pick(ok bool, yes, no provider.EventKind) provider.EventKind {
	if ok {
		return yes
	}
	return no
}

var _ provider.WebhookAcknowledger = (*Provider)(nil)

// WebhookAck is the body Adyen's documentation asks an endpoint to answer a
// delivery with, once it has stored it: "[accepted]".
func (p *Provider) WebhookAck() (contentType string, body []byte) {
	return "text/plain", []byte("[accepted]")
}

var _ provider.Voider = (*Provider)(nil)

// Void makes the attempt req void at Adyen, with a deterministic Idempotency-Key; the outcome
// comes by notification.
//
//   - With req.ProviderID (the payment's pspReference): POST /payments/{pspReference}/reversals,
//     Adyen's cancel or refund, safe whatever the capture state: it cancels an uncaptured
//     authorisation and refunds a captured payment in full
//     (https://docs.adyen.com/online-payments/reversal). Its reference is req.ProviderKey, so
//     that the CANCEL_OR_REFUND notification names the payment's reference; its key
//     [provider.DeriveKey](req.ProviderKey, "reversal", 0, 64).
//   - Without it: the technical cancel by reference, POST /cancels {paymentReference:
//     req.ProviderKey}. It only cancels an authorisation that is not captured yet
//     (https://docs.adyen.com/api-explorer/Checkout/71/post/cancels): under automatic capture
//     (Adyen's default) a payment that was made is already captured, and the TECHNICAL_CANCEL
//     then fails. Its reference is [provider.DeriveKey](req.ProviderKey, "cancel", 0, 80).
//
// [Provider.VerifyWebhook] maps the outcome: success to provider.EventCancelled (ChargeID the
// payment, DeclineCode "cancelled" or "refunded"), failure to provider.EventCancelFailed
// (DeclineCode Adyen's reason), which proves nothing about a payment's absence: a captured
// payment cannot be cancelled by reference, and a request still in flight may create one
// later. Errors: *[provider.InvalidRequestError] for a ProviderKey that is empty or over 80
// characters; otherwise as [Provider.Charge]'s transport and API errors.
func (p *Provider) Void(ctx context.Context, req provider.VoidRequest) error {
	if n := utf8.RuneCountInString(req.ProviderKey); n == 0 || n > MaxReferenceLen {
		return &provider.InvalidRequestError{Provider: providerName, Code: "invalid_reference", Param: "ProviderKey",
			Message: fmt.Sprintf("ProviderKey must be 1 to %d characters, got %d", MaxReferenceLen, n)}
	}
	var err error
	if req.ProviderID != "" {
		_, err = p.c.Reversal(ctx, req.ProviderID, req.ProviderKey, reversalKey(req.ProviderKey))
	} else {
		ref := provider.DeriveKey(req.ProviderKey, "cancel", 0, MaxReferenceLen)
		_, err = p.c.Cancel(ctx, req.ProviderKey, ref, IdempotencyKey(ref))
	}
	if err != nil {
		return classify(err)
	}
	return nil
}

// reversalKey is the Idempotency-Key of the reversal of the payment whose reference is
// reference.
func reversalKey(reference string) string {
	return provider.DeriveKey(reference, "reversal", 0, MaxIdempotencyKeyLen)
}
