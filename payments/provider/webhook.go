package provider

import (
	"context"
	"net/http"

	"github.com/payonce/payonce/money"
)

// EventKind is what a provider notification means for payonce.
type EventKind string

const (
	EventChargeSucceeded EventKind = "charge_succeeded"
	EventChargeFailed    EventKind = "charge_failed"
	EventChargePending   EventKind = "charge_pending"
	EventRefundSucceeded EventKind = "refund_succeeded"
	// EventRefundFailed: a refund refused or cancelled before it
	// succeeded (Adyen REFUND success=false, a Stripe refund canceled).
	// It fails an open refund intent; for one recorded SUCCEEDED it is a
	// conflict (reported, nothing changes).
	EventRefundFailed EventKind = "refund_failed"
	// EventRefundReversed: a refund that failed at the provider after it
	// was accepted, possibly after it succeeded, its money back at the
	// provider: a Stripe refund whose status became failed (its
	// failure_balance_transaction returns the amount), Adyen's
	// REFUND_FAILED (the card scheme rejected it) and REFUNDED_REVERSED
	// (the refunded amount came back). It fails an open refund intent as
	// EventRefundFailed does, and reverses one recorded SUCCEEDED (see
	// payments.EventRefundFailedAfterSuccess).
	EventRefundReversed   EventKind = "refund_reversed"
	EventCaptureSucceeded EventKind = "capture_succeeded"
	EventCaptureFailed    EventKind = "capture_failed"
	// EventCancelled: a payment was voided and no money stays moved: an
	// authorisation cancelled (Adyen TECHNICAL_CANCEL or CANCEL_OR_REFUND
	// success=true with action cancel), or a captured payment reversed
	// in full (CANCEL_OR_REFUND success=true with action refund). The
	// intent ends FAILED; ChargeID names the voided payment.
	EventCancelled EventKind = "cancelled"
	// EventCancelFailed: a void did not cancel anything (Adyen
	// TECHNICAL_CANCEL or CANCEL_OR_REFUND success=false). It is NOT proof
	// that no payment exists: a captured payment cannot be cancelled by
	// reference, and a refused one cannot be cancelled at all. ChargeID is
	// the payment's pspReference when the provider named one
	// (originalReference), DeclineCode the provider's reason. Recorded
	// without effect; the reconciler reads it and flags the intent for
	// review with that reason.
	EventCancelFailed EventKind = "cancel_failed"
	// EventIgnored: a verified event payonce does not act on (it is
	// acknowledged and recorded, so that the provider stops resending).
	EventIgnored EventKind = "ignored"
)

// WebhookEvent is one verified provider notification in payonce's terms.
type WebhookEvent struct {
	// ID identifies the delivery's event at its provider, for
	// deduplication: Stripe's event id, PayPal's event id, Adyen's
	// "pspReference:eventCode:success".
	ID string
	// Type is the provider's own event type ("payment_intent.succeeded",
	// "AUTHORISATION", "PAYMENT.CAPTURE.COMPLETED").
	Type string
	Kind EventKind
	// Reference is the reference payonce sent (the ProviderKey: Adyen's
	// merchantReference, PayPal's custom_id), when the event carries it.
	Reference string
	// Key is the local idempotency key, when the event carries it in a
	// part the provider's signature covers (Stripe metadata). An intent
	// is matched by it: an adapter leaves it empty when the field is not
	// signed (Adyen's additionalData).
	Key string
	// ProviderID is the provider's object the event is about (a
	// PaymentIntent, a pspReference, a PayPal capture or refund).
	ProviderID string
	// ChargeID is, for refund and capture events, the provider's id of the
	// charge they belong to (Adyen originalReference).
	ChargeID string
	// Amount is the event's amount; the zero Money when absent.
	Amount money.Money
	// DeclineCode is the provider's reason for a failure.
	DeclineCode string
	// Body is the event's raw JSON, kept as evidence.
	Body []byte
}

// WebhookVerifier is implemented by providers that receive notifications:
// it authenticates one delivery (headers and body as received) and
// returns its events (Adyen batches several in one delivery).
//
// Errors: wrapping [ErrWebhookSignature] when the signature is missing or
// wrong, [ErrWebhookMalformed] when the body cannot be parsed; anything
// else is a failure to verify (the provider's verification API was
// unreachable) and the delivery should be answered 5xx so that it comes
// again.
type WebhookVerifier interface {
	VerifyWebhook(ctx context.Context, header http.Header, body []byte) ([]WebhookEvent, error)
}

var (
	// ErrWebhookSignature: a delivery's signature is missing or wrong.
	ErrWebhookSignature = sentinel("payments: webhook signature missing or invalid", false)
	// ErrWebhookMalformed: a delivery's body is not a valid event.
	ErrWebhookMalformed = sentinel("payments: webhook body malformed", false)
)

// WebhookAcknowledger is implemented by providers that expect a particular
// body in the 2xx answer to a delivery (Adyen: "[accepted]").
type WebhookAcknowledger interface {
	WebhookAck() (contentType string, body []byte)
}
