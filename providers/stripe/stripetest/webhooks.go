package stripetest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// DefaultWebhookSecret is the signing secret used when Config.WebhookSecret is empty.
const DefaultWebhookSecret = "whsec_test"

// APIVersion is the API version stamped on events: the one stripe-go v79 pins.
const APIVersion = "2024-06-20"

// ErrClosed is returned by [Server.WaitDeliveries] when the Server is closed with deliveries
// still pending.
var ErrClosed = errors.New("stripetest: server closed")

// Event is an event the fake emitted, in emission order, with what happened to its deliveries.
type Event struct {
	ID       string // "evt_..."
	Type     string // e.g. "payment_intent.succeeded"
	Created  int64  // Unix seconds on Config.Clock
	ObjectID string // id of data.object (a PaymentIntent, a charge or a refund)
	Payload  []byte // the JSON body POSTed to Config.WebhookURL

	// Delivered counts deliveries answered 2xx; Failed counts deliveries abandoned after
	// retries, or cut short by Close. Both stay 0 without a WebhookURL.
	Delivered int
	Failed    int
}

// newWebhooks returns the event log and delivery queue: one event a delivery, signed with
// Config.WebhookSecret at the time of each attempt.
func newWebhooks(cfg *Config, clock func() time.Time) *fakekit.Deliveries[Event] {
	secret := cfg.WebhookSecret
	if secret == "" {
		secret = DefaultWebhookSecret
	}
	return fakekit.NewDeliveries(fakekit.DeliveryConfig[Event]{
		URL:        cfg.WebhookURL,
		Duplicates: cfg.DuplicateWebhooks,
		RetryFor:   cfg.WebhookRetryFor,
		Client:     cfg.WebhookClient,
		Payload:    func(batch []*Event) []byte { return batch[0].Payload },
		Header: func(payload []byte) http.Header {
			return http.Header{
				"Content-Type":     {"application/json; charset=utf-8"},
				"User-Agent":       {"Stripe/1.0 (+https://stripe.com/docs/webhooks)"},
				"Stripe-Signature": {Sign(payload, secret, clock())},
			}
		},
		Counters:  func(ev *Event) (delivered, failed *int) { return &ev.Delivered, &ev.Failed },
		ErrClosed: ErrClosed,
	})
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
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCaptured     int64             `json:"amount_captured"`
	AmountRefunded     int64             `json:"amount_refunded"`
	BalanceTransaction *string           `json:"balance_transaction"`
	Captured           bool              `json:"captured"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Description        *string           `json:"description"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	Paid               bool              `json:"paid"`
	PaymentIntent      string            `json:"payment_intent"`
	PaymentMethod      *string           `json:"payment_method"`
	Refunded           bool              `json:"refunded"`
	Status             string            `json:"status"`
}

func chargeOf(pi *paymentIntent) *charge {
	return &charge{
		ID:                 *pi.LatestCharge,
		Object:             "charge",
		Amount:             pi.Amount,
		AmountCaptured:     pi.AmountReceived,
		AmountRefunded:     pi.refunded,
		BalanceTransaction: ptr(pi.balanceTxn),
		Captured:           true,
		Created:            pi.Created,
		Currency:           pi.Currency,
		Description:        pi.Description,
		Metadata:           pi.Metadata,
		Paid:               true,
		PaymentIntent:      pi.ID,
		PaymentMethod:      pi.PaymentMethod,
		Refunded:           pi.refunded == pi.AmountReceived,
		Status:             "succeeded",
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
	var objID string
	switch o := obj.(type) {
	case *paymentIntent:
		objID = o.ID
	case *charge:
		objID = o.ID
	case *refund:
		objID = o.ID
	}
	s.wh.Emit(func(seq int64) *Event {
		env := eventJSON{
			ID:              fmt.Sprintf("evt_fake%014d", seq),
			Object:          "event",
			APIVersion:      APIVersion,
			Created:         s.clock().Unix(),
			Data:            eventData{Object: obj, PreviousAttributes: prev},
			PendingWebhooks: 0,
			Request:         eventRequest{ID: ptr(c.reqID), IdempotencyKey: ptr(c.key)},
			Type:            typ,
		}
		if s.wh.Delivering() {
			env.PendingWebhooks = 1
		}
		payload := fakekit.MustMarshalIndent(env)
		return &Event{ID: env.ID, Type: typ, Created: env.Created, ObjectID: objID, Payload: payload}
	})
}

// Events returns copies of the events emitted so far, in emission order.
func (s *Server) Events() []Event {
	return s.wh.Events(func(ev *Event) Event {
		c := *ev
		c.Payload = slices.Clone(ev.Payload)
		return c
	})
}

// WaitDeliveries waits until every event emitted so far has been delivered or abandoned. It
// returns ctx's error if ctx ends first, and [ErrClosed] if the Server is closed first. It
// returns nil at once when there is nothing to deliver (or no Config.WebhookURL).
func (s *Server) WaitDeliveries(ctx context.Context) error { return s.wh.Wait(ctx) }

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
