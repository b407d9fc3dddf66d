package idempotency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Config configures an [Executor]. The zero value (or nil) means defaults.
type Config struct {
	// LockTimeout is the lease a claim takes. An action that runs longer
	// keeps its lease alive by heartbeats. A holder that cannot renew it
	// stops after LockTimeout minus LeaseMargin (see [CheckLease]): a
	// shorter lease stops a cut-off holder sooner, and lets a retry take
	// over the key of a crashed one sooner, at the cost of more
	// heartbeats. Default 30s.
	LockTimeout time.Duration
	// HeartbeatInterval is how often a running action's lease is extended
	// by LockTimeout, counted from the send time of the last confirmed
	// claim or heartbeat; a failed heartbeat is retried sooner. Heartbeats
	// go on until the action's outcome is recorded. Default LockTimeout/3,
	// so that one failed heartbeat does not stop a healthy action;
	// HeartbeatInterval plus LeaseMargin must be less than LockTimeout.
	HeartbeatInterval time.Duration
	// LeaseMargin is how long before its lease could end in the store a
	// holder stops on its own when no renewal was confirmed: its action's
	// context is cancelled (the cause matches ErrLeaseLost) and
	// [CheckLease] refuses new external calls once LockTimeout minus
	// LeaseMargin has passed, on this process's monotonic clock, since the
	// last confirmed claim or heartbeat was sent. The margin absorbs the
	// store's clock running ahead of ours (a stepped database clock) and
	// the time the action needs to notice its cancellation. Default
	// LockTimeout/10 (3s for the default lease); must be positive, and
	// less than LockTimeout minus HeartbeatInterval.
	LeaseMargin time.Duration
	// Retention is how long outcomes are kept and replayed. It must cover
	// the deduplication window of every downstream system the action
	// reaches (Stripe 24h, Adyen at least 31 days, PayPal up to 45 days).
	// Default 24h; must exceed LockTimeout.
	Retention time.Duration
	// Expired says what a request does whose key's record has expired:
	// ExpiredIsNew (default: a new request) or ExpiredRefused (ErrExpired;
	// see [ExpiredPolicy] for why the default is what it is).
	Expired ExpiredPolicy
	// RefusalHorizon, under ExpiredRefused, is how long past its expiry a
	// record keeps refusing its key: the pruner keeps it that long as a
	// tombstone (scope, key, fingerprint and lock version, no response),
	// then deletes it, and the key is new again. Default
	// DefaultRefusalHorizon (30 days) under ExpiredRefused; must be zero
	// under ExpiredIsNew, where it has no meaning.
	RefusalHorizon time.Duration
	// FinishTimeout bounds recording the outcome after the action returns,
	// which runs even when the request's context was cancelled: the
	// action's effect may have happened and must be recorded. The lease is
	// kept alive by heartbeats meanwhile, so FinishTimeout may be longer
	// than LockTimeout. Calls that start close together share one
	// deadline, so each gets at least FinishTimeout and at most an eighth
	// more (finish.go). Default 10s.
	FinishTimeout time.Duration
	// Clock is the application clock. It only measures how long actions
	// take, for logs and metrics: leases and expiry are decided by the
	// store's clock (the database's for pgstore), never by this one.
	// Default time.Now.
	Clock func() time.Time
	// MeterProvider receives the idempotency instruments (see
	// [Metrics]). Default: a no-op provider.
	MeterProvider metric.MeterProvider
	// Logger receives warnings (heartbeat failures, outcomes that could not
	// be recorded). Keys appear only as short hashes. Default: discarded.
	Logger *slog.Logger
	// ReplayCache, when set, answers replays of finished records from
	// memory, without a round trip (see [ReplayCache] for what bounds it:
	// a store's change reports, MaxAge). Over a store that reports changes
	// ([ChangeWatcher]: pgstore) the executor holds a listener until
	// [Executor.Close]. Default nil: every request goes to the store.
	ReplayCache *ReplayCache
	// TracerProvider receives spans: idempotency.Do around each request,
	// with idempotency.claim, idempotency.action and idempotency.complete
	// inside it. Keys and scopes appear as short hashes only. Default: no
	// spans.
	TracerProvider trace.TracerProvider
}

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.LockTimeout == 0 {
		out.LockTimeout = 30 * time.Second
	}
	if out.Retention == 0 {
		out.Retention = 24 * time.Hour
	}
	if out.HeartbeatInterval == 0 {
		out.HeartbeatInterval = out.LockTimeout / 3
	}
	marginSet := out.LeaseMargin != 0
	if !marginSet {
		out.LeaseMargin = out.LockTimeout / 10
	}
	if out.FinishTimeout == 0 {
		out.FinishTimeout = 10 * time.Second
	}
	if out.Clock == nil {
		out.Clock = time.Now
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	switch {
	case out.LockTimeout < 0:
		return out, invalid("Config.LockTimeout", "must be positive, got %s", out.LockTimeout)
	case out.Retention <= out.LockTimeout:
		return out, invalid("Config.Retention", "must exceed LockTimeout (%s), got %s", out.LockTimeout, out.Retention)
	case out.HeartbeatInterval <= 0 || out.HeartbeatInterval >= out.LockTimeout:
		return out, invalid("Config.HeartbeatInterval", "must be positive and less than LockTimeout (%s), got %s", out.LockTimeout, out.HeartbeatInterval)
	case out.LeaseMargin < 0:
		return out, invalid("Config.LeaseMargin", "must be positive (0 means LockTimeout/10), got %s", out.LeaseMargin)
	case out.HeartbeatInterval+out.LeaseMargin >= out.LockTimeout:
		field := "Config.HeartbeatInterval"
		if marginSet {
			field = "Config.LeaseMargin"
		}
		return out, invalid(field, "HeartbeatInterval (%s) plus LeaseMargin (%s) must be less than LockTimeout (%s): "+
			"a holder stops once LockTimeout minus LeaseMargin passes without a confirmed heartbeat, so its first heartbeat "+
			"must be sent before that; shorten HeartbeatInterval (default LockTimeout/3) or LeaseMargin (default LockTimeout/10)",
			out.HeartbeatInterval, out.LeaseMargin, out.LockTimeout)
	case out.FinishTimeout < 0:
		return out, invalid("Config.FinishTimeout", "must be positive, got %s", out.FinishTimeout)
	case out.Expired != ExpiredIsNew && out.Expired != ExpiredRefused:
		return out, invalid("Config.Expired", "unknown policy %d", out.Expired)
	case out.RefusalHorizon < 0:
		return out, invalid("Config.RefusalHorizon", "must be positive (0 means %s under ExpiredRefused), got %s", DefaultRefusalHorizon, out.RefusalHorizon)
	case out.RefusalHorizon > 0 && out.Expired != ExpiredRefused:
		return out, invalid("Config.RefusalHorizon", "applies only under Expired: ExpiredRefused (expired records are otherwise deleted, not kept as tombstones); set Config.Expired to ExpiredRefused, or leave RefusalHorizon zero")
	}
	if out.Expired == ExpiredRefused && out.RefusalHorizon == 0 {
		out.RefusalHorizon = DefaultRefusalHorizon
	}
	if out.ReplayCache != nil {
		rc, err := out.ReplayCache.withDefaults()
		if err != nil {
			return out, err
		}
		out.ReplayCache = &rc
	}
	return out, nil
}

