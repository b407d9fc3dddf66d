package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers"
	"github.com/payonce/payonce/providers/fakes"
	"github.com/payonce/payonce/providers/stripe/stripetest"
	"github.com/payonce/payonce/reconcile"
)

// Every span of a charge, its replay, a refund, the webhooks they cause, a
// lost response and the reconciler's repair of it: the spans are there,
// nested as the calls are, carry the provider's references, and never hold
// a key, a provider key, a fingerprint or a body.
func TestSpans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	var handler atomic.Pointer[http.Handler]
	var drop atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if drop.Load() {
			return // answered 200, never applied: the webhook that never came
		}
		(*handler.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	fk := fakes.Start(fakes.Options{Stripe: true, WebhookBase: srv.URL})
	t.Cleanup(fk.Close)
	env := fk.Env()
	cfg, err := providers.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg.TracerProvider = tp
	cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	pool := pgtest.Pool(t)
	client, err := providers.NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	wh, err := client.WebhookHandler("stripe", nil)
	if err != nil {
		t.Fatal(err)
	}
	handler.Store(&wh)

	charge := payments.ChargeParams{Scope: "cus_trace", Key: "order-1", Provider: "stripe",
		Amount: money.MustParse("12.34", money.EUR), Recipient: "acct_t", PaymentMethod: "pm_card_visa"}
	for i := 0; i < 2; i++ { // the charge, then its replay
		if out, err := client.Charge(ctx, charge); err != nil || out.Status != payments.IntentSucceeded || out.Replayed != (i == 1) {
			t.Fatalf("charge %d: %+v %v", i, out, err)
		}
	}
	if _, err := client.Refund(ctx, payments.RefundParams{Scope: "cus_trace", Key: "refund-1", ChargeKey: "order-1",
		Amount: money.MustParse("2.00", money.EUR)}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := fk.WaitDeliveries(wctx); err != nil {
		t.Fatal(err)
	}
	// A lost response, whose webhook never comes: the reconciler repairs it.
	drop.Store(true)
	fk.Stripe.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	lost := charge
	lost.Key = "order-2"
	if _, err := client.Charge(ctx, lost); !errors.Is(err, provider.ErrOutcomeUnknown) {
		t.Fatalf("lost response: %v", err)
	}
	var progressed []string
	r, err := reconcile.New(pool, client, &reconcile.Config{TracerProvider: tp, Grace: time.Millisecond,
		VoidAfter: time.Millisecond, Schedule: []time.Duration{time.Millisecond}, MaxChecks: 4,
		Progress: func(examined, claimed int) { progressed = append(progressed, fmt.Sprintf("%d/%d", examined, claimed)) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := r.RunOnce(ctx); err != nil || rep.Repaired != 1 {
		t.Fatalf("reconcile: %+v %v", rep, err)
	}
	if strings.Join(progressed, " ") != "1/1" {
		t.Errorf("progress reported %v, want [1/1]", progressed)
	}

	spans := rec.Ended()
	byID := map[[8]byte]sdktrace.ReadOnlySpan{}
	names := map[string]int{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
		names[s.Name()]++
	}
	for _, name := range []string{"payments.charge", "payments.refund", "payments.provider.charge", "payments.provider.refund",
		"idempotency.Do", "idempotency.claim", "idempotency.action", "payments.webhook.apply", "payments.webhook.event",
		"reconcile.run", "reconcile.examine", "payments.provider.lookup"} {
		if names[name] == 0 {
			t.Errorf("no %s span (spans: %v)", name, names)
		}
	}
	attr := func(s sdktrace.ReadOnlySpan, k string) (attribute.Value, bool) {
		for _, kv := range s.Attributes() {
			if string(kv.Key) == k {
				return kv.Value, true
			}
		}
		return attribute.Value{}, false
	}
	parent := func(s sdktrace.ReadOnlySpan) string {
		if p, ok := byID[s.Parent().SpanID()]; ok {
			return p.Name()
		}
		return ""
	}
	var replayed, unknown, repaired, requestIDs int
	for _, s := range spans {
		switch s.Name() {
		case "payments.provider.charge":
			// payments.charge > idempotency.Do > idempotency.action > the provider call.
			if parent(s) != "idempotency.action" {
				t.Errorf("provider call under %q", parent(s))
			}
			if v, ok := attr(s, "payments.provider_request_id"); ok && strings.HasPrefix(v.AsString(), "req_") {
				requestIDs++
			}
		case "idempotency.action":
			if parent(s) != "idempotency.Do" {
				t.Errorf("action under %q", parent(s))
			}
		case "idempotency.Do":
			if p := parent(s); p != "payments.charge" && p != "payments.refund" {
				t.Errorf("idempotency.Do under %q", p)
			}
		case "payments.charge":
			if v, _ := attr(s, "payments.replayed"); v.AsBool() {
				replayed++
			}
			if s.Status().Code == codes.Error {
				unknown++
				if v, _ := attr(s, idempotency.AttrErrorClass); v.AsString() != "*provider.UnknownOutcomeError" {
					t.Errorf("unknown outcome's class %q", v.AsString())
				}
			}
		case "reconcile.examine":
			if v, _ := attr(s, "reconcile.done"); v.AsString() == "repaired" {
				repaired++
			}
			if parent(s) != "reconcile.run" {
				t.Errorf("examine under %q", parent(s))
			}
		}
	}
	if replayed != 1 || unknown != 1 || repaired != 1 || requestIDs < 1 {
		t.Errorf("replayed %d, unknown %d, repaired %d, provider request ids %d; want 1, 1, 1, >= 1", replayed, unknown, repaired, requestIDs)
	}

	// Nothing secret in any span: not the keys, scopes, provider keys,
	// fingerprints or bodies payonce stored, nor anything shaped like a
	// body.
	var secrets []string
	rows, err := pool.Query(ctx, `SELECT idempotency_key, fingerprint, coalesce(convert_from(response_raw, 'UTF8'), '') FROM idempotency_store
		UNION ALL SELECT provider_key, idempotency_key, '' FROM payment_intents`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a, b, c string
		if err := rows.Scan(&a, &b, &c); err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, a, b)
		if c != "" {
			secrets = append(secrets, c)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(secrets) < 6 {
		t.Fatalf("only %d stored values to look for", len(secrets))
	}
	check := func(s sdktrace.ReadOnlySpan, where, v string) {
		for _, sec := range secrets {
			if strings.Contains(v, sec) {
				t.Errorf("span %s %s holds %q", s.Name(), where, sec)
			}
		}
		if len(v) > 80 || strings.ContainsAny(v, "{}") {
			t.Errorf("span %s %s holds %q: longer or more structured than an identifier", s.Name(), where, v)
		}
	}
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			check(s, string(kv.Key), kv.Value.Emit())
		}
		check(s, "status", s.Status().Description)
		for _, ev := range s.Events() {
			for _, kv := range ev.Attributes {
				check(s, "event "+ev.Name+" "+string(kv.Key), kv.Value.Emit())
			}
		}
	}
}
