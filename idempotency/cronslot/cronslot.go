// Package cronslot runs each slot of a cron schedule once, across every
// scheduler that fires it: two processes (or two replicas of a service)
// with the same robfig/cron job, a scheduler restarted mid-run, clocks a
// little apart.
//
// A firing is keyed by its schedule slot: the job's name and the slot's
// scheduled time, computed from the schedule (the latest slot at or
// before the firing, allowing Config.Tolerance for a clock slightly ahead
// or behind), never from time.Now() itself. The slot time is the run's
// identity: every scheduler that fires that slot, and every retry of it,
// computes the same key, so the idempotency store lets one of them run it
// and answers the others. A time-varying key (the firing's own time)
// would make every firing a new run.
//
//	guard, err := cronslot.New(store, nil)
//	c := cron.New()
//	_, err = guard.Add(c, "nightly-payouts", "0 2 * * *", func(ctx context.Context, s cronslot.Slot) error {
//		return payouts.Run(ctx, s.At) // s.At: the slot, identical on every scheduler
//	})
//	c.Start()
//
// # What is guaranteed
//
// One run per slot at a time, under a lease kept alive by heartbeats while
// the job runs. A job that returns nil completes its slot: later firings
// of it do nothing. A job that returns [idempotency.Permanent] fails its
// slot for good (recorded, never run again). Any other error releases the
// slot: the next firing of it (another scheduler's, or a catch-up) runs
// it again. A scheduler that dies while running a slot leaves it to be
// taken over once its lease ([Config].LockTimeout) has run out, by a
// catch-up ([Config].CatchUp) of a later firing.
//
// A job's effects in the same PostgreSQL commit with the slot's record
// with [Guard.AddTx] / [Guard.JobTx]: then they happen exactly once per
// slot. Effects elsewhere (an email, a provider call) happen at most once
// at a time and again only if their runner died before recording the
// slot: make them idempotent downstream with [Slot.Key].
//
// # Schedules
//
// Specs are robfig/cron's, with optional seconds and descriptors
// ("0 2 * * *", "@hourly", "@every 90s"). An "@every d" schedule's slots
// are anchored at the Unix epoch (multiples of d), not at the moment a
// scheduler started, so that every scheduler has the same slots; a
// scheduler with robfig's own "@every" fires at other instants, and the
// firing is mapped to the latest slot.
package cronslot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/internal/schedule"
)

// Scope is the idempotency scope of every slot record: the store's user_id
// column reads "cron" for them.
const Scope = "cron"

// Instrument names.
const (
	// MetricRuns counts slot runs by job and outcome (completed, failed,
	// transient).
	MetricRuns = "cronslot.runs"
	// MetricSkipped counts firings that found their slot done or running
	// elsewhere, by job.
	MetricSkipped = "cronslot.skipped_duplicates"
	// MetricTakeovers counts slots taken over from a scheduler whose lease
	// ran out, by job.
	MetricTakeovers = "cronslot.takeovers"
)

// Config configures a Guard. The zero value (or nil) means defaults.
type Config struct {
	// LockTimeout is the lease of a running slot, kept alive by heartbeats
	// while the job runs; a dead scheduler's slot is taken over after it.
	// Default 5 minutes.
	LockTimeout time.Duration
	// Retention is how long a slot's record is kept. It must outlive the
	// longest time a late firing or catch-up of a slot can come after it,
	// and each job's period: Add refuses a schedule whose slots are further
	// apart than Retention. Default 7 days.
	Retention time.Duration
	// Tolerance is how far ahead of a slot a firing may come and still
	// belong to it: a scheduler whose clock is ahead of another's fires
	// early. Default 1s.
	Tolerance time.Duration
	// CatchUp is how many earlier slots each firing also runs when they
	// were never completed (a scheduler down, a run that crashed or failed
	// transiently), oldest first. Default 0: only the firing's own slot.
	CatchUp int
	// Clock is the schedulers' clock for firings. Default time.Now.
	Clock func() time.Time
	// Logger receives job errors. Default: discarded.
	Logger *slog.Logger
	// MeterProvider receives the cronslot instruments. Default: none.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span around each slot's run:
	// idempotency.DoTx for a job in the slot's transaction, idempotency.Do
	// otherwise (slot keys as short hashes only). Default: no spans.
	TracerProvider trace.TracerProvider
}

