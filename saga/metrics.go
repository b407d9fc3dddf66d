package saga

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Instrument names. Attributes: saga (the definition's name), step, and
// outcome.
const (
	// MetricStepsExecuted counts step actions run, by outcome: done,
	// failed (permanent), unknown, transient, waiting ([Wait]).
	MetricStepsExecuted = "saga.steps_executed"
	// MetricCompensations counts compensations run, by outcome:
	// compensated (nothing to undo included), failed (permanent: the saga
	// needs review), unknown, transient, waiting ([Wait]: a charge not
	// settled yet; not a failure).
	MetricCompensations = "saga.compensations"
	// MetricStuck counts sagas [Orchestrator.Recover] found stuck (past
	// their lease, or without progress for Config.StuckAfter), by saga.
	// A saga whose wait ([Wait]) ended is not stuck: it is not counted.
	MetricStuck = "saga.stuck"
)

type instruments struct {
	steps, compensations, stuck metric.Int64Counter
}

func newInstruments(mp metric.MeterProvider) (*instruments, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/payonce/payonce/saga")
	var in instruments
	var err error
	for _, c := range []struct {
		dst        *metric.Int64Counter
		name, desc string
	}{
		{&in.steps, MetricStepsExecuted, "Saga step actions run, by saga, step and outcome (done, failed, unknown, transient, waiting)."},
		{&in.compensations, MetricCompensations, "Saga compensations run, by saga, step and outcome (compensated, failed, unknown, transient, waiting)."},
		{&in.stuck, MetricStuck, "Sagas found stuck by recovery (lease ended, or no progress for a while), by saga."},
	} {
		if *c.dst, err = m.Int64Counter(c.name, metric.WithDescription(c.desc)); err != nil {
			return nil, err
		}
	}
	return &in, nil
}

// outcome is the outcome attribute of a step's or compensation's call.
func outcome(c Class, done string) string {
	switch c {
	case ClassPermanent:
		return "failed"
	case ClassUnknown:
		return "unknown"
	case ClassTransient:
		return "transient"
	case ClassWaiting:
		return "waiting"
	}
	return done
}

func (in *instruments) step(ctx context.Context, saga, step string, compensation bool, c Class) {
	ctr, done := in.steps, "done"
	if compensation {
		ctr, done = in.compensations, "compensated"
	}
	ctr.Add(ctx, 1, metric.WithAttributes(attribute.String("saga", saga), attribute.String("step", step),
		attribute.String("outcome", outcome(c, done))))
}

func (in *instruments) found(ctx context.Context, saga string) {
	in.stuck.Add(ctx, 1, metric.WithAttributes(attribute.String("saga", saga)))
}