// Executor runs actions at most once per (scope, key) and replays their
// outcome to every retry. Create one with [New]; it is safe for concurrent
// use.
type Executor struct {
	store   Store
	cfg     Config
	metrics *Metrics
	cache   *replayCache // nil: off
	tracer  trace.Tracer
	// tracing is whether Config.TracerProvider is set. Without one the
	// executor starts no spans at all: a no-op tracer's span still costs
	// a context value and the attributes' slices on every call.
	tracing bool
	// stopWatch ends the listener feeding the cache the store's change
	// reports, which closes watchDone; nil without one.
	stopWatch context.CancelFunc
	watchDone chan struct{}
	closeOnce sync.Once
	// finish hands out the deadlines of recording outcomes (finish.go).
	finish finishDeadlines
	// hbStarts queues the actions waiting for their first heartbeat
	// (heartbeat_starts.go).
	hbStarts heartbeatStarts
}

// New returns an Executor over store. A nil cfg means defaults. It returns
// an *InvalidError naming the bad Config field.
func New(store Store, cfg *Config) (*Executor, error) {
	if isNil(store) {
		return nil, invalid("store", "nil: pass the store its constructor returned (pgstore.New, memstore.New, ...)")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(c.MeterProvider, store)
	if err != nil {
		return nil, fmt.Errorf("idempotency: metrics: %w", err)
	}
	e := &Executor{store: store, cfg: c, metrics: m, tracer: Tracer(c.TracerProvider, "idempotency"),
		tracing: c.TracerProvider != nil, finish: finishDeadlines{timeout: c.FinishTimeout}}
	if s, ok := store.(Sealer); c.ReplayCache != nil && !(ok && s.Seals()) {
		if e.cache, err = newReplayCache(*c.ReplayCache); err != nil {
			return nil, err
		}
		if w, ok := store.(ChangeWatcher); ok {
			e.watch(w)
		}
	}
	return e, nil
}

// watch feeds the cache the store's change reports until Close: entries
// are served only while the store confirms them (see [ReplayCache]).
func (e *Executor) watch(w ChangeWatcher) {
	e.cache.watched = true
	ctx, cancel := context.WithCancel(context.Background())
	e.stopWatch, e.watchDone = cancel, make(chan struct{})
	go func() {
		defer close(e.watchDone)
		err := e.cache.watch(ctx, w)
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, errors.ErrUnsupported):
			e.cfg.Logger.Info("idempotency: the store reports no changes; replay cache entries live at most ReplayCache.MaxAge",
				"max_age", e.cache.cfg.MaxAge, "reason", err)
			e.cache.unwatched(err)
		default:
			// A watcher returns early only when it cannot run at all: the
			// cache, never confirmed again, serves nothing.
			e.cfg.Logger.Error("idempotency: the store's change reports stopped; the replay cache serves nothing", "err", err)
			e.cache.flushed(err)
		}
	}()
}

