package fakekit

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// Delivery policy: a delivery that errs or answers non-2xx is tried WebhookAttempts times in
// all, waiting WebhookBackoff, then twice that, and so on, between attempts (175ms in all), or,
// with DeliveryConfig.RetryFor, until that long has passed, the backoff growing up to
// WebhookMaxBackoff. The default client gives up on an attempt after WebhookTimeout.
//
// The providers retry for days: Stripe for up to three days with exponential backoff
// (https://docs.stripe.com/webhooks#retries), Adyen with increasing intervals for up to 30 days
// (https://docs.adyen.com/development-resources/webhooks/troubleshoot), PayPal up to 25 times
// over three days (https://developer.paypal.com/api/rest/webhooks/). The fakes compress that:
// by default into a moment (tests of a receiver that is down for good do not wait), with
// RetryFor into long enough to outlast a receiver that restarts (the demo).
const (
	WebhookAttempts   = 4
	WebhookBackoff    = 25 * time.Millisecond
	WebhookMaxBackoff = time.Second
	WebhookTimeout    = 5 * time.Second
)

// ValidateWebhooks checks a fake's Config.WebhookURL ("" or an absolute http(s) URL) and
// Config.DuplicateWebhooks (not negative), naming the bad field.
func ValidateWebhooks(webhookURL string, duplicates int) error {
	if duplicates < 0 {
		return fmt.Errorf("Config.DuplicateWebhooks must not be negative, got %d", duplicates)
	}
	if webhookURL != "" {
		u, err := url.Parse(webhookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("Config.WebhookURL must be an absolute http(s) URL, got %q", webhookURL)
		}
	}
	return nil
}

// DeliveryConfig configures [Deliveries] of a fake's event type E.
type DeliveryConfig[E any] struct {
	// URL is where deliveries are POSTed; "" records events without delivering them.
	URL string

	// Duplicates is how many extra times every delivery is made.
	Duplicates int

	// Client sends the deliveries; nil means a client with a [WebhookTimeout] timeout whose
	// idle connections Close releases.
	Client *http.Client

	// Batch is how many queued events one delivery carries at most, oldest first; 0 means 1.
	Batch int

	// Payload returns the body of a delivery carrying batch. It is called without Deliveries'
	// lock, once per batch, and must only read fields of the events that never change.
	Payload func(batch []*E) []byte

	// Header returns the headers of one delivery attempt of payload (Content-Type, User-Agent,
	// signatures). It is called without Deliveries' lock, once per attempt.
	Header func(payload []byte) http.Header

	// Counters returns where e counts its deliveries answered 2xx and those abandoned after the
	// retries or cut short by Close. They are updated with Deliveries' lock held.
	Counters func(e *E) (delivered, failed *int)

	// ErrClosed is what Wait returns when Close comes first.
	ErrClosed error

	// RetryFor, when positive, retries a failing delivery until this long has passed since its
	// first attempt instead of WebhookAttempts times, the backoff doubling up to
	// WebhookMaxBackoff.
	RetryFor time.Duration
}

// Deliveries records a fake's events and delivers them, in emission order, from one goroutine
// that the first queued event starts and Close stops. Its lock is taken after the fake's own,
// never before: a fake emits with its lock held, so events are queued in the order they happen.
type Deliveries[E any] struct {
	cfg       DeliveryConfig[E]
	copies    int // deliveries per batch: 1 + Duplicates
	client    *http.Client
	ownClient bool

	ctx    context.Context // canceled by Close; bounds every delivery
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wake   chan struct{} // buffered(1): the queue grew

	mu      sync.Mutex
	seq     int64
	events  []*E
	queue   []*E
	idle    chan struct{} // non-nil while deliveries are pending; closed when the queue drains
	started bool
	closed  bool
}

