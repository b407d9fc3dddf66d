package idempotency

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/payonce/payonce/internal/schedule"
)

// Instrument names of the [Pruner] (see the others in metrics.go).
const (
	// MetricPrunedRecords counts the records the pruner took: expired
	// records deleted or reduced to tombstones, tombstones deleted.
	MetricPrunedRecords = "idempotency.pruned_records"
	// MetricPruneDuration is how long a pruning pass took, in ms, by
	// outcome: "ok", "error", or "canceled" (the pass's context ended,
	// e.g. at shutdown).
	MetricPruneDuration = "idempotency.prune_duration_ms"
)

// maxPruneBatch bounds PrunerConfig.BatchSize: a batch holds its row locks
// and its transaction until it commits, and a claim that renews one of its
// expired keys waits for it.
const maxPruneBatch = 50_000

// PrunerConfig configures a [Pruner]. The zero value (or nil) means
// defaults.
type PrunerConfig struct {
	// Schedule says when a pass runs: a cron spec (five fields, or six
	// with a leading seconds field) or a descriptor such as "@every 5m" or
	// "@hourly". The scheduler's resolution is one second: "@every 100ms"
	// runs every second. Default "@every 1m".
	Schedule string
	// BatchSize is the most records one batch deletes, in one short
	// transaction. At most 50000. Default 1000.
	BatchSize int
	// Pause is the wait between two batches of a pass, so that a long
	// backlog is deleted as a series of short transactions that leave
	// room for the claim path rather than as one long one. A negative
	// value means no pause. Default 10ms.
	Pause time.Duration
	// MaxBatchesPerRun bounds the batches of one pass; the rest of a
	// backlog waits for the next pass. Default 0: no bound, a pass ends at
	// the first batch that deletes fewer than BatchSize records.
	MaxBatchesPerRun int
	// MeterProvider receives idempotency.pruned_records and
	// idempotency.prune_duration_ms. Default: a no-op provider.
	MeterProvider metric.MeterProvider
	// Logger receives a line per scheduled pass (debug when it drained
	// the backlog, info when MaxBatchesPerRun cut it short, warn when it
	// failed) and recovered panics. Default: discarded.
	Logger *slog.Logger
}

