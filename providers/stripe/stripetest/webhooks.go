package stripetest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"
)

// DefaultWebhookSecret is the signing secret used when Config.WebhookSecret is empty.
const DefaultWebhookSecret = "whsec_test"

// APIVersion is the API version stamped on events: the one stripe-go v79 pins.
const APIVersion = "2024-06-20"

// Delivery retry policy: a delivery that errs or answers non-2xx is tried webhookAttempts
// times in all, waiting webhookBackoff, then twice that, and so on, between attempts.
const (
	webhookAttempts = 4
	webhookBackoff  = 25 * time.Millisecond
	webhookTimeout  = 5 * time.Second
)

// ErrClosed is returned by [Server.WaitDeliveries] when the Server is closed with deliveries
// still pending.
var ErrClosed = errors.New("stripetest: server closed")

// Event is an event the fake emitted, in emission order, with what happened to its deliveries.
type Event struct {
	ID       string // "evt_..."
	Type     string // e.g. "payment_intent.succeeded"
	Created  int64  // Unix seconds on Config.Clock
	ObjectID string // id of data.object (a PaymentIntent or a charge)
	Payload  []byte // the JSON body POSTed to Config.WebhookURL

	// Delivered counts deliveries answered 2xx; Failed counts deliveries abandoned after
	// retries, or cut short by Close. Both stay 0 without a WebhookURL.
	Delivered int
	Failed    int
}

func (c *Config) validateWebhooks() error {
	if c.DuplicateWebhooks < 0 {
		return fmt.Errorf("Config.DuplicateWebhooks must not be negative, got %d", c.DuplicateWebhooks)
	}
	if c.WebhookURL != "" {
		u, err := url.Parse(c.WebhookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("Config.WebhookURL must be an absolute http(s) URL, got %q", c.WebhookURL)
		}
	}
	return nil
}

// webhooks records events and delivers them, in emission order, from one goroutine that the
// first delivered event starts and Close stops. Its lock is taken after Server.mu, never before.
type webhooks struct {
	url       string
	secret    string
	copies    int // deliveries per event: 1 + DuplicateWebhooks
	client    *http.Client
	ownClient bool
	clock     func() time.Time

	ctx    context.Context // canceled by close; bounds every delivery
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wake   chan struct{} // buffered(1): the queue grew

	mu      sync.Mutex
	seq     int64
	events  []*Event
	queue   []*Event
	idle    chan struct{} // non-nil while deliveries are pending; closed when the queue drains
	started bool
	closed  bool
}

func newWebhooks(cfg *Config, clock func() time.Time) *webhooks {
	w := &webhooks{
		url:    cfg.WebhookURL,
		secret: cfg.WebhookSecret,
		copies: 1 + cfg.DuplicateWebhooks,
		client: cfg.WebhookClient,
		clock:  clock,
		wake:   make(chan struct{}, 1),
	}
	if w.secret == "" {
		w.secret = DefaultWebhookSecret
	}
	if w.client == nil {
		w.client = &http.Client{Timeout: webhookTimeout}
		w.ownClient = true
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	return w
}

// Stripe's event envelope, with the fields stripe-go's Event reads.
type eventJSON struct {
	ID              string       `json:"id"`
	Object          string       `json:"object"`
	APIVersion      string       `json:"api_version"`
	Created         int64        `json:"created"`
	Data            eventData    `json:"data"`
	Livemode        bool         `json:"livemode"`
	PendingWebhooks int          `json:"pending_webhooks"`
	Request         eventRequest `json:"request"`
	Type            string       `json:"type"`
}

type eventData struct {
	Object             any            `json:"object"`
	PreviousAttributes map[string]any `json:"previous_attributes,omitempty"`
}

type eventRequest struct {
	ID             *string `json:"id"`
	IdempotencyKey *string `json:"idempotency_key"`
}

// charge is the Charge object as a charge.refunded event carries it. The fake keeps no charges
// of its own: it is derived from the PaymentIntent whose latest_charge it is.
type charge struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	Captured       bool              `json:"captured"`
	Created        int64             `json:"created"`
	Currency       string            `json:"currency"`
	Description    *string           `json:"description"`
	Livemode       bool              `json:"livemode"`
	Metadata       map[string]string `json:"metadata"`
	Paid           bool              `json:"paid"`
	PaymentIntent  string            `json:"payment_intent"`
	PaymentMethod  *string           `json:"payment_method"`
	Refunded       bool              `json:"refunded"`
	Status         string            `json:"status"`
}