// Close stops the listener that feeds the replay cache the store's change
// reports, waits for it to end (pgstore's ends once its connections are
// closed, which takes up to 15s for one lost to a partition), and empties
// the cache, which serves nothing more: later calls of Do go to the store.
// Without a replay cache, or over a store that reports no changes, it only
// empties the cache. It is safe to call more than once, and returns nil.
func (e *Executor) Close() error {
	e.closeOnce.Do(func() {
		if e.stopWatch != nil {
			e.stopWatch()
			<-e.watchDone
		}
		if e.cache != nil {
			e.cache.close()
		}
	})
	return nil
}

// finishContext is the context that records an outcome or gives a lease
// back: it outlives ctx's cancellation, up to FinishTimeout, since the
// action may have had its effect.
func (e *Executor) finishContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return &finishCtx{Context: e.finish.get(time.Now()), values: ctx}, func() {}
}

// startSpan starts a span of the executor's tracer, or none (ctx as it
// is, and a span that records nothing) without a TracerProvider.
func (e *Executor) startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	if !e.tracing {
		return ctx, noSpan
	}
	return e.tracer.Start(ctx, name)
}

// noSpan is the span of an executor without a TracerProvider: it records
// nothing, like a no-op tracer's, without a context value per call.
var noSpan = trace.SpanFromContext(context.Background())

// Tracer returns the executor's tracer (Config.TracerProvider's), for
// other executors over the same store that trace as this one does.
func (e *Executor) Tracer() trace.Tracer { return e.tracer }

