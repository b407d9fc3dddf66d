package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/memstore"
)

type prunerBundle struct {
	store  *memstore.Store
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	// advance moves the store's clock.
	advance func(time.Duration)
	// seq numbers the keys of fill.
	seq atomic.Int64
}

func setupPruner(t *testing.T) *prunerBundle {
	t.Helper()
	b := &prunerBundle{reader: sdkmetric.NewManualReader()}
	b.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(b.reader))
	var offset atomic.Int64
	b.advance = func(d time.Duration) { offset.Add(int64(d)) }
	// EvictAfter < 0: only Prune deletes, as with pgstore.
	b.store = memstore.New(&memstore.Config{EvictAfter: -1,
		Clock: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }})
	return b
}

// fill adds n records in status st (PROCESSING, or COMPLETED with an
// hour's retention).
func (b *prunerBundle) fill(t *testing.T, n int, st idempotency.Status) {
	t.Helper()
	ctx := context.Background()
	fp, err := idempotency.NewFingerprint().String("a", "b").Sum()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		key, err := idempotency.ComposeKey("usr_p", "pay", strconv.FormatInt(b.seq.Add(1), 10))
		if err != nil {
			t.Fatal(err)
		}
		c, err := b.store.Claim(ctx, idempotency.ClaimParams{Scope: "usr_p", Key: key, Fingerprint: fp,
			LockTimeout: time.Minute, Retention: time.Hour})
		if err != nil || c.State != idempotency.ClaimAcquired {
			t.Fatalf("claim: %v %v", c.State, err)
		}
		if st == idempotency.StatusProcessing {
			continue
		}
		if err := b.store.Complete(ctx, c.Lease, idempotency.Completion{Status: st,
			Response: idempotency.Response{Code: 201}, Retention: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
}

type pruneMetrics struct {
	pruned int64
	passes map[string]uint64 // prune_duration_ms count by outcome
}

func (b *prunerBundle) metrics(t *testing.T) pruneMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := b.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := pruneMetrics{passes: map[string]uint64{}}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case idempotency.MetricPrunedRecords:
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					out.pruned += p.Value
				}
			case idempotency.MetricPruneDuration:
				// The name carries the unit; a declared unit would make
				// the Prometheus exporter append "_milliseconds".
				if m.Unit != "" {
					t.Errorf("%s unit = %q, want none", m.Name, m.Unit)
				}
				for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					o, _ := p.Attributes.Value(attribute.Key("outcome"))
					out.passes[o.AsString()] += p.Count
				}
			}
		}
	}
	return out
}

