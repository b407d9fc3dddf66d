package paypaltest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// Headers of a webhook delivery, as PayPal sends them.
const (
	HeaderAuthAlgo         = "PAYPAL-AUTH-ALGO"
	HeaderCertURL          = "PAYPAL-CERT-URL"
	HeaderTransmissionID   = "PAYPAL-TRANSMISSION-ID"
	HeaderTransmissionSig  = "PAYPAL-TRANSMISSION-SIG"
	HeaderTransmissionTime = "PAYPAL-TRANSMISSION-TIME"
)

// AuthAlgo and CertURL are the values of PAYPAL-AUTH-ALGO and PAYPAL-CERT-URL on the fake's
// deliveries. The fake does not sign with a certificate (see "Webhooks" in the package
// documentation); the URL is never fetched.
const (
	AuthAlgo = "SHA256withRSA"
	CertURL  = "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-paypaltest"
)

// signingKey is the fake's private HMAC key standing in for PayPal's certificate.
var signingKey = []byte("paypaltest private signing key: not PayPal's scheme")

// ErrClosed is returned by [Server.WaitDeliveries] when the Server is closed with deliveries
// still pending.
var ErrClosed = errors.New("paypaltest: server closed")

// Event is an event the fake emitted, in emission order, with what happened to its deliveries.
type Event struct {
	ID         string    // "WH-..."
	Type       string    // event_type, e.g. "PAYMENT.CAPTURE.COMPLETED"
	CreateTime time.Time // on Config.Clock
	ResourceID string    // id of the resource: a capture or a refund
	Payload    []byte    // the JSON body POSTed to Config.WebhookURL

	// Delivered counts deliveries answered 2xx; Failed counts deliveries abandoned after retries,
	// or cut short by Close. Both stay 0 without a WebhookURL.
	Delivered int
	Failed    int
}

// transmission is what the fake signed and sent in one delivery attempt.
type transmission struct {
	sig, time, webhookID string
	body                 []byte // compacted
}

// newWebhooks returns the event log and delivery queue: one event a delivery, each attempt
// signed under a new transmission id (see Server.transmit).
func newWebhooks(cfg *Config, s *Server) *fakekit.Deliveries[Event] {
	return fakekit.NewDeliveries(fakekit.DeliveryConfig[Event]{
		URL:        cfg.WebhookURL,
		Duplicates: cfg.DuplicateWebhooks,
		RetryFor:   cfg.WebhookRetryFor,
		Client:     cfg.WebhookClient,
		Payload:    func(batch []*Event) []byte { return batch[0].Payload },
		Header: func(payload []byte) http.Header {
			h := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"PayPal/AUHD-214.0-58843217 (paypaltest)"}}
			maps.Copy(h, s.transmit(payload))
			return h
		},
		Counters:  func(ev *Event) (delivered, failed *int) { return &ev.Delivered, &ev.Failed },
		ErrClosed: ErrClosed,
	})
}

// PayPal's event envelope.
type eventJSON struct {
	ID              string `json:"id"`
	EventVersion    string `json:"event_version"`
	CreateTime      string `json:"create_time"`
	ResourceType    string `json:"resource_type"`
	ResourceVersion string `json:"resource_version"`
	EventType       string `json:"event_type"`
	Summary         string `json:"summary"`
	Resource        any    `json:"resource"`
	Links           []link `json:"links"`
}

var summaries = map[string]string{
	"PAYMENT.CAPTURE.COMPLETED": "Payment completed",
	"PAYMENT.CAPTURE.DECLINED":  "Payment declined",
	"PAYMENT.CAPTURE.PENDING":   "Payment pending",
	"PAYMENT.CAPTURE.REFUNDED":  "A payment was refunded",
}

