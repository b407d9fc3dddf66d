package cronslot_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/cronslot"
	"github.com/payonce/payonce/idempotency/memstore"
)

// The guard runs on any transaction-aware store: memstore stands in for
// PostgreSQL in a scheduler's unit tests, with the same outcomes.
func TestOnMemstore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := cronslot.Parse("@hourly")
	if err != nil {
		t.Fatal(err)
	}

	// Eight schedulers fire the same slot at once while its run holds
	// its transaction open: one run, one committed write; the others
	// are skipped, never a second run.
	t.Run("one run per slot", func(t *testing.T) {
		store := memstore.New(nil)
		clock := &manualClock{}
		clock.Set(at("2026-12-03T12:00:00.5Z"))
		var runs, written atomic.Int64
		inside, release := make(chan struct{}), make(chan struct{})
		job := func(_ context.Context, tx *memstore.Tx, _ cronslot.Slot) error {
			if runs.Add(1) == 1 {
				close(inside)
				<-release
			}
			tx.OnCommit(func() { written.Add(1) })
			return nil
		}
		var wg sync.WaitGroup
		outcomes := make(chan cronslot.Outcome, 8)
		for range 8 {
			g, err := cronslot.New(store, &cronslot.Config{Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := g.RunSlot(ctx, "report", s.Slot(clock.Now()), nil, job)
				if err != nil {
					t.Error(err)
				}
				outcomes <- out
			}()
		}
		<-inside
		close(release)
		wg.Wait()
		close(outcomes)
		ran := 0
		for out := range outcomes {
			if out == cronslot.Ran {
				ran++
			} else if out != cronslot.Skipped {
				t.Errorf("outcome %v, want ran or skipped", out)
			}
		}
		if runs.Load() != 1 || written.Load() != 1 || ran != 1 {
			t.Fatalf("%d runs, %d writes, %d ran; want 1 each", runs.Load(), written.Load(), ran)
		}
	})

	// A transient failure commits nothing and leaves the slot to a later
	// firing; a permanent one is final; catch-up runs missed slots.
	t.Run("outcomes and catch-up", func(t *testing.T) {
		clock := &manualClock{}
		g, err := cronslot.New(memstore.New(nil), &cronslot.Config{Clock: clock.Now, CatchUp: 3})
		if err != nil {
			t.Fatal(err)
		}
		var ran []string
		written := map[string]int{}
		fail := map[string]error{"2026-12-03T09:00:00Z": errors.New("dependency down"),
			"2026-12-03T10:00:00Z": idempotency.Permanent(errors.New("bad month"), idempotency.Response{})}
		job := func(_ context.Context, tx *memstore.Tx, sl cronslot.Slot) error {
			k := sl.At.Format(time.RFC3339)
			ran = append(ran, k)
			tx.OnCommit(func() { written[k]++ })
			return fail[k]
		}
		clock.Set(at("2026-12-03T11:00:01Z"))
		if err := g.Fire(ctx, "hourly-sum", s, nil, job); err == nil {
			t.Fatal("the failures were not reported")
		}
		if got := strings.Join(ran, " "); got != "2026-12-03T08:00:00Z 2026-12-03T09:00:00Z 2026-12-03T10:00:00Z 2026-12-03T11:00:00Z" {
			t.Fatalf("ran %s", got)
		}
		if written["2026-12-03T09:00:00Z"] != 0 || written["2026-12-03T10:00:00Z"] != 0 || written["2026-12-03T11:00:00Z"] != 1 {
			t.Fatalf("writes %v: a failed slot's write committed, or a run's did not", written)
		}
		ran = nil
		delete(fail, "2026-12-03T09:00:00Z")
		clock.Set(at("2026-12-03T12:00:00Z"))
		if err := g.Fire(ctx, "hourly-sum", s, nil, job); !errors.Is(err, idempotency.ErrFailed) {
			t.Fatalf("second firing: %v, want the recorded failure", err)
		}
		if got := strings.Join(ran, " "); got != "2026-12-03T09:00:00Z 2026-12-03T12:00:00Z" {
			t.Fatalf("second firing ran %s", got)
		}
	})
}

// Config.TracerProvider reaches the guard's executor: a span for each
// slot's run, DoTx for a job in the slot's transaction and Do otherwise,
// holding the slot's key only as its short hash.
func TestTracerProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	g, err := cronslot.New(memstore.New(nil), &cronslot.Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	if err != nil {
		t.Fatal(err)
	}
	at := at("2026-12-03T12:00:00Z")
	if out, err := g.RunSlot(ctx, "nightly-report", at, nil, func(context.Context, *memstore.Tx, cronslot.Slot) error { return nil }); out != cronslot.Ran || err != nil {
		t.Fatalf("RunSlot in a transaction: %v %v", out, err)
	}
	if out, err := g.RunSlot(ctx, "nightly-export", at, func(context.Context, cronslot.Slot) error { return nil }, nil); out != cronslot.Ran || err != nil {
		t.Fatalf("RunSlot: %v %v", out, err)
	}
	want := map[string]string{"idempotency.DoTx": "nightly-report", "idempotency.Do": "nightly-export"}
	for _, s := range rec.Ended() {
		job, ok := want[s.Name()]
		if !ok {
			continue
		}
		delete(want, s.Name())
		key, err := cronslot.SlotKey(job, at)
		if err != nil {
			t.Fatal(err)
		}
		hashed := false
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), key) {
				t.Errorf("%s: attribute %s holds the slot's key", s.Name(), kv.Key)
			}
			hashed = hashed || (string(kv.Key) == idempotency.AttrKeyHash && kv.Value.AsString() == idempotency.ShortHash(key))
		}
		if !hashed {
			t.Errorf("%s: no attribute holds the key's short hash: %v", s.Name(), s.Attributes())
		}
	}
	if len(want) != 0 {
		t.Fatalf("no span %v", want)
	}
}

// A negative duration is refused naming its own field.
func TestNegativeDurationsNameTheirField(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]*cronslot.Config{
		"Config.LockTimeout": {LockTimeout: -time.Second},
		"Config.Retention":   {Retention: -time.Hour},
		"Config.Tolerance":   {Tolerance: -time.Millisecond},
	} {
		_, err := cronslot.New(memstore.New(nil), cfg)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != field || !strings.Contains(ie.Reason, "got -") {
			t.Errorf("%+v: %v, want an InvalidError on %s with the value given", cfg, err, field)
		}
	}
}