func (c *PrunerConfig) withDefaults() (PrunerConfig, error) {
	var out PrunerConfig
	if c != nil {
		out = *c
	}
	if out.Schedule == "" {
		out.Schedule = "@every 1m"
	}
	if out.BatchSize == 0 {
		out.BatchSize = 1000
	}
	if out.Pause == 0 {
		out.Pause = 10 * time.Millisecond
	}
	if out.MeterProvider == nil {
		out.MeterProvider = noop.NewMeterProvider()
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	switch {
	case out.BatchSize < 0 || out.BatchSize > maxPruneBatch:
		return out, invalid("PrunerConfig.BatchSize", "must be between 1 and %d, got %d", maxPruneBatch, out.BatchSize)
	case out.MaxBatchesPerRun < 0:
		return out, invalid("PrunerConfig.MaxBatchesPerRun", "must not be negative, got %d", out.MaxBatchesPerRun)
	}
	if err := schedule.Check(out.Schedule); err != nil {
		return out, invalid("PrunerConfig.Schedule", "%v", err)
	}
	return out, nil
}

// PruneReport says what one pass of a [Pruner] did.
type PruneReport struct {
	// Deleted is how many records the pass took: expired records deleted
	// or reduced to tombstones (ExpiredRefused), and tombstones past their
	// refusal horizon deleted.
	Deleted int
	// Batches is how many batches it ran (the last one included).
	Batches int
	// Duration is how long the pass took.
	Duration time.Duration
	// Drained is true when the last batch was short: no expired record
	// was left that this pass could take (records that a concurrent
	// pruner held are that pruner's). False when MaxBatchesPerRun, an
	// error or the context ended the pass first.
	Drained bool
}

// Pruner deletes expired records, never PROCESSING ones, in bounded
// batches: each batch is one short transaction of at most BatchSize
// records, and a pause between batches leaves the database to the claim
// path. A record written under [ExpiredRefused] is reduced to a tombstone
// instead, without its response, and deleted once its refusal horizon has
// passed (see [Store]'s Prune). Run a pass with [Pruner.RunOnce], or on a schedule with
// [Pruner.Start].
//
// Several pruners may run at once, in one process or on many instances:
// pgstore's batches skip the rows another pruner has locked (FOR UPDATE
// SKIP LOCKED), so no two pruners wait on each other or delete the same
// record. There is no leader to elect.
//
// A Pruner is safe for concurrent use.
type Pruner struct {
	store    Store
	cfg      PrunerConfig
	cron     *cron.Cron
	pruned   metric.Int64Counter
	duration metric.Float64Histogram

	mu      sync.Mutex
	started bool
	// stopping is closed by Stop: the scheduled pass ends after its
	// current batch.
	stopping chan struct{}
	// runCtx is the scheduled passes' context; abort cancels it when
	// Stop's context ends before the pass does.
	runCtx context.Context
	abort  context.CancelFunc
}

// NewPruner returns a Pruner over store. A nil cfg means defaults. It
// returns an *InvalidError naming the bad field.
func NewPruner(store Store, cfg *PrunerConfig) (*Pruner, error) {
	if isNil(store) {
		return nil, invalid("store", "nil: pass the store its constructor returned (pgstore.New, memstore.New, ...)")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m := c.MeterProvider.Meter("github.com/payonce/payonce/idempotency")
	p := &Pruner{store: store, cfg: c}
	p.pruned, err = m.Int64Counter(MetricPrunedRecords,
		metric.WithDescription("Records taken by the pruner: expired records deleted or reduced to tombstones, tombstones deleted."))
	if err != nil {
		return nil, fmt.Errorf("idempotency: metrics: %w", err)
	}
	p.duration, err = m.Float64Histogram(MetricPruneDuration,
		metric.WithDescription("How long pruning passes took, by outcome (ok, error, canceled)."),
		metric.WithExplicitBucketBoundaries(1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000))
	if err != nil {
		return nil, fmt.Errorf("idempotency: metrics: %w", err)
	}
	logger := cronLogger{c.Logger}
	p.cron = cron.New(cron.WithParser(schedule.Parser), cron.WithLogger(logger),
		cron.WithChain(cron.Recover(logger), cron.SkipIfStillRunning(logger)))
	if _, err := p.cron.AddFunc(c.Schedule, p.scheduledPass); err != nil {
		return nil, invalid("PrunerConfig.Schedule", "%v", err)
	}
	return p, nil
}

// Config returns the pruner's configuration with defaults filled in.
func (p *Pruner) Config() PrunerConfig { return p.cfg }

// RunOnce runs one pass now: batches of BatchSize until one deletes fewer
// (or MaxBatchesPerRun batches ran, or ctx ended). The report counts what
// was deleted even when the pass ends with an error.
//
// Errors: ctx.Err() when ctx ended, between batches or during one (which
// then deleted nothing); the store's error, wrapped, when a batch failed
// (that batch deleted nothing). The next pass starts afresh either way.
func (p *Pruner) RunOnce(ctx context.Context) (PruneReport, error) {
	return p.run(ctx, nil)
}

func (p *Pruner) run(ctx context.Context, stopping <-chan struct{}) (rep PruneReport, err error) {
	start := time.Now()
	defer func() {
		rep.Duration = time.Since(start)
		outcome := "ok"
		switch {
		case err != nil && ctx.Err() != nil:
			outcome = "canceled"
		case err != nil:
			outcome = "error"
		}
		p.duration.Record(context.WithoutCancel(ctx), float64(rep.Duration)/float64(time.Millisecond),
			metric.WithAttributes(attribute.String("outcome", outcome)))
	}()
	var pause *time.Timer
	for p.cfg.MaxBatchesPerRun == 0 || rep.Batches < p.cfg.MaxBatchesPerRun {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		n, err := p.store.Prune(ctx, p.cfg.BatchSize)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return rep, cerr // the batch failed because ctx ended
			}
			return rep, fmt.Errorf("idempotency: prune: %w", err)
		}
		rep.Batches++
		rep.Deleted += n
		if n > 0 {
			p.pruned.Add(context.WithoutCancel(ctx), int64(n))
		}
		if n < p.cfg.BatchSize {
			rep.Drained = true
			return rep, nil
		}
		var wait <-chan time.Time // nil without a pause: never ready
		if p.cfg.Pause > 0 {
			if pause == nil {
				pause = time.NewTimer(p.cfg.Pause)
				defer pause.Stop()
			} else {
				pause.Reset(p.cfg.Pause)
			}
			wait = pause.C
		}
		if stopped, err := p.pause(ctx, stopping, wait); stopped || err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// pause waits for wait (no wait when it is nil) and reports whether the
// pass must end: stopping was closed (stopped) or ctx ended (its error).
func (p *Pruner) pause(ctx context.Context, stopping <-chan struct{}, wait <-chan time.Time) (stopped bool, err error) {
	if wait == nil {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-stopping:
			return true, nil
		default:
			return false, nil
		}
	}
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-stopping:
		return true, nil
	case <-wait:
		return false, nil
	}
}