// NewDeliveries returns Deliveries for cfg (validate URL and Duplicates first with
// [ValidateWebhooks]).
func NewDeliveries[E any](cfg DeliveryConfig[E]) *Deliveries[E] {
	d := &Deliveries[E]{
		cfg:    cfg,
		copies: 1 + cfg.Duplicates,
		client: cfg.Client,
		wake:   make(chan struct{}, 1),
	}
	if d.cfg.Batch <= 0 {
		d.cfg.Batch = 1
	}
	if d.client == nil {
		d.client = &http.Client{Timeout: WebhookTimeout}
		d.ownClient = true
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d
}

// Delivering reports whether events are delivered (a URL is configured).
func (d *Deliveries[E]) Delivering() bool { return d.cfg.URL != "" }

// Emit records the event newEvent makes and queues it for delivery (unless there is no URL or
// Deliveries is closed). newEvent gets the event's sequence number, 1, 2, ..., and is called
// with Deliveries' lock held.
func (d *Deliveries[E]) Emit(newEvent func(seq int64) *E) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	ev := newEvent(d.seq)
	d.events = append(d.events, ev)
	if d.cfg.URL == "" || d.closed {
		return
	}
	d.queue = append(d.queue, ev)
	if d.idle == nil {
		d.idle = make(chan struct{})
	}
	if !d.started {
		d.started = true
		d.wg.Add(1)
		go d.run()
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Events returns copies, made by clone with Deliveries' lock held, of the events emitted so
// far, in emission order.
func (d *Deliveries[E]) Events(clone func(e *E) E) []E {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]E, len(d.events))
	for i, ev := range d.events {
		out[i] = clone(ev)
	}
	return out
}

// Wait waits until every event emitted so far has been delivered or abandoned. It returns
// ctx's error if ctx ends first, and DeliveryConfig.ErrClosed if Close comes first. It returns
// nil at once when there is nothing to deliver (or no URL).
func (d *Deliveries[E]) Wait(ctx context.Context) error {
	for {
		d.mu.Lock()
		idle := d.idle
		d.mu.Unlock()
		if idle == nil {
			return nil
		}
		select {
		case <-idle:
			// Loop: events emitted meanwhile have made a new idle channel.
		case <-ctx.Done():
			return ctx.Err()
		case <-d.ctx.Done():
			return d.cfg.ErrClosed
		}
	}
}

func (d *Deliveries[E]) run() {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		if len(d.queue) == 0 {
			if d.idle != nil {
				close(d.idle)
				d.idle = nil
			}
			d.mu.Unlock()
			select {
			case <-d.wake:
				continue
			case <-d.ctx.Done():
				return
			}
		}
		n := min(len(d.queue), d.cfg.Batch)
		batch := make([]*E, n)
		copy(batch, d.queue)
		clear(d.queue[:n])
		d.queue = d.queue[n:]
		d.mu.Unlock()

		payload := d.cfg.Payload(batch)
		for range d.copies {
			ok := d.deliver(payload)
			d.mu.Lock()
			for _, ev := range batch {
				delivered, failed := d.cfg.Counters(ev)
				if ok {
					*delivered++
				} else {
					*failed++
				}
			}
			d.mu.Unlock()
		}
		if d.ctx.Err() != nil {
			return
		}
	}
}

// deliver POSTs payload once, retrying failures with backoff. It reports whether a 2xx came
// back.
func (d *Deliveries[E]) deliver(payload []byte) bool {
	backoff := WebhookBackoff
	first := time.Now()
	more := func(attempt int) bool {
		if d.cfg.RetryFor > 0 {
			return attempt == 0 || time.Since(first)+backoff <= d.cfg.RetryFor
		}
		return attempt < WebhookAttempts
	}
	for attempt := 0; more(attempt); attempt++ {
		if attempt > 0 {
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-d.ctx.Done():
				t.Stop()
				return false
			}
			backoff = min(2*backoff, WebhookMaxBackoff)
		}
		if d.post(payload) == nil {
			return true
		}
		if d.ctx.Err() != nil {
			return false
		}
	}
	return false
}

func (d *Deliveries[E]) post(payload []byte) error {
	req, err := http.NewRequestWithContext(d.ctx, http.MethodPost, d.cfg.URL, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	for k, v := range d.cfg.Header(payload) {
		req.Header[k] = v
	}
	resp, err := d.client.Do(req)
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

// Close stops delivery, waits for the delivery goroutine and releases the default client's idle
// connections. Events emitted afterwards are recorded but not delivered.
func (d *Deliveries[E]) Close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.cancel()
	d.wg.Wait()
	if d.ownClient {
		d.client.CloseIdleConnections()
	}
}
