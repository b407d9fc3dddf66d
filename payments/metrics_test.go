package payments_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/payonce/payonce/payments"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	paystripe "github.com/payonce/payonce/providers/stripe"
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

	counts, observations := metricTotals(t, reader, "outcome")
	checkTotals(t, counts, map[string]int64{
		"payments.charges" + "{succeeded}": 2,
		"payments.charges" + "{declined}":  1,
		"payments.charges" + "{unknown}":   1,
		"payments.refunds" + "{succeeded}": 1,
		"payments.unknown_outcomes" + "{}": 1,
	})
	if calls := observations["payments.provider_call_duration_ms"]; calls != 5 {
		t.Errorf("provider calls timed = %d, want 5", calls)
	}
}

// Webhook deliveries: stored events by outcome, refusals by reason.
func TestWebhookMetrics(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	pool := pgtest.Pool(t)
	fake := stripetest.NewServer(nil)
	t.Cleanup(fake.Close)
	prov, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_m", BaseURL: fake.URL(), WebhookSecrets: []string{"whsec_m"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := payments.New(pool, []provider.Provider{prov},
		&payments.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.WebhookHandler("stripe", nil)
	if err != nil {
		t.Fatal(err)
	}
	post := func(body, secret string) {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", strings.NewReader(body))
		req.Header.Set("Stripe-Signature", stripetest.Sign([]byte(body), secret, time.Now()))
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	ev := piEvent("evt_m1", "payment_intent.succeeded", "pi_m", "cus_1_charge_none", 100, "succeeded")
	post(ev, "whsec_m")
	post(ev, "whsec_m")
	post(ev, "whsec_wrong")
	post(`{"id": "evt_m2", "object": "event", "type": `, "whsec_m")

	got, _ := metricTotals(t, reader, "outcome", "reason")
	checkTotals(t, got, map[string]int64{
		"payments.webhook_events" + "{unmatched}":   1,
		"payments.webhook_events" + "{duplicate}":   1,
		"payments.webhook_refusals" + "{signature}": 1,
		"payments.webhook_refusals" + "{malformed}": 1,
	})
}

// metricTotals collects reader's metrics: the points of each int64 sum
// added up by name{value} for each of keys a point carries (name{} when it
// carries none), and the observations of each float64 histogram counted
// by name.
func metricTotals(t *testing.T, reader *sdkmetric.ManualReader, keys ...attribute.Key) (map[string]int64, map[string]uint64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums, observations := map[string]int64{}, map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					carried := false
					for _, k := range keys {
						if v, ok := p.Attributes.Value(k); ok {
							sums[m.Name+"{"+v.AsString()+"}"] += p.Value
							carried = true
						}
					}
					if !carried {
						sums[m.Name+"{}"] += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					observations[m.Name] += p.Count
				}
			}
		}
	}
	return sums, observations
}

// checkTotals fails for each total of want that got does not have.
func checkTotals(t *testing.T, got, want map[string]int64) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}
