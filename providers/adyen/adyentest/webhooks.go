package adyentest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultHMACKey is the hex HMAC key used when Config.HMACKey is empty.
const DefaultHMACKey = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"

// Delivery policy: a delivery that errs or answers non-2xx is tried webhookAttempts times in
// all, waiting webhookBackoff, then twice that, and so on, between attempts. One delivery
// carries at most maxBatch items, the oldest queued first.
const (
	webhookAttempts = 4
	webhookBackoff  = 25 * time.Millisecond
	webhookTimeout  = 5 * time.Second
	maxBatch        = 5
)

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

// webhooks records notification items and delivers them, in emission order and in batches,
// from one goroutine that the first queued item starts and Close stops. Its lock is taken after
// Server.mu, never before.
type webhooks struct {
	url       string
	key       string
	copies    int // deliveries per batch: 1 + DuplicateWebhooks
	client    *http.Client
	ownClient bool
	clock     func() time.Time

	ctx    context.Context // canceled by close; bounds every delivery
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wake   chan struct{} // buffered(1): the queue grew

	mu      sync.Mutex
	events  []*Event
	queue   []*Event
	idle    chan struct{} // non-nil while deliveries are pending; closed when the queue drains
	started bool
	closed  bool
}

func newWebhooks(cfg *Config, clock func() time.Time) *webhooks {
	w := &webhooks{
		url:    cfg.WebhookURL,
		key:    cfg.HMACKey,
		copies: 1 + cfg.DuplicateWebhooks,
		client: cfg.WebhookClient,
		clock:  clock,
		wake:   make(chan struct{}, 1),
	}
	if w.key == "" {
		w.key = DefaultHMACKey
	}
	if w.client == nil {
		w.client = &http.Client{Timeout: webhookTimeout}
		w.ownClient = true
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	return w
}

// emitLocked stamps, signs and records it, and queues it for delivery. It is called with s.mu
// held, so items are queued in the order they happen.
func (s *Server) emitLocked(it NotificationItem) {
	w := s.wh
	it.EventDate = s.clock().UTC().Format(time.RFC3339)
	sig, err := Sign(it, w.key)
	if err != nil {
		panic(err) // the key was validated by NewUnstartedServer
	}
	ad := map[string]string{"hmacSignature": sig}
	for k, v := range it.AdditionalData {
		ad[k] = v
	}
	it.AdditionalData = ad

	w.mu.Lock()
	defer w.mu.Unlock()
	ev := &Event{Item: it}
	w.events = append(w.events, ev)
	if w.url == "" || w.closed {
		return
	}
	w.queue = append(w.queue, ev)
	if w.idle == nil {
		w.idle = make(chan struct{})
	}
	if !w.started {
		w.started = true
		w.wg.Add(1)
		go w.run()
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Events returns copies of the items emitted so far, in emission order.
func (s *Server) Events() []Event {
	w := s.wh
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Event, len(w.events))
	for i, ev := range w.events {
		out[i] = *ev
		ad := make(map[string]string, len(ev.Item.AdditionalData))
		for k, v := range ev.Item.AdditionalData {
			ad[k] = v
		}
		out[i].Item.AdditionalData = ad
	}
	return out
}

// WaitDeliveries waits until every item emitted so far has been delivered or abandoned. It
// returns ctx's error if ctx ends first, and [ErrClosed] if the Server is closed first. It
// returns nil at once when there is nothing to deliver (or no Config.WebhookURL).
func (s *Server) WaitDeliveries(ctx context.Context) error {
	w := s.wh
	for {
		w.mu.Lock()
		idle := w.idle
		w.mu.Unlock()
		if idle == nil {
			return nil
		}
		select {
		case <-idle:
			// Loop: items emitted meanwhile have made a new idle channel.
		case <-ctx.Done():
			return ctx.Err()
		case <-w.ctx.Done():
			return ErrClosed
		}
	}
}

func (w *webhooks) run() {
	defer w.wg.Done()
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			if w.idle != nil {
				close(w.idle)
				w.idle = nil
			}
			w.mu.Unlock()
			select {
			case <-w.wake:
				continue
			case <-w.ctx.Done():
				return
			}
		}
		n := min(len(w.queue), maxBatch)
		batch := make([]*Event, n)
		copy(batch, w.queue)
		clear(w.queue[:n])
		w.queue = w.queue[n:]
		body := Notification{Live: "false"}
		for _, ev := range batch {
			body.NotificationItems = append(body.NotificationItems, NotificationEntry{ev.Item})
		}
		w.mu.Unlock()

		payload, err := json.Marshal(body)
		if err != nil {
			panic(err) // only our own types are encoded
		}
		for range w.copies {
			ok := w.deliver(payload)
			w.mu.Lock()
			for _, ev := range batch {
				if ok {
					ev.Delivered++
				} else {
					ev.Failed++
				}
			}
			w.mu.Unlock()
		}
		if w.ctx.Err() != nil {
			return
		}
	}
}

// deliver POSTs payload once, retrying failures with backoff. It reports whether a 2xx came
// back.
func (w *webhooks) deliver(payload []byte) bool {
	backoff := webhookBackoff
	for attempt := 0; attempt < webhookAttempts; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-w.ctx.Done():
				t.Stop()
				return false
			}
			backoff *= 2
		}
		if w.post(payload) == nil {
			return true
		}
		if w.ctx.Err() != nil {
			return false
		}
	}
	return false
}

func (w *webhooks) post(payload []byte) error {
	req, err := http.NewRequestWithContext(w.ctx, http.MethodPost, w.url, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Adyen HttpClient 1.0 (adyentest)")
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook endpoint answered %s", resp.Status)
	}
	return nil
}

// close stops delivery, waits for the delivery goroutine and releases the default client's idle
// connections. Items emitted afterwards are recorded but not delivered.
func (w *webhooks) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cancel()
	w.wg.Wait()
	if w.ownClient {
		w.client.CloseIdleConnections()
	}
}
