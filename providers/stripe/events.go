package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"

	stripego "github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

var _ provider.WebhookVerifier = (*Provider)(nil)

// VerifyWebhook authenticates one webhook delivery (its Stripe-Signature
// header and its body, exactly as received) against Config.WebhookSecrets,
// with Config.WebhookTolerance, and returns its event (Stripe sends one per
// delivery) in payonce's terms:
//
//	Stripe event type                         Kind                  ProviderID       ChargeID
//	payment_intent.succeeded                  EventChargeSucceeded  PaymentIntent
//	payment_intent.payment_failed             EventChargeFailed     PaymentIntent
//	payment_intent.processing                 EventChargePending    PaymentIntent
//	charge.refunded                           EventRefundSucceeded  its PaymentIntent its PaymentIntent
//	refund.updated, refund.failed,            EventRefundReversed   refund           its PaymentIntent
//	  charge.refund.updated (status failed)
//	the same (status canceled)                EventRefundFailed     refund           its PaymentIntent
//	anything else                             EventIgnored
//
// ID is the event's id (Stripe delivers at least once: dedupe on it), Type
// its type, Body the raw JSON. Key is the object's metadata[[MetadataKey]]:
// for charge.refunded that is the charge's local key (the event carries the
// charge, not the refund, whose own key is on the refund). Amount is the
// PaymentIntent's amount, the refund's amount, or, for charge.refunded,
// what this refund added: amount_refunded minus
// data.previous_attributes.amount_refunded (all of amount_refunded when
// Stripe sends no previous value). DeclineCode is
// last_payment_error.decline_code, else its code, for a failed charge, and
// failure_reason for a failed refund. An ignored event still carries Key
// when its object has one.
//
// The event's API version is not checked against stripe-go's.
//
// Errors: [ErrNoWebhookSecret] without Config.WebhookSecrets (answer 5xx:
// Stripe redelivers once the endpoint is configured); an error wrapping
// [provider.ErrWebhookSignature] and stripe-go's error
// ([webhook.ErrNotSigned], [webhook.ErrInvalidHeader],
// [webhook.ErrNoValidSignature], [webhook.ErrTooOld]) when the signature is
// missing, wrong or too old; an error wrapping [provider.ErrWebhookMalformed]
// when a correctly signed body is not a Stripe event or its object cannot
// be read.
func (p *Provider) VerifyWebhook(ctx context.Context, header http.Header, body []byte) ([]provider.WebhookEvent, error) {
	ev, err := VerifyWebhook(body, header.Get("Stripe-Signature"), p.webhookSecrets, p.webhookTolerance)
	switch {
	case errors.Is(err, ErrNoWebhookSecret):
		return nil, err
	case isSignatureError(err):
		return nil, fmt.Errorf("%w: %w", provider.ErrWebhookSignature, err)
	case err != nil:
		// The signature matched: stripe-go could not decode the body.
		return nil, fmt.Errorf("%w: %w", provider.ErrWebhookMalformed, err)
	}
	e, err := webhookEvent(ev, body)
	if err != nil {
		return nil, fmt.Errorf("%w: stripe: event %q (%s): %w", provider.ErrWebhookMalformed, ev.ID, ev.Type, err)
	}
	return []provider.WebhookEvent{e}, nil
}

func isSignatureError(err error) bool {
	return errors.Is(err, webhook.ErrNotSigned) || errors.Is(err, webhook.ErrInvalidHeader) ||
		errors.Is(err, webhook.ErrNoValidSignature) || errors.Is(err, webhook.ErrTooOld)
}

