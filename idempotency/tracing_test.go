package idempotency_test

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/memstore"
)

// With a TracerProvider, Do is a span with the claim, the action and the
// completion as its children, the action's span current in its context,
// and no attribute holding the key.
func TestDoSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	exec, err := idempotency.New(memstore.New(nil), &idempotency.Config{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	if err != nil {
		t.Fatal(err)
	}
	req := idempotency.Request{Scope: "usr_traced", Key: "order-traced-1", Fingerprint: mustFingerprint(t)}
	var inAction trace.SpanContext
	for range 2 {
		if _, err := exec.Do(context.Background(), req, func(ctx context.Context) (idempotency.Response, error) {
			inAction = trace.SpanContextFromContext(ctx)
			return idempotency.Response{Code: 201}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), req.Key) {
				t.Errorf("span %s: attribute %s holds the key", s.Name(), kv.Key)
			}
		}
	}
	if len(byName["idempotency.Do"]) != 2 || len(byName["idempotency.claim"]) != 2 ||
		len(byName["idempotency.action"]) != 1 || len(byName["idempotency.complete"]) != 1 {
		t.Fatalf("spans: %v", byName)
	}
	first := byName["idempotency.Do"][0].SpanContext()
	for _, name := range []string{"idempotency.claim", "idempotency.action", "idempotency.complete"} {
		if p := byName[name][0].Parent(); p.SpanID() != first.SpanID() {
			t.Errorf("%s: parent %s, want the first Do span %s", name, p.SpanID(), first.SpanID())
		}
	}
	if inAction.SpanID() != byName["idempotency.action"][0].SpanContext().SpanID() {
		t.Errorf("the action's context carries span %s, not its action span", inAction.SpanID())
	}
	attrs := map[string]string{}
	for _, kv := range byName["idempotency.complete"][0].Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs[idempotency.AttrStatus] != "COMPLETED" {
		t.Errorf("complete span attributes %v, want status COMPLETED", attrs)
	}
	replayed := false
	for _, kv := range byName["idempotency.Do"][1].Attributes() {
		replayed = replayed || (string(kv.Key) == idempotency.AttrReplayed && kv.Value.AsBool())
	}
	if !replayed {
		t.Errorf("the second Do span does not say it replayed: %v", byName["idempotency.Do"][1].Attributes())
	}
}

// Without a TracerProvider the executor starts no spans of its own: the
// action's context carries the caller's span unchanged, so that spans the
// action starts with the caller's tracer nest under the caller's.
func TestDoWithoutTracerKeepsTheCallersSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("caller")
	exec, err := idempotency.New(memstore.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, caller := tracer.Start(context.Background(), "caller")
	var inAction trace.SpanContext
	if _, err := exec.Do(ctx, idempotency.Request{Scope: "usr_untraced", Key: "order-untraced-1", Fingerprint: mustFingerprint(t)},
		func(ctx context.Context) (idempotency.Response, error) {
			inAction = trace.SpanContextFromContext(ctx)
			return idempotency.Response{Code: 201}, nil
		}); err != nil {
		t.Fatal(err)
	}
	caller.End()
	if !inAction.Equal(caller.SpanContext()) {
		t.Fatalf("the action's context carries span %v, want the caller's %v", inAction.SpanID(), caller.SpanContext().SpanID())
	}
	if n := len(rec.Ended()); n != 1 {
		t.Fatalf("%d spans ended, want the caller's only", n)
	}
}

func mustFingerprint(t *testing.T) idempotency.Fingerprint {
	t.Helper()
	fp, err := idempotency.NewFingerprint().String("sku", "sku_traced").Int("qty", 1).Sum()
	if err != nil {
		t.Fatal(err)
	}
	return fp
}