// Metrics returns the executor's instruments.
func (e *Executor) Metrics() *Metrics { return e.metrics }

// Config returns the executor's configuration with defaults filled in.
func (e *Executor) Config() Config { return e.cfg }

// Store returns the executor's store.
func (e *Executor) Store() Store { return e.store }

// Request identifies one protected action.
type Request struct {
	// Scope is the authenticated user, account or tenant.
	Scope string
	// Key is the composed idempotency key (see [ComposeKey]).
	Key string
	// Fingerprint covers the request's significant fields (see
	// [NewFingerprint]).
	Fingerprint Fingerprint
	// RefuseForeign answers ErrForeignKey, changing nothing, when the key
	// has no record in Scope but a live one in another scope (for keys
	// that do not contain their scope, as the HTTP middleware's). Default
	// false.
	RefuseForeign bool
	// NoCache sends the request to the store even when the executor has
	// a [ReplayCache], and keeps its answer out of it (a route's
	// opt-out). Default false.
	NoCache bool
}

// Validate checks the request; errors are *InvalidError naming the field.
func (r Request) Validate() error {
	if err := ValidateScope(r.Scope); err != nil {
		return err
	}
	if err := ValidateKey(r.Key); err != nil {
		return err
	}
	return r.Fingerprint.Validate()
}

// Action is the protected work. It gets a context that is cancelled when
// the request's context is, or when its lease can no longer be trusted:
// lost to another processor, or not renewed for LockTimeout minus
// LeaseMargin (context.Cause then matches ErrLeaseLost). An action with
// external effects calls [CheckLease] right before each external call and
// does not make it when the lease is gone. A nil error stores the response as
// COMPLETED; an error made with [Permanent] stores its response as FAILED;
// any other error is transient: the lease is released and a retry runs the
// action again.
type Action func(ctx context.Context) (Response, error)

// Doer runs protected actions: [Executor] and the transactional modes of
// pgstore's Executor. The HTTP middleware works with any Doer.
type Doer interface {
	Do(ctx context.Context, req Request, action Action) (Result, error)
}

var _ Doer = (*Executor)(nil)

// leaseKey is the context key under which an action's context holds its
// *leaseGuard: the lease, whether it was reclaimed, and the holder's view
// of it (a pointer, so that the value costs no allocation of its own).
type leaseKey struct{}

// LeaseFromContext returns the lease of the action running with ctx, for
// actions that record their outcome themselves (see [Recorded]).
func LeaseFromContext(ctx context.Context) (Lease, bool) {
	g, ok := ctx.Value(leaseKey{}).(*leaseGuard)
	if !ok {
		return Lease{}, false
	}
	return g.lease, true
}

// ReclaimedFromContext reports whether the action running with ctx took
// over an orphaned record (rather than claiming a new key).
func ReclaimedFromContext(ctx context.Context) bool {
	g, ok := ctx.Value(leaseKey{}).(*leaseGuard)
	return ok && g.reclaimed
}

// Recording is what a [RecordingAction] stored itself under its lease (with
// pgstore's CompleteTx, in the transaction of its own writes): the status
// and the response every retry of the key replays.
type Recording struct {
	Status   Status
	Response Response
}

// RecordingAction is protected work that records its own outcome: it gets
// its lease as a parameter, stores the outcome under it (in the
// transaction of its own writes), and returns what it stored. An error is
// treated as an [Action]'s error (transient, [Permanent] or [Abandon]):
// the action then stored nothing.
type RecordingAction func(ctx context.Context, lease Lease) (Recording, error)

// DoRecording runs action once for req's (scope, key), or replays the
// stored outcome, as [Executor.Do] does; the action records its outcome
// itself, so Do stores nothing more. Errors are those of [Executor.Do]; a
// stored FAILED recording answers a *FailedError.
func (e *Executor) DoRecording(ctx context.Context, req Request, action RecordingAction) (Result, error) {
	return e.do(ctx, req, func(ctx context.Context, lease Lease) (Response, *Recording, error) {
		rec, err := action(ctx, lease)
		if err != nil {
			return Response{}, nil, err
		}
		return rec.Response, &rec, nil
	})
}