// Guard runs cron jobs once per slot, over a store's transactions of type
// TTx (pgx.Tx over pgstore).
type Guard[TTx idempotency.Tx] struct {
	exec                     *idempotency.TxExecutor[TTx]
	cfg                      Config
	runs, skipped, takeovers metric.Int64Counter
}

// Slot is one scheduled run of a job.
type Slot struct {
	// Job is the job's name.
	Job string
	// At is the slot's scheduled time, UTC: the same on every scheduler.
	At time.Time
	// Key is the slot's idempotency key, "cron_<job>_<at>": derive
	// downstream keys from it.
	Key string
}

// Func is a job whose effects are outside the database.
type Func func(ctx context.Context, s Slot) error

// TxFunc is a job whose effects commit with the slot's record.
type TxFunc[TTx idempotency.Tx] func(ctx context.Context, tx TTx, s Slot) error

// New returns a Guard over store, the transaction-aware seam
// (*pgstore.Store is an idempotency.TxStore[pgx.Tx]). A bad field gives an
// *idempotency.InvalidError naming it.
func New[TTx idempotency.Tx](store idempotency.TxStore[TTx], cfg *Config) (*Guard[TTx], error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	switch {
	case store == nil:
		return nil, &idempotency.InvalidError{Field: "store", Reason: "nil"}
	case c.LockTimeout < 0:
		return nil, &idempotency.InvalidError{Field: "Config.LockTimeout", Reason: fmt.Sprintf("must not be negative, got %s (0: the default, 5m)", c.LockTimeout)}
	case c.Retention < 0:
		return nil, &idempotency.InvalidError{Field: "Config.Retention", Reason: fmt.Sprintf("must not be negative, got %s (0: the default, 7 days)", c.Retention)}
	case c.Tolerance < 0:
		return nil, &idempotency.InvalidError{Field: "Config.Tolerance", Reason: fmt.Sprintf("must not be negative, got %s (0: the default, 1s)", c.Tolerance)}
	case c.CatchUp < 0:
		return nil, &idempotency.InvalidError{Field: "Config.CatchUp", Reason: fmt.Sprintf("must not be negative, got %d", c.CatchUp)}
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = 5 * time.Minute
	}
	if c.Retention == 0 {
		c.Retention = 7 * 24 * time.Hour
	}
	if c.Tolerance == 0 {
		c.Tolerance = time.Second
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	exec, err := idempotency.NewTx(store, &idempotency.Config{LockTimeout: c.LockTimeout, Retention: c.Retention,
		Logger: c.Logger, MeterProvider: c.MeterProvider, TracerProvider: c.TracerProvider})
	if err != nil {
		return nil, err
	}
	mp := c.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/payonce/payonce/idempotency/cronslot")
	g := &Guard[TTx]{exec: exec, cfg: c}
	for _, in := range []struct {
		dst        *metric.Int64Counter
		name, desc string
	}{
		{&g.runs, MetricRuns, "Slot runs, by job and outcome."},
		{&g.skipped, MetricSkipped, "Firings whose slot was done or running elsewhere, by job."},
		{&g.takeovers, MetricTakeovers, "Slots taken over from a scheduler whose lease ran out, by job."},
	} {
		if *in.dst, err = m.Int64Counter(in.name, metric.WithDescription(in.desc)); err != nil {
			return nil, fmt.Errorf("cronslot: metrics: %w", err)
		}
	}
	return g, nil
}

// Schedule is a parsed spec whose slots every scheduler agrees on.
type Schedule struct {
	spec  string
	sched cron.Schedule
	every time.Duration // "@every": slots are multiples of it since the epoch
}

// Parse parses spec (robfig/cron's syntax, seconds optional, descriptors
// and "@every" with a positive interval).
func Parse(spec string) (Schedule, error) {
	if err := schedule.Check(spec); err != nil {
		return Schedule{}, &idempotency.InvalidError{Field: "spec", Reason: err.Error()}
	}
	s, _ := schedule.Parser.Parse(spec)
	out := Schedule{spec: spec, sched: s}
	if d, ok := s.(cron.ConstantDelaySchedule); ok {
		out.every = d.Delay
	}
	return out, nil
}

// Slot returns the latest slot at or before t (UTC).
func (s Schedule) Slot(t time.Time) time.Time {
	t = t.UTC()
	if s.every > 0 {
		return t.Truncate(s.every)
	}
	// The first slot after a point far enough back, then forward to the
	// last one not after t.
	for back := time.Minute; back <= 800*24*time.Hour; back *= 2 {
		n := s.sched.Next(t.Add(-back))
		if n.IsZero() || n.After(t) {
			continue
		}
		for {
			m := s.sched.Next(n)
			if m.IsZero() || m.After(t) {
				return n.UTC()
			}
			n = m
		}
	}
	return time.Time{}
}

// Next returns the first slot after t.
func (s Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		return t.UTC().Truncate(s.every).Add(s.every)
	}
	return s.sched.Next(t.UTC()).UTC()
}

