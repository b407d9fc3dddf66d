package payments

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/payonce/payonce/payments/provider"
)

// Instrument names.
const (
	metricCharges          = "payments.charges"
	metricRefunds          = "payments.refunds"
	metricUnknownOutcomes  = "payments.unknown_outcomes"
	metricProviderDuration = "payments.provider_call_duration_ms"
	metricWebhookEvents    = "payments.webhook_events"
	metricWebhookRefusals  = "payments.webhook_refusals"
)

type instruments struct {
	charges, refunds, unknown, webhooks, refusals metric.Int64Counter
	duration                                      metric.Float64Histogram
}

func newInstruments(mp metric.MeterProvider) (*instruments, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/payonce/payonce/payments")
	var in instruments
	var err error
	if in.charges, err = m.Int64Counter(metricCharges, metric.WithDescription("Provider answers to charges, by provider and outcome (succeeded, declined, failed, requires_action, pending, unknown, not_sent, in_progress, credentials).")); err != nil {
		return nil, err
	}
	if in.refunds, err = m.Int64Counter(metricRefunds, metric.WithDescription("Provider answers to refunds, by provider and outcome.")); err != nil {
		return nil, err
	}
	if in.unknown, err = m.Int64Counter(metricUnknownOutcomes, metric.WithDescription("Provider calls whose outcome is unknown (timeout, reset, 5xx): intents left open for a retry or the reconciler.")); err != nil {
		return nil, err
	}
	if in.webhooks, err = m.Int64Counter(metricWebhookEvents, metric.WithDescription("Verified webhook events stored, by provider and outcome (applied, confirmed, stale, conflict, unmatched, ignored, duplicate).")); err != nil {
		return nil, err
	}
	if in.refusals, err = m.Int64Counter(metricWebhookRefusals, metric.WithDescription("Webhook deliveries refused or not stored, by provider and reason (signature, malformed, too_large, method, verify_failed, store_failed).")); err != nil {
		return nil, err
	}
	// The name carries the unit (no declared unit: see idempotency's metrics).
	in.duration, err = m.Float64Histogram(metricProviderDuration, metric.WithDescription("Provider call latency, by provider and operation."),
		metric.WithExplicitBucketBoundaries(10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000))
	if err != nil {
		return nil, err
	}
	return &in, nil
}

// outcomeLabel names how a provider call ended.
func outcomeLabel(status string, err error) string {
	switch {
	case err == nil:
		return status
	case errors.Is(err, provider.ErrDeclined):
		return "declined"
	case errors.Is(err, provider.ErrInvalidRequest), errors.Is(err, provider.ErrKeyMismatch):
		return "failed"
	case errors.Is(err, provider.ErrCredentials):
		return "credentials"
	case errors.Is(err, provider.ErrNotSent):
		return "not_sent"
	case errors.Is(err, provider.ErrInProgress):
		return "in_progress"
	}
	return "unknown"
}

// observe records one provider call.
func (in *instruments) observe(ctx context.Context, op, provider, status string, err error, took time.Duration) {
	outcome := outcomeLabel(status, err)
	attrs := metric.WithAttributes(attribute.String("provider", provider), attribute.String("outcome", outcome))
	if op == "charge" {
		in.charges.Add(ctx, 1, attrs)
	} else {
		in.refunds.Add(ctx, 1, attrs)
	}
	if outcome == "unknown" {
		in.unknown.Add(ctx, 1, metric.WithAttributes(attribute.String("provider", provider), attribute.String("operation", op)))
	}
	in.duration.Record(ctx, float64(took)/float64(time.Millisecond),
		metric.WithAttributes(attribute.String("provider", provider), attribute.String("operation", op)))
}

// webhook records one stored (or duplicate) webhook event.
func (in *instruments) webhook(ctx context.Context, provider, outcome string) {
	in.webhooks.Add(ctx, 1, metric.WithAttributes(attribute.String("provider", provider), attribute.String("outcome", outcome)))
}

// refused records one webhook delivery refused or not stored.
func (in *instruments) refused(ctx context.Context, provider, reason string) {
	in.refusals.Add(ctx, 1, metric.WithAttributes(attribute.String("provider", provider), attribute.String("reason", reason)))
}
