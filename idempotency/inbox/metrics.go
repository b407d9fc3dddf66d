package inbox

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Instrument names, as dashboards and alert rules know them (the
// Prometheus exporter turns dots into underscores and adds _total).
const (
	// MetricMessages counts deliveries by source and outcome (processed,
	// duplicate, poison, retry).
	MetricMessages = "inbox.messages"
	// MetricDeduplicated counts deliveries whose message was already
	// processed: the effects a redelivery did not repeat.
	MetricDeduplicated = "inbox.messages_deduplicated"
	// MetricRedeliveries counts deliveries the broker reports as repeated
	// (Message.Attempt above 1).
	MetricRedeliveries = "inbox.redeliveries"
	// MetricPoison counts poison deliveries.
	MetricPoison = "inbox.poison_messages"
)

type metrics struct {
	messages, deduplicated, redeliveries, poison metric.Int64Counter
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter("github.com/payonce/payonce/idempotency/inbox")
	var m metrics
	var err error
	for _, c := range []struct {
		dst        *metric.Int64Counter
		name, desc string
	}{
		{&m.messages, MetricMessages, "Message deliveries handled, by source and outcome."},
		{&m.deduplicated, MetricDeduplicated, "Deliveries of messages already processed (not run again)."},
		{&m.redeliveries, MetricRedeliveries, "Deliveries the broker reports as repeated."},
		{&m.poison, MetricPoison, "Poison deliveries (a recorded permanent failure, or an identity reused with other content)."},
	} {
		if *c.dst, err = meter.Int64Counter(c.name, metric.WithDescription(c.desc)); err != nil {
			return nil, err
		}
	}
	return &m, nil
}

func (m *metrics) record(ctx context.Context, msg Message, out Outcome) {
	src := metric.WithAttributes(attribute.String("source", msg.Source))
	m.messages.Add(ctx, 1, metric.WithAttributes(attribute.String("source", msg.Source), attribute.String("outcome", out.String())))
	switch out {
	case Duplicate:
		m.deduplicated.Add(ctx, 1, src)
	case Poison:
		m.poison.Add(ctx, 1, src)
	}
	if msg.Attempt > 1 {
		m.redeliveries.Add(ctx, 1, src)
	}
}
