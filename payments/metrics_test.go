package payments_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

func TestMetricsScenario(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	b := setupWith(t, &payments.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	ctx := context.Background()
	// A success, a decline, a lost response then its retry, a refund.
	if _, err := b.client.Charge(ctx, params(t, "m1", "10.00", stripetest.PaymentMethodVisa)); err != nil {
		t.Fatal(err)
	}
	_, _ = b.client.Charge(ctx, params(t, "m2", "10.00", stripetest.PaymentMethodDeclined))
	b.fake.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	if _, err := b.client.Charge(ctx, params(t, "m3", "10.00", stripetest.PaymentMethodVisa)); !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v", err)
	}
	if _, err := b.client.Charge(ctx, params(t, "m3", "10.00", stripetest.PaymentMethodVisa)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: "mr", ChargeKey: "m1", Amount: eur(t, "1.00")}); err != nil {
		t.Fatal(err)
	}
	// Replays reach no provider and count nothing.
	_, _ = b.client.Charge(ctx, params(t, "m1", "10.00", stripetest.PaymentMethodVisa))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	var calls uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					o, _ := p.Attributes.Value(attribute.Key("outcome"))
					counts[m.Name+"{"+o.AsString()+"}"] += p.Value
				}
			case metricdata.Histogram[float64]:
				if m.Name == payments.MetricProviderDuration {
					for _, p := range d.DataPoints {
						calls += p.Count
					}
				}
			}
		}
	}
	want := map[string]int64{
		payments.MetricCharges + "{succeeded}": 2,
		payments.MetricCharges + "{declined}":  1,
		payments.MetricCharges + "{unknown}":   1,
		payments.MetricRefunds + "{succeeded}": 1,
		payments.MetricUnknownOutcomes + "{}":  1,
	}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, counts[k], v, counts)
		}
	}
	if calls != 5 {
		t.Errorf("provider calls timed = %d, want 5", calls)
	}
}