func (b *prunerBundle) pruner(t *testing.T, store idempotency.Store, cfg idempotency.PrunerConfig) *idempotency.Pruner {
	t.Helper()
	cfg.MeterProvider = b.mp
	p, err := idempotency.NewPruner(store, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Expired records go in batches; PROCESSING and live records stay; the
// report and the instruments count exactly.
func TestPrunerRunOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPruner(t)
	b.fill(t, 2500, idempotency.StatusCompleted)
	b.fill(t, 7, idempotency.StatusProcessing) // orphans once the clock moves: never pruned
	b.advance(2 * time.Hour)
	b.fill(t, 11, idempotency.StatusCompleted) // live
	p := b.pruner(t, b.store, idempotency.PrunerConfig{BatchSize: 1000, Pause: time.Millisecond})

	rep, err := p.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Deleted != 2500 || rep.Batches != 3 || !rep.Drained || rep.Duration <= 0 {
		t.Fatalf("report = %+v, want 2500 deleted in 3 batches, drained", rep)
	}
	if n := b.store.Len(); n != 18 {
		t.Fatalf("store holds %d records, want 7 PROCESSING + 11 live", n)
	}
	rep, err = p.RunOnce(ctx)
	if err != nil || rep.Deleted != 0 || rep.Batches != 1 || !rep.Drained {
		t.Fatalf("second pass: %+v %v", rep, err)
	}
	// A backlog that is an exact multiple of the batch ends with an empty batch.
	b.advance(2 * time.Hour) // the 11 live records expire
	b.fill(t, 989, idempotency.StatusFailed)
	b.advance(2 * time.Hour)
	rep, err = p.RunOnce(ctx)
	if err != nil || rep.Deleted != 1000 || rep.Batches != 2 || !rep.Drained {
		t.Fatalf("third pass: %+v %v", rep, err)
	}
	if n := b.store.Len(); n != 7 {
		t.Fatalf("store holds %d records, want the 7 PROCESSING", n)
	}
	m := b.metrics(t)
	if m.pruned != 3500 || m.passes["ok"] != 3 || len(m.passes) != 1 {
		t.Fatalf("metrics = %+v, want 3500 pruned in 3 ok passes", m)
	}
}

func TestPrunerMaxBatchesPerRun(t *testing.T) {
	t.Parallel()
	b := setupPruner(t)
	b.fill(t, 2500, idempotency.StatusCompleted)
	b.advance(2 * time.Hour)
	p := b.pruner(t, b.store, idempotency.PrunerConfig{BatchSize: 1000, MaxBatchesPerRun: 2, Pause: -1})
	rep, err := p.RunOnce(context.Background())
	if err != nil || rep.Deleted != 2000 || rep.Batches != 2 || rep.Drained {
		t.Fatalf("report = %+v %v, want 2000 in 2 batches, not drained", rep, err)
	}
	if m := b.metrics(t); m.pruned != 2000 {
		t.Fatalf("pruned_records = %d, want 2000", m.pruned)
	}
}

// flakyStore fails or blocks its Prune calls on demand.
type flakyStore struct {
	idempotency.Store
	prune func(ctx context.Context, call int, limit int) (int, error)
	calls atomic.Int64
}

func (s *flakyStore) Prune(ctx context.Context, limit int) (int, error) {
	return s.prune(ctx, int(s.calls.Add(1)), limit)
}

// A failing batch ends the pass with the store's error; what earlier
// batches deleted is still reported and counted.
func TestPrunerStoreError(t *testing.T) {
	t.Parallel()
	b := setupPruner(t)
	boom := errors.New("connection refused")
	s := &flakyStore{Store: b.store, prune: func(ctx context.Context, call, limit int) (int, error) {
		if call == 2 {
			return 0, boom
		}
		return limit, nil
	}}
	p := b.pruner(t, s, idempotency.PrunerConfig{BatchSize: 10, Pause: time.Microsecond})
	rep, err := p.RunOnce(context.Background())
	if !errors.Is(err, boom) || rep.Deleted != 10 || rep.Batches != 1 || rep.Drained {
		t.Fatalf("report = %+v, err = %v", rep, err)
	}
	if m := b.metrics(t); m.pruned != 10 || m.passes["error"] != 1 {
		t.Fatalf("metrics = %+v", m)
	}
}

// A pass stops when its context ends, between batches or during one.
func TestPrunerContextEnds(t *testing.T) {
	t.Parallel()
	b := setupPruner(t)
	ctx, cancel := context.WithCancel(context.Background())
	s := &flakyStore{Store: b.store, prune: func(ctx context.Context, call, limit int) (int, error) {
		if call == 3 {
			cancel()
			return 0, ctx.Err()
		}
		return limit, nil
	}}
	p := b.pruner(t, s, idempotency.PrunerConfig{BatchSize: 5, Pause: time.Microsecond})
	rep, err := p.RunOnce(ctx)
	if !errors.Is(err, context.Canceled) || rep.Deleted != 10 || rep.Batches != 2 {
		t.Fatalf("report = %+v, err = %v", rep, err)
	}
	rep, err = p.RunOnce(ctx)
	if !errors.Is(err, context.Canceled) || rep.Batches != 0 {
		t.Fatalf("pass on an ended context: %+v, %v", rep, err)
	}
	if m := b.metrics(t); m.pruned != 10 || m.passes["canceled"] != 2 {
		t.Fatalf("metrics = %+v", m)
	}
}

func TestNewPrunerRefusesBadConfig(t *testing.T) {
	t.Parallel()
	store := memstore.New(nil)
	for _, tc := range []struct {
		field string
		cfg   idempotency.PrunerConfig
	}{
		{"PrunerConfig.Schedule", idempotency.PrunerConfig{Schedule: "every minute"}},
		{"PrunerConfig.Schedule", idempotency.PrunerConfig{Schedule: "61 * * * *"}},
		{"PrunerConfig.BatchSize", idempotency.PrunerConfig{BatchSize: -1}},
		{"PrunerConfig.BatchSize", idempotency.PrunerConfig{BatchSize: 1_000_000}},
		{"PrunerConfig.MaxBatchesPerRun", idempotency.PrunerConfig{MaxBatchesPerRun: -1}},
	} {
		_, err := idempotency.NewPruner(store, &tc.cfg)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field || !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("%+v: err = %v, want an *InvalidError for %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := idempotency.NewPruner(nil, nil); !errors.Is(err, idempotency.ErrInvalid) {
		t.Errorf("nil store: %v", err)
	}
	for _, spec := range []string{"@every 1m", "@hourly", "*/5 * * * *", "30 */5 * * * *"} {
		if _, err := idempotency.NewPruner(store, &idempotency.PrunerConfig{Schedule: spec}); err != nil {
			t.Errorf("schedule %q: %v", spec, err)
		}
	}
	p, err := idempotency.NewPruner(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := p.Config()
	if got.Schedule != "@every 1m" || got.BatchSize != 1000 || got.Pause != 10*time.Millisecond ||
		got.MaxBatchesPerRun != 0 || got.MeterProvider == nil || got.Logger == nil {
		t.Errorf("defaults = %+v", got)
	}
}

// The scheduler tests are not parallel, so that goleak sees only their
// own goroutines.

// Scheduled passes delete what expired since the last one; Stop leaves no
// goroutine behind.
func TestPrunerSchedule(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := setupPruner(t)
	b.fill(t, 300, idempotency.StatusCompleted)
	b.advance(2 * time.Hour)
	p := b.pruner(t, b.store, idempotency.PrunerConfig{Schedule: "* * * * * *", BatchSize: 100})
	p.Start()
	p.Start() // no second scheduler
	passes := func() uint64 { return b.metrics(t).passes["ok"] }
	waitFor(t, time.Minute, "first scheduled pass", func() bool { return passes() == 1 })
	if n := b.store.Len(); n != 0 {
		t.Fatalf("%d records left after the first pass", n)
	}
	b.fill(t, 50, idempotency.StatusCompleted)
	b.advance(2 * time.Hour)
	waitFor(t, time.Minute, "second scheduled pass", func() bool { return passes() == 2 })
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if m := b.metrics(t); m.pruned != 350 || b.store.Len() != 0 {
		t.Fatalf("metrics = %+v", m)
	}
}

// A pass that is due while the previous one runs is skipped, never run
// beside it; Stop waits for the running pass, which ends after its
// current batch.
func TestPrunerSkipsOverlapAndStopWaits(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := setupPruner(t)
	var running, overlap atomic.Int64
	entered, release := make(chan struct{}, 10), make(chan struct{})
	s := &flakyStore{Store: b.store, prune: func(ctx context.Context, call, limit int) (int, error) {
		if running.Add(1) > 1 {
			overlap.Add(1)
		}
		defer running.Add(-1)
		entered <- struct{}{}
		<-release
		return limit, nil // a full batch: only Stop ends this pass
	}}
	logs := &logRecorder{}
	p := b.pruner(t, s, idempotency.PrunerConfig{Schedule: "* * * * * *", BatchSize: 10,
		Logger: slog.New(logs)})
	p.Start()
	<-entered
	waitFor(t, time.Minute, "a skipped run", func() bool { return logs.has("skip") })

	stopped := make(chan error)
	go func() { stopped <- p.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while a batch was running", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if n := s.calls.Load(); n != 1 || overlap.Load() != 0 {
		t.Fatalf("%d batches ran (%d overlapping), want 1 and none", n, overlap.Load())
	}
	if m := b.metrics(t); m.pruned != 10 || m.passes["ok"] != 1 {
		t.Fatalf("metrics = %+v", m)
	}
}

// When Stop's context ends first, the running batch is aborted through
// its context and Stop returns at once.
func TestPrunerStopDeadline(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := setupPruner(t)
	entered, returned := make(chan struct{}, 10), make(chan struct{})
	s := &flakyStore{Store: b.store, prune: func(ctx context.Context, call, limit int) (int, error) {
		entered <- struct{}{}
		<-ctx.Done()
		close(returned)
		return 0, ctx.Err()
	}}
	p := b.pruner(t, s, idempotency.PrunerConfig{Schedule: "* * * * * *"})
	p.Start()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want DeadlineExceeded", err)
	}
	select {
	case <-returned:
	case <-time.After(time.Minute):
		t.Fatal("the running batch was not aborted")
	}
	// Let the pass record its outcome before goleak looks.
	waitFor(t, time.Minute, "the aborted pass to end", func() bool { return b.metrics(t).passes["canceled"] == 1 })
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// logRecorder is a slog handler that keeps the messages.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) has(suffix string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.HasSuffix(m, suffix) {
			return true
		}
	}
	return false
}

