package reconcile

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Instrument names.
const (
	MetricExamined        = "reconcile.items_examined"
	MetricRepaired        = "reconcile.repaired"
	MetricFailedWithProof = "reconcile.failed_with_proof"
	MetricNeedsReview     = "reconcile.needs_review"
	MetricDivergences     = "reconcile.divergences"
	MetricRunDuration     = "reconcile.run_duration_ms"
	MetricRunErrors       = "reconcile.run_errors"
)

type instruments struct {
	examined, repaired, failed, review, divergences, errors metric.Int64Counter
	duration                                                metric.Float64Histogram
}

func newInstruments(mp metric.MeterProvider) (*instruments, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/payonce/payonce/reconcile")
	var in instruments
	var err error
	counters := []struct {
		dst        *metric.Int64Counter
		name, desc string
	}{
		{&in.examined, MetricExamined, "Open intents the reconciler examined."},
		{&in.repaired, MetricRepaired, "Intents completed locally from the provider's proof of success."},
		{&in.failed, MetricFailedWithProof, "Intents failed (or reopened for a new attempt) on the provider's proof that nothing was charged."},
		{&in.review, MetricNeedsReview, "Intents flagged NEEDS_REVIEW: no proof either way after every check, or a contradiction."},
		{&in.divergences, MetricDivergences, "Divergences between local and provider state, by kind and provider."},
		{&in.errors, MetricRunErrors, "Reconciler runs that ended with an error."},
	}
	for _, c := range counters {
		if *c.dst, err = m.Int64Counter(c.name, metric.WithDescription(c.desc)); err != nil {
			return nil, err
		}
	}
	in.duration, err = m.Float64Histogram(MetricRunDuration, metric.WithDescription("Reconciler run duration."),
		metric.WithExplicitBucketBoundaries(10, 50, 100, 500, 1000, 5000, 10000, 30000, 60000, 300000))
	if err != nil {
		return nil, err
	}
	return &in, nil
}

func (in *instruments) run(ctx context.Context, r *Report, took time.Duration) {
	in.examined.Add(ctx, int64(r.Examined))
	in.repaired.Add(ctx, int64(r.Repaired))
	in.failed.Add(ctx, int64(r.FailedWithProof))
	in.review.Add(ctx, int64(r.NeedsReview))
	in.duration.Record(ctx, float64(took)/float64(time.Millisecond))
	if r.Error != "" {
		in.errors.Add(ctx, 1)
	}
}

func (in *instruments) divergence(ctx context.Context, x Item) {
	in.divergences.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", string(x.Kind)), attribute.String("provider", x.Provider)))
}