// emitLocked records an event about resource as it is now and queues it for delivery. It is
// called with s.mu held, so events are queued in the order they happen.
func (s *Server) emitLocked(eventType, resourceType, resourceID string, resource any) {
	now := s.clock()
	s.wh.Emit(func(seq int64) *Event {
		id := fmt.Sprintf("WH-FAKE%014d", seq)
		payload := fakekit.MustMarshal(eventJSON{
			ID: id, EventVersion: "1.0", CreateTime: stamp(now), ResourceType: resourceType, ResourceVersion: "2.0",
			EventType: eventType, Summary: summaries[eventType], Resource: resource,
			Links: []link{{Href: "/v1/notifications/webhooks-events/" + id, Rel: "self", Method: "GET"}},
		})
		return &Event{ID: id, Type: eventType, CreateTime: now, ResourceID: resourceID, Payload: payload}
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

// transmit signs one delivery attempt of payload under a new transmission id, records it for
// verify-webhook-signature, and returns its PAYPAL-* headers.
func (s *Server) transmit(payload []byte) http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", s.seq)
	at := stamp(s.clock())
	body := compact(payload)
	sig := sign(id, at, s.webhookID, body)
	s.transmitted[id] = transmission{sig: sig, time: at, webhookID: s.webhookID, body: body}
	h := http.Header{}
	h.Set(HeaderAuthAlgo, AuthAlgo)
	h.Set(HeaderCertURL, CertURL)
	h.Set(HeaderTransmissionID, id)
	h.Set(HeaderTransmissionSig, sig)
	h.Set(HeaderTransmissionTime, at)
	return h
}

// sign is the fake's stand-in for PayPal's certificate signature: base64 HMAC-SHA256 over
// PayPal's signed string "<transmission id>|<time>|<webhook id>|<crc32 of the body>".
func sign(id, at, webhookID string, body []byte) string {
	mac := hmac.New(sha256.New, signingKey)
	mac.Write([]byte(id + "|" + at + "|" + webhookID + "|" + strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10)))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func compact(b []byte) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return slices.Clone(b)
	}
	return buf.Bytes()
}

// verifyWebhookSignature is POST /v1/notifications/verify-webhook-signature.
func (s *Server) verifyWebhookSignature(c *call) (*response, resourceRef) {
	var req struct {
		AuthAlgo         string          `json:"auth_algo"`
		CertURL          string          `json:"cert_url"`
		TransmissionID   string          `json:"transmission_id"`
		TransmissionSig  string          `json:"transmission_sig"`
		TransmissionTime string          `json:"transmission_time"`
		WebhookID        string          `json:"webhook_id"`
		WebhookEvent     json.RawMessage `json:"webhook_event"`
	}
	if err := json.Unmarshal(c.body, &req); err != nil {
		return invalidRequest("", "MALFORMED_REQUEST_JSON", "The request JSON is not well formed: "+err.Error()), resourceRef{}
	}
	// Every field is required (verify_webhook_signature in
	// https://github.com/paypal/paypal-rest-api-specifications/blob/main/openapi/notifications_webhooks_v1.json;
	// https://developer.paypal.com/docs/api/webhooks/v1/#verify-webhook-signature_post): 400
	// INVALID_REQUEST, MISSING_REQUIRED_PARAMETER naming it.
	for _, f := range []struct{ name, v string }{
		{"auth_algo", req.AuthAlgo}, {"cert_url", req.CertURL}, {"transmission_id", req.TransmissionID},
		{"transmission_sig", req.TransmissionSig}, {"transmission_time", req.TransmissionTime},
		{"webhook_id", req.WebhookID}, {"webhook_event", string(req.WebhookEvent)},
	} {
		if f.v == "" || f.v == "null" {
			return invalidRequest("/"+f.name, "MISSING_REQUIRED_PARAMETER", "A required field / parameter is missing."), resourceRef{}
		}
	}
	body := compact(req.WebhookEvent)
	tx, sent := s.transmitted[req.TransmissionID]
	ok := sent && req.WebhookID == s.webhookID && req.AuthAlgo == AuthAlgo && req.CertURL == CertURL &&
		hmac.Equal([]byte(req.TransmissionSig), []byte(tx.sig)) && req.TransmissionTime == tx.time &&
		bytes.Equal(body, tx.body) && hmac.Equal([]byte(req.TransmissionSig), []byte(sign(req.TransmissionID, req.TransmissionTime, req.WebhookID, body)))
	status := "FAILURE"
	if ok {
		status = "SUCCESS"
	}
	return jsonResponse(http.StatusOK, map[string]string{"verification_status": status}), resourceRef{}
}