func chargeOf(pi *paymentIntent) *charge {
	return &charge{
		ID:             *pi.LatestCharge,
		Object:         "charge",
		Amount:         pi.Amount,
		AmountCaptured: pi.AmountReceived,
		AmountRefunded: pi.refunded,
		Captured:       true,
		Created:        pi.Created,
		Currency:       pi.Currency,
		Description:    pi.Description,
		Metadata:       pi.Metadata,
		Paid:           true,
		PaymentIntent:  pi.ID,
		PaymentMethod:  pi.PaymentMethod,
		Refunded:       pi.refunded == pi.AmountReceived,
		Status:         "succeeded",
	}
}

// chargePrevious is data.previous_attributes of a charge.refunded event.
func chargePrevious(pi *paymentIntent, prevRefunded int64) map[string]any {
	prev := map[string]any{"amount_refunded": prevRefunded}
	if pi.refunded == pi.AmountReceived {
		prev["refunded"] = false
	}
	return prev
}

// emitLocked records an event whose data.object is obj as it is now, and queues it for
// delivery. It is called with s.mu held, so events are queued in the order they happen.
func (s *Server) emitLocked(c *call, typ string, obj any, prev map[string]any) {
	w := s.wh
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	var objID string
	switch o := obj.(type) {
	case *paymentIntent:
		objID = o.ID
	case *charge:
		objID = o.ID
	}
	env := eventJSON{
		ID:              fmt.Sprintf("evt_fake%014d", w.seq),
		Object:          "event",
		APIVersion:      APIVersion,
		Created:         s.clock().Unix(),
		Data:            eventData{Object: obj, PreviousAttributes: prev},
		PendingWebhooks: 0,
		Request:         eventRequest{ID: ptr(c.reqID), IdempotencyKey: ptr(c.key)},
		Type:            typ,
	}
	if w.url != "" {
		env.PendingWebhooks = 1
	}
	payload, err := json.MarshalIndent(env, "", "  ")
	if err != nil {
		panic(err) // only our own types are encoded
	}
	ev := &Event{ID: env.ID, Type: typ, Created: env.Created, ObjectID: objID, Payload: payload}
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

// Events returns copies of the events emitted so far, in emission order.
func (s *Server) Events() []Event {
	w := s.wh
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Event, len(w.events))
	for i, ev := range w.events {
		out[i] = *ev
		out[i].Payload = slices.Clone(ev.Payload)
	}
	return out
}

// WaitDeliveries waits until every event emitted so far has been delivered or abandoned. It
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
			// Loop: events emitted meanwhile have made a new idle channel.
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
		ev := w.queue[0]
		w.queue[0] = nil
		w.queue = w.queue[1:]
		w.mu.Unlock()

		for range w.copies {
			ok := w.deliver(ev)
			w.mu.Lock()
			if ok {
				ev.Delivered++
			} else {
				ev.Failed++
			}
			w.mu.Unlock()
		}
		if w.ctx.Err() != nil {
			return
		}
	}
}

// deliver POSTs ev once, retrying failures with backoff. It reports whether a 2xx came back.
func (w *webhooks) deliver(ev *Event) bool {
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
		if w.post(ev.Payload) == nil {
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
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	req.Header.Set("Stripe-Signature", Sign(payload, w.secret, w.clock()))
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

// Sign returns a Stripe-Signature header value for payload signed with secret at time t:
// "t=<unix>,v1=<hex HMAC-SHA256(secret, "<unix>.<payload>")>".
func Sign(payload []byte, secret string, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts))
	mac.Write([]byte("."))
	mac.Write(payload)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// close stops delivery, waits for the delivery goroutine and releases the default client's
// idle connections. Events emitted afterwards are recorded but not delivered.
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