// webhookEvent maps a verified event; see [Provider.VerifyWebhook].
func webhookEvent(ev stripego.Event, body []byte) (provider.WebhookEvent, error) {
	if ev.ID == "" || ev.Type == "" || (ev.Object != "" && ev.Object != "event") {
		return provider.WebhookEvent{}, fmt.Errorf("not a Stripe event (object %q, id %q, type %q)", ev.Object, ev.ID, ev.Type)
	}
	out := provider.WebhookEvent{ID: ev.ID, Type: string(ev.Type), Kind: provider.EventIgnored, Body: slices.Clone(body)}
	if ev.Data == nil {
		return out, errors.New("data.object is missing")
	}
	var err error
	switch ev.Type {
	case "payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.processing":
		var pi stripego.PaymentIntent
		if err := decodeObject(ev, "payment_intent", &pi); err != nil {
			return out, err
		}
		out.Key, out.ProviderID = pi.Metadata[MetadataKey], pi.ID
		if out.Amount, err = eventAmount(pi.Amount, pi.Currency); err != nil {
			return out, err
		}
		switch ev.Type {
		case "payment_intent.succeeded":
			out.Kind = provider.EventChargeSucceeded
		case "payment_intent.processing":
			out.Kind = provider.EventChargePending
		default:
			out.Kind = provider.EventChargeFailed
			if e := pi.LastPaymentError; e != nil {
				out.DeclineCode = string(e.DeclineCode)
				if out.DeclineCode == "" {
					out.DeclineCode = string(e.Code)
				}
			}
		}

	case "charge.refunded":
		var ch stripego.Charge
		if err := decodeObject(ev, "charge", &ch); err != nil {
			return out, err
		}
		out.Kind = provider.EventRefundSucceeded
		out.Key = ch.Metadata[MetadataKey]
		if ch.PaymentIntent != nil {
			out.ProviderID, out.ChargeID = ch.PaymentIntent.ID, ch.PaymentIntent.ID
		}
		delta := ch.AmountRefunded
		if prev, ok := ev.Data.PreviousAttributes["amount_refunded"]; ok {
			f, isNum := prev.(float64)
			// f < 1<<63 before int64(f): a larger value converts to a negative int64 and
			// would pass the bound, making the delta negative.
			if !isNum || f != math.Trunc(f) || f < 0 || f >= 1<<63 || int64(f) > ch.AmountRefunded {
				return out, fmt.Errorf("data.previous_attributes.amount_refunded %v is not an amount up to amount_refunded %d", prev, ch.AmountRefunded)
			}
			delta -= int64(f)
		}
		if out.Amount, err = eventAmount(delta, ch.Currency); err != nil {
			return out, err
		}

	case "refund.updated", "refund.failed", "charge.refund.updated":
		var re stripego.Refund
		if err := decodeObject(ev, "refund", &re); err != nil {
			return out, err
		}
		out.Key, out.ProviderID = re.Metadata[MetadataKey], re.ID
		if re.PaymentIntent != nil {
			out.ChargeID = re.PaymentIntent.ID
		}
		if out.Amount, err = eventAmount(re.Amount, re.Currency); err != nil {
			return out, err
		}
		switch re.Status {
		case stripego.RefundStatusFailed:
			// Failed, possibly after it succeeded (a closed card): its
			// failure_balance_transaction gives the amount back to the
			// balance (https://docs.stripe.com/refunds, failed refunds;
			// https://docs.stripe.com/api/refunds/object).
			out.Kind = provider.EventRefundReversed
			out.DeclineCode = string(re.FailureReason)
		case stripego.RefundStatusCanceled:
			// Only a refund not yet succeeded can be canceled.
			out.Kind = provider.EventRefundFailed
			out.DeclineCode = string(re.FailureReason)
		}

	default:
		if md, ok := ev.Data.Object["metadata"].(map[string]any); ok {
			out.Key, _ = md[MetadataKey].(string)
		}
	}
	return out, nil
}

// decodeObject decodes data.object into v after checking its "object".
func decodeObject(ev stripego.Event, object string, v any) error {
	if got, _ := ev.Data.Object["object"].(string); got != object {
		return fmt.Errorf("data.object is a %q, want a %q", got, object)
	}
	if err := json.Unmarshal(ev.Data.Raw, v); err != nil {
		return fmt.Errorf("data.object: %w", err)
	}
	return nil
}

// eventAmount is an event object's amount as Money, in Stripe's units for
// its currency ([FromAmount]).
func eventAmount(amount int64, currency stripego.Currency) (money.Money, error) {
	if _, err := money.ParseCurrency(string(currency)); err != nil {
		return money.Money{}, fmt.Errorf("data.object.currency: %w", err)
	}
	m, err := FromAmount(amount, string(currency))
	if err != nil {
		return money.Money{}, fmt.Errorf("data.object amount: %w", err)
	}
	return m, nil
}
