package adyentest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// DefaultHMACKey is the hex HMAC key used when Config.HMACKey is empty.
const DefaultHMACKey = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"

// maxBatch is how many items one delivery carries at most, the oldest queued first. A
// delivery that errs or answers non-2xx is retried a few times with a short backoff (see
// fakekit.Deliveries).
const maxBatch = 5

// ErrClosed is returned by [Server.WaitDeliveries] when the Server is closed with deliveries
// still pending.
var ErrClosed = errors.New("adyentest: server closed")

// Notification is the body of a webhook delivery.
type Notification struct {
	Live              string              `json:"live"`
	NotificationItems []NotificationEntry `json:"notificationItems"`
}

// NotificationEntry wraps one item, as Adyen nests it.
type NotificationEntry struct {
	NotificationRequestItem NotificationItem `json:"NotificationRequestItem"`
}

// NotificationItem is one standard notification, with Adyen's field names. Success is the
// string "true" or "false", as Adyen sends it.
type NotificationItem struct {
	AdditionalData      map[string]string `json:"additionalData,omitempty"`
	Amount              Amount            `json:"amount"`
	EventCode           string            `json:"eventCode"`
	EventDate           string            `json:"eventDate"`
	MerchantAccountCode string            `json:"merchantAccountCode"`
	MerchantReference   string            `json:"merchantReference"`
	OriginalReference   string            `json:"originalReference,omitempty"`
	PaymentMethod       string            `json:"paymentMethod,omitempty"`
	PSPReference        string            `json:"pspReference"`
	Reason              string            `json:"reason,omitempty"`
	Success             string            `json:"success"`
}

// SigningString is the string Adyen's HMAC signature covers:
// "pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success".
func (it NotificationItem) SigningString() string {
	return strings.Join([]string{it.PSPReference, it.OriginalReference, it.MerchantAccountCode, it.MerchantReference,
		strconv.FormatInt(it.Amount.Value, 10), it.Amount.Currency, it.EventCode, it.Success}, ":")
}

// Sign returns the item's hmacSignature under the hex-encoded key: base64 of HMAC-SHA256 over
// [NotificationItem.SigningString] with the hex-decoded key. It fails if hexKey is not hex.
func Sign(it NotificationItem, hexKey string) (string, error) {
	key, err := hex.DecodeString(hexKey)
	if err != nil {
		return "", fmt.Errorf("adyentest: HMAC key is not hex: %w", err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(it.SigningString()))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}

// Event is a notification item the fake emitted, in emission order, with what happened to the
// deliveries that carried it.
type Event struct {
	Item NotificationItem // signed: Item.AdditionalData["hmacSignature"]

	// Delivered counts deliveries answered 2xx; Failed counts deliveries abandoned after
	// retries, or cut short by Close. Both stay 0 without a WebhookURL.
	Delivered int
	Failed    int
}

// newWebhooks returns the notification log and delivery queue: up to maxBatch items a
// delivery, each item signed when emitted.
func newWebhooks(cfg *Config) *fakekit.Deliveries[Event] {
	return fakekit.NewDeliveries(fakekit.DeliveryConfig[Event]{
		URL:        cfg.WebhookURL,
		Duplicates: cfg.DuplicateWebhooks,
		RetryFor:   cfg.WebhookRetryFor,
		Client:     cfg.WebhookClient,
		Batch:      maxBatch,
		Payload: func(batch []*Event) []byte {
			body := Notification{Live: "false"}
			for _, ev := range batch {
				body.NotificationItems = append(body.NotificationItems, NotificationEntry{ev.Item})
			}
			return fakekit.MustMarshal(body)
		},
		Header: func([]byte) http.Header {
			return http.Header{"Content-Type": {"application/json"}, "User-Agent": {"Adyen HttpClient 1.0 (adyentest)"}}
		},
		Counters:  func(ev *Event) (delivered, failed *int) { return &ev.Delivered, &ev.Failed },
		ErrClosed: ErrClosed,
	})
}

// emitLocked stamps, signs and records it, and queues it for delivery. It is called with s.mu
// held, so items are queued in the order they happen.
func (s *Server) emitLocked(it NotificationItem) {
	it.EventDate = s.clock().UTC().Format(time.RFC3339)
	sig, err := Sign(it, s.hmacKey)
	if err != nil {
		panic(err) // the key was validated by NewUnstartedServer
	}
	ad := map[string]string{"hmacSignature": sig}
	maps.Copy(ad, it.AdditionalData)
	it.AdditionalData = ad
	s.wh.Emit(func(int64) *Event { return &Event{Item: it} })
}

// Events returns copies of the items emitted so far, in emission order.
func (s *Server) Events() []Event {
	return s.wh.Events(func(ev *Event) Event {
		c := *ev
		c.Item.AdditionalData = maps.Clone(ev.Item.AdditionalData)
		return c
	})
}

// WaitDeliveries waits until every item emitted so far has been delivered or abandoned. It
// returns ctx's error if ctx ends first, and [ErrClosed] if the Server is closed first. It
// returns nil at once when there is nothing to deliver (or no Config.WebhookURL).
func (s *Server) WaitDeliveries(ctx context.Context) error { return s.wh.Wait(ctx) }