// period is an upper bound of the time between two slots, sampled.
func (s Schedule) period(from time.Time) time.Duration {
	if s.every > 0 {
		return s.every
	}
	var longest time.Duration
	t := from
	for range 400 {
		n := s.Next(t)
		if n.IsZero() {
			break
		}
		longest = max(longest, n.Sub(t))
		t = n
	}
	return longest
}

func (g *Guard[TTx]) check(name, spec string) (Schedule, error) {
	if err := idempotency.ValidateAction(name); err != nil {
		return Schedule{}, &idempotency.InvalidError{Field: "name", Reason: fmt.Sprintf("%q: a job name is an action name (letters, digits and . : -)", name)}
	}
	s, err := Parse(spec)
	if err != nil {
		return Schedule{}, err
	}
	if p := s.period(g.cfg.Clock()); p > g.cfg.Retention {
		return Schedule{}, &idempotency.InvalidError{Field: "Config.Retention", Reason: fmt.Sprintf(
			"%s is shorter than the time between two slots of %q (%s): a slot's record would expire before the next", g.cfg.Retention, spec, p)}
	}
	return s, nil
}

// SlotKey is the idempotency key of job's slot at.
func SlotKey(job string, at time.Time) (string, error) {
	return idempotency.ComposeKey(Scope, job, at.UTC().Format("20060102T150405Z"))
}

// Outcome is what a firing did with a slot.
type Outcome int

const (
	// Ran: this firing ran the slot and recorded it done.
	Ran Outcome = iota + 1
	// Skipped: the slot was done already, or is running elsewhere.
	Skipped
	// Failed: the slot is failed for good (now or earlier).
	Failed
	// Released: the job failed transiently; the slot is left to a later
	// firing.
	Released
)

func (o Outcome) String() string {
	return map[Outcome]string{Ran: "ran", Skipped: "skipped", Failed: "failed", Released: "released"}[o]
}