// RecordedError is returned by an action that has already stored its
// outcome under its own lease (for example with pgstore's CompleteTx, in
// the transaction of its own writes): Do then stores nothing more. New
// code uses [Executor.DoRecording], where the recording is a value.
type RecordedError struct {
	Status   Status
	Response Response
}

func (e *RecordedError) Error() string { return "idempotency: outcome recorded by the action" }

// Recorded reports an outcome the action already stored itself.
func Recorded(status Status, resp Response) error {
	return &RecordedError{Status: status, Response: resp}
}

// Result is the outcome of [Executor.Do].
type Result struct {
	Status   Status
	Response Response
	// Replayed is true when the outcome was stored by an earlier request.
	Replayed bool
	// Reclaimed is true when this call took over an orphaned record (a
	// holder that crashed or released its lease) and ran the action.
	Reclaimed bool
	// Lease is the lease this call held while running the action (zero on
	// replays).
	Lease Lease
}

// Do runs action once for req's (scope, key), or replays the stored
// outcome.
//
// Errors:
//   - *InvalidError (ErrInvalid): req is malformed; nothing was stored.
//   - *InProgressError (ErrInProgress): another holder's lease is live.
//   - ErrFingerprintMismatch: the key was used with other significant
//     fields; nothing was changed.
//   - ErrExpired: the key expired and the policy refuses it.
//   - ErrForeignKey: req.RefuseForeign is set and the key is another
//     scope's; nothing was changed.
//   - *FailedError (ErrFailed): the outcome is a stored permanent failure,
//     from this execution (wrapping the action's error) or replayed.
//   - ErrLeaseLost: the action ran but another processor reclaimed the key
//     meanwhile; this outcome was not recorded (the other one stands).
//   - the action's own transient error: the lease was released.
//   - a store error: nothing is known to have run (when claiming) or the
//     outcome could not be recorded (when finishing; the lease then runs out
//     and a retry runs the action again).
//
// A panic in action releases the lease and is re-raised.
func (e *Executor) Do(ctx context.Context, req Request, action Action) (Result, error) {
	return e.do(ctx, req, func(ctx context.Context, _ Lease) (Response, *Recording, error) {
		resp, err := action(ctx)
		var done *RecordedError
		if errors.As(err, &done) {
			return done.Response, &Recording{Status: done.Status, Response: done.Response}, nil
		}
		return resp, nil, err
	})
}

// leasedAction is the executor's own form of an action: it gets the lease
// and says whether it recorded its outcome itself.
type leasedAction func(ctx context.Context, lease Lease) (Response, *Recording, error)

func (e *Executor) do(ctx context.Context, req Request, action leasedAction) (res Result, err error) {
	if err := req.Validate(); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	ctx, span := e.startSpan(ctx, "idempotency.Do")
	if span.IsRecording() { // the hashes only for a span that keeps them
		span.SetAttributes(KeyAttributes(req.Scope, req.Key)...)
	}
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.Bool(AttrReplayed, res.Replayed), attribute.Bool(AttrReclaimed, res.Reclaimed))
			if res.Status != "" {
				span.SetAttributes(attribute.String(AttrStatus, string(res.Status)))
			}
		}
		EndSpan(span, err)
	}()
	claim, sent, err := e.claim(ctx, req)
	if err != nil {
		return Result{}, err
	}
	if claim.State != ClaimAcquired && claim.State != ClaimReclaimed {
		return Settle(claim)
	}
	return e.run(ctx, claim, sent, action)
}

