package paypal

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

// The headers of a PayPal webhook delivery that verify-webhook-signature needs.
const (
	HeaderAuthAlgo         = "PAYPAL-AUTH-ALGO"
	HeaderCertURL          = "PAYPAL-CERT-URL"
	HeaderTransmissionID   = "PAYPAL-TRANSMISSION-ID"
	HeaderTransmissionSig  = "PAYPAL-TRANSMISSION-SIG"
	HeaderTransmissionTime = "PAYPAL-TRANSMISSION-TIME"
)

// webhookEvent is PayPal's event envelope, with the resource fields payonce reads (a capture's
// or a refund's).
type webhookEvent struct {
	ID           string   `json:"id"`
	EventType    string   `json:"event_type"`
	ResourceType string   `json:"resource_type"`
	Resource     *Capture `json:"resource"`
}

// VerifyWebhook authenticates one PayPal delivery with POST
// /v1/notifications/verify-webhook-signature (the PAYPAL-* headers, Config.WebhookID and the
// event as received) and returns its event:
//
//	PAYMENT.CAPTURE.COMPLETED            EventChargeSucceeded  Reference custom_id, ProviderID the order id
//	PAYMENT.CAPTURE.DECLINED, .DENIED    EventChargeFailed     DeclineCode the processor's response code
//	PAYMENT.CAPTURE.PENDING              EventChargePending
//	PAYMENT.CAPTURE.REFUNDED             EventRefundSucceeded  Reference the refund's custom_id, ProviderID the refund id
//	anything else                        EventIgnored
//
// For capture events ProviderID and ChargeID are the order id (supplementary_data.related_ids),
// the id [Provider.Charge] reports; a refund event does not name the order, so its ChargeID is
// empty. PayPal redelivers up to 25 times over 3 days: dedupe on ID, the event id.
//
// Errors: wrapping [provider.ErrWebhookSignature] when a PAYPAL-* header is missing or PayPal
// answers FAILURE; wrapping [provider.ErrWebhookMalformed] when the body is not an event; a
// *[ConfigError] without Config.WebhookID; anything else (the verification API unreachable or
// failing) is a plain error: answer the delivery 5xx so that PayPal sends it again.
func (p *Provider) VerifyWebhook(ctx context.Context, header http.Header, body []byte) ([]provider.WebhookEvent, error) {
	if p.c.cfg.WebhookID == "" {
		return nil, &ConfigError{Field: "WebhookID", Reason: "is required to verify webhooks"}
	}
	req := VerifyWebhookSignatureRequest{WebhookID: p.c.cfg.WebhookID}
	for _, h := range []struct {
		name string
		dst  *string
	}{
		{HeaderAuthAlgo, &req.AuthAlgo}, {HeaderCertURL, &req.CertURL}, {HeaderTransmissionID, &req.TransmissionID},
		{HeaderTransmissionSig, &req.TransmissionSig}, {HeaderTransmissionTime, &req.TransmissionTime},
	} {
		if *h.dst = header.Get(h.name); *h.dst == "" {
			return nil, fmt.Errorf("%w: header %s is missing", provider.ErrWebhookSignature, h.name)
		}
	}
	var ev webhookEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, fmt.Errorf("%w: %v", provider.ErrWebhookMalformed, err)
	}
	if ev.ID == "" || ev.EventType == "" {
		return nil, fmt.Errorf("%w: event without id or event_type", provider.ErrWebhookMalformed)
	}
	req.WebhookEvent = json.RawMessage(body)
	status, err := p.c.VerifyWebhookSignature(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("paypal: verifying the webhook signature (answer 5xx, PayPal redelivers): %w", err)
	}
	if status != VerificationSuccess {
		return nil, fmt.Errorf("%w: PayPal answered verification_status %s for transmission %s",
			provider.ErrWebhookSignature, status, req.TransmissionID)
	}
	return []provider.WebhookEvent{toEvent(ev, body)}, nil
}

func toEvent(ev webhookEvent, body []byte) provider.WebhookEvent {
	out := provider.WebhookEvent{ID: ev.ID, Type: ev.EventType, Kind: provider.EventIgnored, Body: body}
	r := ev.Resource
	if r == nil {
		return out
	}
	var amount money.Money
	if m, err := r.Amount.Money(); err == nil {
		amount = m
	}
	orderID := ""
	if r.SupplementaryData != nil {
		orderID = r.SupplementaryData.RelatedIDs.OrderID
	}
	switch ev.EventType {
	case "PAYMENT.CAPTURE.COMPLETED":
		out.Kind = provider.EventChargeSucceeded
	case "PAYMENT.CAPTURE.DECLINED", "PAYMENT.CAPTURE.DENIED":
		out.Kind = provider.EventChargeFailed
		out.DeclineCode = declineCode(r)
	case "PAYMENT.CAPTURE.PENDING":
		out.Kind = provider.EventChargePending
	case "PAYMENT.CAPTURE.REFUNDED":
		out.Kind = provider.EventRefundSucceeded
		out.Reference, out.ProviderID, out.Amount = r.CustomID, r.ID, amount
		return out
	default:
		return out
	}
	out.Reference, out.ProviderID, out.ChargeID, out.Amount = r.CustomID, orderID, orderID, amount
	return out
}
