package inbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/inbox"
	"github.com/payonce/payonce/idempotency/memstore"
)

// memEffects is a consumer's table in memory: a handler's write is
// applied when the inbox's transaction commits (memstore.Tx.OnCommit),
// and never when it rolls back.
type memEffects struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *memEffects) insert(_ context.Context, tx *memstore.Tx, m inbox.Message) error {
	tx.OnCommit(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.n[m.ID]++
	})
	return nil
}

func (e *memEffects) count(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[id]
}

// The inbox runs on any transaction-aware store: memstore stands in for
// PostgreSQL in a consumer's unit tests, with the same outcomes.
func TestOnMemstore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := func(t *testing.T) (*inbox.Inbox[*memstore.Tx], *memEffects) {
		in, err := inbox.New(memstore.New(nil), &inbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return in, &memEffects{n: map[string]int{}}
	}

	t.Run("redelivery is a duplicate", func(t *testing.T) {
		in, fx := setup(t)
		for attempt, want := range []inbox.Outcome{inbox.Processed, inbox.Duplicate, inbox.Duplicate} {
			out, err := in.HandleTx(ctx, message(t, "m-1", "a", attempt+1), fx.insert)
			if out != want || err != nil {
				t.Fatalf("delivery %d: %v %v, want %v", attempt+1, out, err, want)
			}
		}
		if n := fx.count("m-1"); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})

	t.Run("a transient failure leaves nothing", func(t *testing.T) {
		in, fx := setup(t)
		boom := errors.New("downstream unavailable")
		out, err := in.HandleTx(ctx, message(t, "m-2", "a", 1), func(ctx context.Context, tx *memstore.Tx, m inbox.Message) error {
			if err := fx.insert(ctx, tx, m); err != nil {
				return err
			}
			return boom
		})
		if out != inbox.Retry || !errors.Is(err, boom) || fx.count("m-2") != 0 {
			t.Fatalf("transient: %v %v, %d effects", out, err, fx.count("m-2"))
		}
		if out, err := in.HandleTx(ctx, message(t, "m-2", "a", 2), fx.insert); out != inbox.Processed || err != nil {
			t.Fatalf("redelivery: %v %v", out, err)
		}
		if n := fx.count("m-2"); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})

	t.Run("poison is recorded once", func(t *testing.T) {
		in, fx := setup(t)
		var runs atomic.Int64
		bad := func(ctx context.Context, tx *memstore.Tx, m inbox.Message) error {
			runs.Add(1)
			if err := fx.insert(ctx, tx, m); err != nil {
				return err
			}
			return idempotency.Permanent(errors.New("unknown sku"), idempotency.Response{Code: 422})
		}
		for attempt := 1; attempt <= 3; attempt++ {
			if out, err := in.HandleTx(ctx, message(t, "m-3", "a", attempt), bad); out != inbox.Poison || !errors.Is(err, idempotency.ErrFailed) {
				t.Fatalf("delivery %d: %v %v", attempt, out, err)
			}
		}
		if runs.Load() != 1 || fx.count("m-3") != 0 {
			t.Fatalf("handler ran %d times, %d effects; want 1 and 0", runs.Load(), fx.count("m-3"))
		}
	})

	t.Run("other content is poison", func(t *testing.T) {
		in, fx := setup(t)
		if out, err := in.HandleTx(ctx, message(t, "m-4", "a", 1), fx.insert); out != inbox.Processed || err != nil {
			t.Fatalf("first: %v %v", out, err)
		}
		if out, err := in.HandleTx(ctx, message(t, "m-4", "b", 1), fx.insert); out != inbox.Poison || !errors.Is(err, idempotency.ErrFingerprintMismatch) {
			t.Fatalf("other content: %v %v", out, err)
		}
		if n := fx.count("m-4"); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})

	// Concurrent deliveries: the handler of the first holds its
	// transaction open until every other consumer has come and gone or is
	// waiting on its key; one effect.
	t.Run("concurrent deliveries, one effect", func(t *testing.T) {
		in, fx := setup(t)
		var processed, others atomic.Int64
		const consumers = 16
		inside, release := make(chan struct{}), make(chan struct{})
		var wg sync.WaitGroup
		for i := range consumers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for attempt := 1; ; attempt++ {
					out, err := in.HandleTx(ctx, message(t, "m-5", "a", attempt), func(ctx context.Context, tx *memstore.Tx, m inbox.Message) error {
						close(inside)
						<-release
						return fx.insert(ctx, tx, m)
					})
					switch out {
					case inbox.Processed:
						processed.Add(1)
					case inbox.Duplicate:
						others.Add(1)
					case inbox.Retry:
						continue
					default:
						t.Errorf("consumer %d: %v %v", i, out, err)
					}
					return
				}
			}()
		}
		<-inside
		close(release)
		wg.Wait()
		if n := fx.count("m-5"); n != 1 || processed.Load() != 1 || others.Load() != consumers-1 {
			t.Fatalf("%d effects, %d processed, %d duplicates; want 1, 1, %d", n, processed.Load(), others.Load(), consumers-1)
		}
	})

	t.Run("bad input is poison, nothing recorded", func(t *testing.T) {
		in, fx := setup(t)
		m := message(t, "topic/0/42", "a", 1)
		out, err := in.HandleTx(ctx, m, fx.insert)
		if out != inbox.Poison || !errors.Is(err, idempotency.ErrInvalid) || fx.count(m.ID) != 0 {
			t.Fatalf("malformed id: %v %v", out, err)
		}
		m.ID = inbox.MessageID("topic", "0", "42")
		if out, err := in.HandleTx(ctx, m, fx.insert); out != inbox.Processed || err != nil {
			t.Fatalf("through MessageID: %v %v", out, err)
		}
	})
}

// Config.TracerProvider reaches the inbox's executor: a span for each
// delivery, the duplicate's included, holding the key only as its short
// hash.
func TestTracerProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	in, err := inbox.New(memstore.New(nil), &inbox.Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	if err != nil {
		t.Fatal(err)
	}
	fx := &memEffects{n: map[string]int{}}
	m := message(t, "m-traced-7f3a", "a", 1)
	for _, want := range []inbox.Outcome{inbox.Processed, inbox.Duplicate} {
		if out, err := in.HandleTx(ctx, m, fx.insert); out != want || err != nil {
			t.Fatalf("HandleTx: %v %v, want %v", out, err, want)
		}
	}
	key, err := m.Key()
	if err != nil {
		t.Fatal(err)
	}
	spans := 0
	for _, s := range rec.Ended() {
		if s.Name() != "idempotency.DoTx" {
			continue
		}
		spans++
		hashed := false
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), m.ID) {
				t.Errorf("attribute %s holds the message's id: %q", kv.Key, kv.Value.Emit())
			}
			hashed = hashed || (string(kv.Key) == idempotency.AttrKeyHash && kv.Value.AsString() == idempotency.ShortHash(key))
		}
		if !hashed {
			t.Errorf("span without the key's short hash: %v", s.Attributes())
		}
	}
	if spans != 2 {
		t.Fatalf("%d idempotency.DoTx spans, want 2 (one per delivery)", spans)
	}
}