// claim claims req's key: from the replay cache when it can answer, else
// from the store. sent is when the claim was sent to the store, on the
// monotonic clock: the lease it takes starts no earlier.
func (e *Executor) claim(ctx context.Context, req Request) (claim Claim, sent time.Time, err error) {
	ctx, span := e.startSpan(ctx, "idempotency.claim")
	cached := false
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.String(AttrClaimState, claim.State.String()), attribute.Bool(AttrCached, cached))
		}
		EndSpan(span, err)
	}()
	cache := e.cache
	if req.NoCache {
		cache = nil
	}
	if cache != nil {
		if claim, ok := cache.get(req); ok {
			cached = true
			e.metrics.Claim(ctx, req.Scope, claim.State)
			e.metrics.cachedReplay(ctx)
			return claim, time.Time{}, nil
		}
	}
	var (
		cacheSent time.Time
		cacheGen  uint64
	)
	if cache != nil {
		// Both before the claim is sent: a change report that arrives
		// while it is in flight keeps its answer out of the cache.
		cacheGen = cache.generation()
		cacheSent = cache.cfg.Clock()
	}
	sent = time.Now()
	claim, err = e.store.Claim(ctx, ClaimParams{
		Scope: req.Scope, Key: req.Key, Fingerprint: req.Fingerprint,
		LockTimeout: e.cfg.LockTimeout, Retention: e.cfg.Retention, Expired: e.cfg.Expired,
		RefusalHorizon: e.cfg.RefusalHorizon, RefuseForeign: req.RefuseForeign,
	})
	if err != nil {
		return Claim{}, time.Time{}, err
	}
	if cache != nil {
		cache.put(req, claim, cacheSent, cacheGen)
	}
	e.metrics.Claim(ctx, req.Scope, claim.State)
	return claim, sent, nil
}

// Settle turns a claim that did not acquire the lease into Do's result:
// a replay, or the error for in-progress, mismatch or expired claims. It
// lets other executors (pgstore's one-transaction mode, the payments
// client) answer exactly as Do does.
func Settle(c Claim) (Result, error) {
	switch c.State {
	case ClaimReplay:
		res := Result{Status: c.Record.Status, Replayed: true}
		if c.Record.Response != nil {
			res.Response = *c.Record.Response
		}
		if c.Record.Status == StatusFailed {
			return res, &FailedError{Response: res.Response, Replayed: true}
		}
		return res, nil
	case ClaimInProgress:
		return Result{}, &InProgressError{RetryAfter: c.RetryAfter}
	case ClaimMismatch:
		return Result{}, ErrFingerprintMismatch
	case ClaimExpired:
		return Result{}, ErrExpired
	case ClaimForeign:
		return Result{}, ErrForeignKey
	}
	return Result{}, fmt.Errorf("idempotency: Settle of a %s claim", c.State)
}