// A Pruner deletes expired records in batches, on a schedule or at once.
func ExamplePruner() {
	ctx := context.Background()
	now := time.Now()
	store := memstore.New(&memstore.Config{EvictAfter: -1, Clock: func() time.Time { return now }})
	fp, _ := idempotency.NewFingerprint().String("sku", "sku_123").Sum()
	for _, intent := range []string{"a", "b", "c"} {
		key, _ := idempotency.ComposeKey("usr_1", "createOrder", intent)
		c, _ := store.Claim(ctx, idempotency.ClaimParams{Scope: "usr_1", Key: key, Fingerprint: fp,
			LockTimeout: time.Minute, Retention: time.Hour})
		_ = store.Complete(ctx, c.Lease, idempotency.Completion{Status: idempotency.StatusCompleted,
			Response: idempotency.Response{Code: 201}, Retention: time.Hour})
	}
	now = now.Add(2 * time.Hour) // the three records expire

	pruner, err := idempotency.NewPruner(store, &idempotency.PrunerConfig{
		Schedule:  "@every 5m", // pgstore: run one on every instance, they share the work
		BatchSize: 2,
	})
	if err != nil {
		panic(err)
	}
	pruner.Start()
	defer pruner.Stop(ctx) // at shutdown: waits for a running pass's current batch

	rep, err := pruner.RunOnce(ctx) // a pass now, beside the schedule
	fmt.Println(rep.Deleted, "deleted in", rep.Batches, "batches; drained:", rep.Drained, err)
	// Output: 3 deleted in 2 batches; drained: true <nil>
}
