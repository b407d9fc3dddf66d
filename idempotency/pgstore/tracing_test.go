package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
)

// DoTx is one span, idempotency.DoTx, holding the key as a short hash only.
func TestDoTxSpan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := tracetest.NewSpanRecorder()
	exec, err := pgstore.NewExecutor(b.store, &idempotency.Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	if err != nil {
		t.Fatal(err)
	}
	r := childRequest("traced")
	for range 2 {
		if _, err := exec.DoTx(context.Background(), r, func(context.Context, pgx.Tx) (idempotency.Response, error) {
			return idempotency.Response{Code: 201}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	var spans, replayed int
	for _, s := range rec.Ended() {
		if s.Name() != "idempotency.DoTx" {
			continue
		}
		spans++
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), r.Key) {
				t.Errorf("attribute %s holds the key", kv.Key)
			}
			if string(kv.Key) == idempotency.AttrKeyHash && kv.Value.AsString() != idempotency.ShortHash(r.Key) {
				t.Errorf("key hash %q", kv.Value.AsString())
			}
			if string(kv.Key) == idempotency.AttrReplayed && kv.Value.AsBool() {
				replayed++
			}
		}
	}
	if spans != 2 || replayed != 1 {
		t.Fatalf("%d DoTx spans, %d replayed; want 2 and 1", spans, replayed)
	}
}