// run runs action under the claim's lease (the claim was sent at sent)
// and records its outcome.
//
// Heartbeats keep the lease from one interval after sent until the
// outcome is recorded: recording may wait on the store for up to
// FinishTimeout, longer than what is left of the lease. They stop before
// the lease is given back (a transient error, a panic, an abandon): a
// heartbeat landing after a release would take the key back for a whole
// LockTimeout. Meanwhile the holder trusts its lease only until
// LockTimeout minus LeaseMargin after the last confirmed send (see
// leaseGuard), and the action is cancelled when that passes.
func (e *Executor) run(ctx context.Context, claim Claim, sent time.Time, action leasedAction) (res Result, err error) {
	lease := claim.Lease
	actx, cancel := context.WithCancelCause(ctx)
	guard := newLeaseGuard(sent, e.cfg.LockTimeout-e.cfg.LeaseMargin, cancel)
	guard.lease, guard.reclaimed = lease, claim.State == ClaimReclaimed
	actx = context.WithValue(actx, leaseKey{}, guard)
	defer guard.ended()
	// Heartbeats go on while the action runs even if the request's context
	// is cancelled: an action that ignores its context must not lose its
	// lease to a second execution.
	// They start one interval after the claim, from the executor's queue
	// (heartbeat_starts.go): most actions end before it, and never pay for
	// a timer, a goroutine or a context of their own.
	hb := e.startHeartbeats(ctx, guard, max(0, e.cfg.HeartbeatInterval-time.Since(sent)))
	defer hb.stop()

	defer func() {
		if p := recover(); p != nil {
			hb.stop()
			cancel(context.Canceled)
			fctx, fcancel := e.finishContext(ctx)
			if rerr := e.store.Release(fctx, lease); rerr != nil {
				e.cfg.Logger.Warn("idempotency: release after panic failed", "key", ShortHash(lease.Key), "err", rerr)
			}
			fcancel()
			panic(p)
		}
	}()

	started := e.cfg.Clock()
	sctx, aspan := e.startSpan(actx, "idempotency.action")
	resp, done, aerr := action(sctx, lease)
	EndSpan(aspan, aerr)
	took := e.cfg.Clock().Sub(started)
	cause := context.Cause(actx)
	lost := errors.Is(cause, ErrLeaseLost)
	guard.returned.Store(true)
	cancel(context.Canceled)
	if lost {
		e.cfg.Logger.Warn("idempotency: the action ran past its lease and was cancelled", "key", ShortHash(lease.Key), "cause", cause)
	}

	fctx, fcancel := e.finishContext(ctx)
	defer fcancel()
	res = Result{Lease: lease, Reclaimed: claim.State == ClaimReclaimed}

	var perm *PermanentError
	var abandon *AbandonError
	switch {
	case errors.As(aerr, &abandon):
		hb.stop()
		var rerr error
		if ab, ok := e.store.(Abandoner); ok {
			rerr = ab.Abandon(fctx, lease)
		} else {
			rerr = e.store.Release(fctx, lease)
		}
		if rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
			e.cfg.Logger.Warn("idempotency: abandon failed; the lease runs out by itself", "key", ShortHash(lease.Key), "err", rerr)
		}
		return Result{}, abandon.Err
	case done != nil:
		hb.stop()
		res.Status, res.Response = done.Status, done.Response
		if done.Status == StatusFailed {
			e.metrics.Action(ctx, took, "failed")
			return res, &FailedError{Response: res.Response}
		}
		e.metrics.Action(ctx, took, "completed")
		return res, nil
	case aerr == nil:
		res.Status, res.Response = StatusCompleted, resp
		e.metrics.Action(ctx, took, "completed")
	case errors.As(aerr, &perm):
		res.Status, res.Response = StatusFailed, perm.Response
		e.metrics.Action(ctx, took, "failed")
	default:
		hb.stop()
		e.metrics.Action(ctx, took, "transient")
		if lost {
			e.metrics.LeaseLost(ctx)
		}
		if rerr := e.store.Release(fctx, lease); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
			e.cfg.Logger.Warn("idempotency: release failed; the lease runs out by itself", "key", ShortHash(lease.Key), "err", rerr)
		}
		switch {
		case !lost:
			return Result{}, aerr
		case errors.Is(aerr, ErrLeaseLost):
			return Result{}, aerr
		}
		return Result{}, fmt.Errorf("%w (action error: %w)", cause, aerr)
	}

	// An outcome is recorded under the fencing token even when the
	// holder stopped trusting its lease: should nobody have reclaimed
	// the key, it is the true outcome and spares a retry a second run;
	// should somebody have, the store refuses it (ErrLeaseLost).
	cerr := e.complete(fctx, lease, Completion{Status: res.Status, Response: res.Response, Retention: e.cfg.Retention})
	hb.stop()
	if cerr != nil {
		if errors.Is(cerr, ErrLeaseLost) {
			e.metrics.LeaseLost(ctx)
			return Result{}, fmt.Errorf("idempotency: outcome not recorded: %w", ErrLeaseLost)
		}
		e.cfg.Logger.Error("idempotency: outcome could not be recorded; the lease will run out and a retry re-runs the action",
			"key", ShortHash(lease.Key), "err", cerr)
		return Result{}, fmt.Errorf("idempotency: record outcome: %w", cerr)
	}
	if res.Status == StatusFailed {
		return res, &FailedError{Response: res.Response, Err: aerr}
	}
	return res, nil
}