// Start runs passes on the schedule until [Pruner.Stop]. A pass that is
// due while the previous one still runs is skipped. Calling Start on a
// started Pruner does nothing.
func (p *Pruner) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return
	}
	p.started = true
	p.stopping = make(chan struct{})
	p.runCtx, p.abort = context.WithCancel(context.Background())
	p.cron.Start()
}

// Stop stops the schedule and waits for a running pass, which ends after
// its current batch. If ctx ends first, Stop cancels the pass's context
// (aborting its batch, which deletes nothing) and returns ctx.Err()
// without waiting further. Calling Stop on a stopped Pruner does nothing.
func (p *Pruner) Stop(ctx context.Context) error {
	p.mu.Lock()
	if !p.started {
		p.mu.Unlock()
		return nil
	}
	p.started = false
	close(p.stopping)
	abort := p.abort
	done := p.cron.Stop()
	p.mu.Unlock()

	defer abort()
	select {
	case <-done.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Pruner) scheduledPass() {
	p.mu.Lock()
	ctx, stopping := p.runCtx, p.stopping
	p.mu.Unlock()
	rep, err := p.run(ctx, stopping)
	attrs := []any{"deleted", rep.Deleted, "batches", rep.Batches, "duration", rep.Duration}
	switch {
	case err != nil && ctx.Err() != nil:
		p.cfg.Logger.Debug("idempotency: prune pass aborted at shutdown", attrs...)
	case err != nil:
		p.cfg.Logger.Warn("idempotency: prune pass failed; the next pass retries", append(attrs, "err", err)...)
	case !rep.Drained && p.cfg.MaxBatchesPerRun > 0 && rep.Batches >= p.cfg.MaxBatchesPerRun:
		p.cfg.Logger.Info("idempotency: prune pass reached MaxBatchesPerRun; the backlog waits for the next pass", attrs...)
	default:
		p.cfg.Logger.Debug("idempotency: prune pass", attrs...)
	}
}

// cronLogger hands the scheduler's messages to slog: its routine chatter
// and skipped runs at debug, recovered panics at error.
type cronLogger struct{ l *slog.Logger }

func (c cronLogger) Info(msg string, kv ...any) {
	c.l.Debug("idempotency: pruner scheduler: "+msg, kv...)
}

func (c cronLogger) Error(err error, msg string, kv ...any) {
	c.l.Error("idempotency: pruner scheduler: "+msg, append(kv, "err", err)...)
}
