package payments

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/payonce/payonce/idempotency"
)

// Span attribute names of package payments (besides idempotency's key and
// scope hashes). Provider keys appear as short hashes; provider object ids
// ("pi_...") and request ids are the provider's own references and appear
// as they are.
const (
	attrProvider         = "payments.provider"
	attrStep             = "payments.step"
	attrProviderKeyHash  = "payments.provider_key_hash"
	attrProviderID       = "payments.provider_id"
	attrRequestID        = "payments.provider_request_id"
	attrProviderStatus   = "payments.provider_status"
	attrProviderReplayed = "payments.provider_replayed"
	attrIntentStatus     = "payments.intent_status"
	attrReplayed         = "payments.replayed"
	attrEvents           = "payments.webhook_events"
	attrEventType        = "payments.webhook_event_type"
	attrEventOutcome     = "payments.webhook_event_outcome"
)

// startCall starts the span of a customer call (payments.charge,
// payments.refund).
func (c *Client) startCall(ctx context.Context, name, provider string, req idempotency.Request) (context.Context, trace.Span) {
	attrs := append(idempotency.KeyAttributes(req.Scope, req.Key), attribute.String(attrProvider, provider))
	return c.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// endCall ends a customer call's span with its outcome.
func endCall(span trace.Span, out Outcome, err error) {
	if out.Status != "" {
		span.SetAttributes(attribute.String(attrIntentStatus, string(out.Status)), attribute.Bool(attrReplayed, out.Replayed))
	}
	if out.ProviderID != "" {
		span.SetAttributes(attribute.String(attrProviderID, out.ProviderID))
	}
	idempotency.EndSpan(span, err)
}

// startProvider starts the span of one provider call (payments.provider.charge,
// payments.provider.refund, payments.provider.lookup).
func (c *Client) startProvider(ctx context.Context, step, provider, providerKey string) (context.Context, trace.Span) {
	return c.tracer.Start(ctx, "payments.provider."+step, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String(attrProvider, provider), attribute.String(attrStep, step),
		attribute.String(attrProviderKeyHash, idempotency.ShortHash(providerKey))))
}

// endProvider ends a provider call's span with what the provider said.
func endProvider(span trace.Span, id, requestID, status string, replayed bool, err error) {
	if id != "" {
		span.SetAttributes(attribute.String(attrProviderID, id))
	}
	if requestID != "" {
		span.SetAttributes(attribute.String(attrRequestID, requestID))
	}
	if status != "" {
		span.SetAttributes(attribute.String(attrProviderStatus, status), attribute.Bool(attrProviderReplayed, replayed))
	}
	idempotency.EndSpan(span, err)
}