// RunSlot runs job name's slot at (already a slot of its schedule) with
// fn, unless it is done or running elsewhere. Exactly one of fn and fnTx
// is set.
func (g *Guard[TTx]) RunSlot(ctx context.Context, name string, at time.Time, fn Func, fnTx TxFunc[TTx]) (Outcome, error) {
	key, err := SlotKey(name, at)
	if err != nil {
		return 0, err
	}
	slot := Slot{Job: name, At: at.UTC(), Key: key}
	fp, err := idempotency.NewFingerprint().String("job", name).String("slot", key).Sum()
	if err != nil {
		return 0, err
	}
	req := idempotency.Request{Scope: Scope, Key: key, Fingerprint: fp}
	var res idempotency.Result
	if fnTx != nil {
		res, err = g.exec.DoTx(ctx, req, func(ctx context.Context, tx TTx) (idempotency.Response, error) {
			return idempotency.Response{}, fnTx(ctx, tx, slot)
		})
	} else {
		res, err = g.exec.Do(ctx, req, func(ctx context.Context) (idempotency.Response, error) {
			return idempotency.Response{}, fn(ctx, slot)
		})
	}
	job := metric.WithAttributes(attribute.String("job", name))
	if res.Reclaimed {
		g.takeovers.Add(ctx, 1, job)
	}
	var out Outcome
	switch {
	case err == nil && res.Replayed:
		out = Skipped
	case err == nil:
		out = Ran
		g.runs.Add(ctx, 1, metric.WithAttributes(attribute.String("job", name), attribute.String("outcome", "completed")))
	case errors.Is(err, idempotency.ErrInProgress):
		out, err = Skipped, nil
	case errors.Is(err, idempotency.ErrFailed):
		out = Failed
		var fe *idempotency.FailedError
		if errors.As(err, &fe) && !fe.Replayed {
			g.runs.Add(ctx, 1, metric.WithAttributes(attribute.String("job", name), attribute.String("outcome", "failed")))
		}
	default:
		out = Released
		g.runs.Add(ctx, 1, metric.WithAttributes(attribute.String("job", name), attribute.String("outcome", "transient")))
	}
	if out == Skipped {
		g.skipped.Add(ctx, 1, job)
	}
	return out, err
}

// Fire handles one firing of job name at the Guard's clock's now: its
// slot, and first the CatchUp slots before it that are not done.
func (g *Guard[TTx]) Fire(ctx context.Context, name string, s Schedule, fn Func, fnTx TxFunc[TTx]) error {
	now := g.cfg.Clock().Add(g.cfg.Tolerance)
	slot := s.Slot(now)
	if slot.IsZero() {
		return fmt.Errorf("cronslot: %s: no slot of %q before %s", name, s.spec, now)
	}
	slots := []time.Time{slot}
	for i, at := 0, slot; i < g.cfg.CatchUp; i++ {
		at = s.Slot(at.Add(-time.Nanosecond))
		if at.IsZero() {
			break
		}
		slots = append([]time.Time{at}, slots...)
	}
	var errs []error
	for _, at := range slots {
		if _, err := g.RunSlot(ctx, name, at, fn, fnTx); err != nil {
			g.cfg.Logger.Error("cronslot: slot run failed", "job", name, "slot", at.Format(time.RFC3339), "err", err)
			errs = append(errs, fmt.Errorf("%s at %s: %w", name, at.Format(time.RFC3339), err))
		}
	}
	return errors.Join(errs...)
}

// Job returns a cron.Job that runs fn once per slot of spec.
func (g *Guard[TTx]) Job(name, spec string, fn Func) (cron.Job, error) {
	if fn == nil {
		return nil, &idempotency.InvalidError{Field: "fn", Reason: "nil"}
	}
	return g.job(name, spec, fn, nil)
}

// JobTx is Job for a job whose effects commit with the slot's record.
func (g *Guard[TTx]) JobTx(name, spec string, fn TxFunc[TTx]) (cron.Job, error) {
	if fn == nil {
		return nil, &idempotency.InvalidError{Field: "fn", Reason: "nil"}
	}
	return g.job(name, spec, nil, fn)
}

func (g *Guard[TTx]) job(name, spec string, fn Func, fnTx TxFunc[TTx]) (cron.Job, error) {
	s, err := g.check(name, spec)
	if err != nil {
		return nil, err
	}
	return cron.FuncJob(func() { _ = g.Fire(context.Background(), name, s, fn, fnTx) }), nil
}

// Add schedules fn on c under spec, once per slot across schedulers.
func (g *Guard[TTx]) Add(c *cron.Cron, name, spec string, fn Func) (cron.EntryID, error) {
	j, err := g.Job(name, spec, fn)
	if err != nil {
		return 0, err
	}
	return c.AddJob(spec, j)
}

// AddTx is Add for a job whose effects commit with the slot's record.
func (g *Guard[TTx]) AddTx(c *cron.Cron, name, spec string, fn TxFunc[TTx]) (cron.EntryID, error) {
	j, err := g.JobTx(name, spec, fn)
	if err != nil {
		return 0, err
	}
	return c.AddJob(spec, j)
}