// complete records the outcome, retrying a few times on store errors other
// than a lost lease: the action already ran, so giving up early means a
// retry runs it again.
func (e *Executor) complete(ctx context.Context, lease Lease, c Completion) (err error) {
	span := noSpan
	if e.tracing {
		ctx, span = e.tracer.Start(ctx, "idempotency.complete", trace.WithAttributes(attribute.String(AttrStatus, string(c.Status))))
	}
	defer func() { EndSpan(span, err) }()
	for attempt := 0; attempt < 3; attempt++ {
		if err = e.store.Complete(ctx, lease, c); err == nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrInvalid) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt+1) * 50 * time.Millisecond):
		}
	}
	return err
}

// heartbeats are the lease renewals of one action: its place in the
// executor's queue of actions waiting for their first heartbeat
// (heartbeat_starts.go), and once started their context and the loop's
// end.
type heartbeats struct {
	starts *heartbeatStarts
	ctx    context.Context // the request's: its values, for the heartbeats
	g      *leaseGuard
	due    time.Time // of the first heartbeat
	index  int       // in starts' queue; -1 once out of it

	mu sync.Mutex
	// stopped: stop was called, and no heartbeat may start after it.
	stopped bool
	// cancel ends the started loop, which closes done; both nil until
	// the queue starts it.
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the heartbeats and returns once none is in flight: one landing
// after the lease was given back would take the key back for a whole
// LockTimeout. Calls after the first do nothing.
func (h *heartbeats) stop() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.stopped = true
	cancel, done := h.cancel, h.done
	h.mu.Unlock()
	if cancel == nil {
		h.starts.leave(h) // never started, and now never will
		return
	}
	cancel()
	<-done
}

// heartbeat keeps the lease alive until ctx ends (once the outcome is
// recorded, or just before the lease is given back). It starts one
// interval after the claim was sent; each heartbeat goes out one interval
// after the send time of the last confirmed one, and a failed one is
// retried sooner, after half the time the holder still trusts its lease
// (at most one interval), so that a passing failure does not stop a
// healthy action. It ends when the lease is lost or no longer trusted:
// the guard has then cancelled the action.
func (e *Executor) heartbeat(ctx context.Context, g *leaseGuard, lease Lease) {
	g.arm()
	wait := time.NewTimer(time.Hour)
	defer wait.Stop()
	for {
		sent := time.Now()
		// No answer is worth waiting for past the moment the holder
		// stops trusting its lease.
		hctx, hcancel := context.WithDeadline(ctx, g.deadline())
		err := e.store.Heartbeat(hctx, lease, e.cfg.LockTimeout)
		hcancel()
		if ctx.Err() != nil {
			return // the outcome is recorded or the lease given back: nothing left to keep
		}
		var next time.Duration
		switch {
		case err == nil:
			if !g.renewed(sent) {
				return
			}
			next = e.cfg.HeartbeatInterval - time.Since(sent)
		case errors.Is(err, ErrLeaseLost):
			g.lost()
			return
		default:
			if !g.failed(err) {
				return
			}
			left := time.Until(g.deadline())
			e.cfg.Logger.Warn("idempotency: heartbeat failed; retrying", "key", ShortHash(lease.Key), "err", err,
				"stops_in", left.Round(time.Millisecond))
			if next = min(e.cfg.HeartbeatInterval, left/2); next < e.cfg.HeartbeatInterval/10 {
				next = left // one last try when the holder stops anyway
			}
		}
		wait.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
		}
	}
}

// isNil reports whether store is nil, or a nil pointer (or other nil
// reference) in a Store interface, which would panic on the first call
// instead of being refused at construction.
func isNil(store Store) bool {
	if store == nil {
		return true
	}
	switch v := reflect.ValueOf(store); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}
