package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/internal/crashpoint"
	"github.com/payonce/payonce/internal/schedule"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
)

// Reconciler compares provider state with local state and repairs.
type Reconciler struct {
	pool    *pgxpool.Pool
	store   *pgstore.Store // stuck records
	client  *payments.Client
	cfg     Config
	metrics *instruments
	tracer  trace.Tracer

	mu        sync.Mutex
	lastDrift time.Time
}

// New returns a Reconciler over the payments client's database and
// providers. It examines only intents of the client's providers. With a
// nil client it only reports (stuck records, webhook divergences): an
// operator without provider credentials can still run it. Errors:
// *ConfigError naming a bad field.
func New(pool *pgxpool.Pool, client *payments.Client, cfg *Config) (*Reconciler, error) {
	if pool == nil {
		return nil, &ConfigError{"pool", "nil"}
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ins, err := newInstruments(c.MeterProvider)
	if err != nil {
		return nil, err
	}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		return nil, err
	}
	return &Reconciler{pool: pool, store: store, client: client, cfg: c, metrics: ins,
		tracer: idempotency.Tracer(c.TracerProvider, "reconcile")}, nil
}

// Start runs RunOnce on Config.Spec until ctx ends or stop is called; runs
// never overlap within one Reconciler (a run still going when the next is
// due skips it). Several instances may run at once: they never examine
// the same intent together.
func (r *Reconciler) Start(ctx context.Context) (stop func()) {
	return schedule.Start(ctx, r.cfg.Spec, r.cfg.Logger, "reconcile: run failed", func(ctx context.Context) error {
		_, err := r.RunOnce(ctx)
		return err
	})
}

// RunOnce examines what is due now, repairs what it can prove, and stores
// and returns the run's report.
func (r *Reconciler) RunOnce(ctx context.Context) (_ *Report, err error) {
	ctx, span := r.tracer.Start(ctx, "reconcile.run", trace.WithAttributes(attribute.String("reconcile.instance", r.cfg.Instance)))
	defer func() { idempotency.EndSpan(span, err) }()
	started := time.Now()
	rep := &Report{Instance: r.cfg.Instance, Started: started}
	if err := r.pool.QueryRow(ctx, startRunSQL, r.cfg.Instance).Scan(&rep.RunID); err != nil {
		return nil, fmt.Errorf("reconcile: start run: %w", err)
	}
	runErr := r.run(ctx, rep)
	rep.Finished = time.Now()
	var errText any
	if runErr != nil {
		rep.Error = runErr.Error()
		errText = rep.Error
	}
	span.SetAttributes(attribute.Int64("reconcile.run_id", rep.RunID), attribute.Int("reconcile.examined", rep.Examined),
		attribute.Int("reconcile.repaired", rep.Repaired), attribute.Int("reconcile.failed_with_proof", rep.FailedWithProof),
		attribute.Int("reconcile.needs_review", rep.NeedsReview), attribute.Int("reconcile.rescheduled", rep.Rescheduled),
		attribute.Int("reconcile.divergences", len(rep.Items)))
	_, err = r.pool.Exec(context.WithoutCancel(ctx), finishRunSQL,
		rep.RunID, rep.Examined, rep.Repaired, rep.FailedWithProof, rep.NeedsReview, rep.Rescheduled, len(rep.Items), errText)
	r.metrics.run(ctx, rep, rep.Finished.Sub(started))
	r.cfg.Logger.Info("reconcile: run", "run", rep.RunID, "examined", rep.Examined, "repaired", rep.Repaired,
		"failed_with_proof", rep.FailedWithProof, "needs_review", rep.NeedsReview, "rescheduled", rep.Rescheduled,
		"divergences", len(rep.Items))
	return rep, errors.Join(runErr, err)
}

// run examines the intents due, checks succeeded charges and balances,
// then reports stuck records and webhook divergences. Without a payments
// client there is no provider to ask: it only reports.
func (r *Reconciler) run(ctx context.Context, rep *Report) error {
	var errs []error
	if r.client != nil {
		items, err := r.claim(ctx)
		if err != nil {
			return fmt.Errorf("reconcile: claim: %w", err)
		}
		for _, it := range items {
			if ctx.Err() != nil {
				errs = append(errs, ctx.Err())
				break
			}
			rep.Examined++
			if err := r.traceExamine(ctx, rep, it); err != nil {
				errs = append(errs, fmt.Errorf("intent %s: %w", idempotency.ShortHash(it.Key), err))
			}
			if r.cfg.Progress != nil {
				r.cfg.Progress(rep.Examined, len(items))
			}
		}
		errs = append(errs, r.verifySucceeded(ctx, rep), r.balanceDrift(ctx, rep))
	}
	errs = append(errs, r.stuckRecords(ctx, rep), r.webhookDivergences(ctx, rep))
	return errors.Join(errs...) // nil errors are dropped
}

// traceExamine examines one intent in a reconcile.examine span that says
// what was done: repaired, failed_with_proof, needs_review, rescheduled,
// or nothing.
func (r *Reconciler) traceExamine(ctx context.Context, rep *Report, it item) (err error) {
	attrs := append(idempotency.KeyAttributes(it.Scope, it.Key), attribute.String("reconcile.intent_kind", string(it.Kind)),
		attribute.String("payments.provider", it.Provider), attribute.String("payments.intent_status", string(it.Status)),
		attribute.Int("reconcile.checks", it.checks))
	ctx, span := r.tracer.Start(ctx, "reconcile.examine", trace.WithAttributes(attrs...))
	before := *rep
	defer func() {
		done := "nothing"
		switch {
		case rep.Repaired > before.Repaired:
			done = "repaired"
		case rep.FailedWithProof > before.FailedWithProof:
			done = "failed_with_proof"
		case rep.NeedsReview > before.NeedsReview:
			done = "needs_review"
		case rep.Rescheduled > before.Rescheduled:
			done = "rescheduled"
		}
		span.SetAttributes(attribute.String("reconcile.done", done))
		idempotency.EndSpan(span, err)
	}()
	return r.examine(ctx, rep, it)
}

// The attributes of a provider call's span, named as package payments
// names those of its own provider calls (its doc, "Tracing"): one query
// on a tracing backend finds both.
const (
	attrProvider        = "payments.provider"
	attrStep            = "payments.step"
	attrProviderKeyHash = "payments.provider_key_hash"
)

// startProvider starts the span of a provider call the reconciler makes
// (payments.provider.lookup, .refund_lookup, .verify_lookup, .void).
func (r *Reconciler) startProvider(ctx context.Context, step string, it item) (context.Context, trace.Span) {
	attrs := append(idempotency.KeyAttributes(it.Scope, it.Key), attribute.String(attrProvider, it.Provider),
		attribute.String(attrStep, step), attribute.String(attrProviderKeyHash, idempotency.ShortHash(it.ProviderKey)))
	return r.tracer.Start(ctx, "payments.provider."+step, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// endProvider ends a provider call's span with how many objects it found
// (-1: not a lookup).
func endProvider(span trace.Span, found int, err error) {
	if found >= 0 && err == nil {
		span.SetAttributes(attribute.Int("payments.provider_objects", found))
	}
	idempotency.EndSpan(span, err)
}

// lookupFailed decides on an intent whose lookup (e.g. "refund lookup")
// failed with err. Past the provider's deduplication window for attempt
// (e.g. "attempt 2") nothing will tell any more: review. Anything else is
// an outage: look again later, never fail on it.
func (r *Reconciler) lookupFailed(ctx context.Context, rep *Report, it item, err error, lookup, attempt string) error {
	if errors.Is(err, provider.ErrCannotTell) {
		return r.review(ctx, rep, it, Item{Kind: KindPastProviderWindow, ProviderState: "cannot tell", LocalState: string(it.Status)},
			"past "+it.Provider+"'s deduplication window for "+attempt+": "+err.Error())
	}
	if ce := (*provider.CredentialsError)(nil); errors.As(err, &ce) {
		// A configuration error, not an answer about the intent: an outage
		// until someone fixes the key (runbook: "The provider refuses
		// payonce's credentials").
		return r.reschedule(ctx, rep, it, Item{Kind: KindProviderUnavailable, ProviderState: lookup + " refused our credentials",
			Detail: fmt.Sprintf("%s refused payonce's credentials (HTTP %d %s): check %s and the key's permissions; the intent stays open until the key works",
				it.Provider, ce.Status, ce.Code, ce.Setting)}, recheckOutage)
	}
	return r.reschedule(ctx, rep, it, Item{Kind: KindProviderUnavailable, ProviderState: lookup + " failed", Detail: err.Error()}, recheckOutage)
}

// inconclusive reschedules, or flags for review once the checks ran out.
func (r *Reconciler) inconclusive(ctx context.Context, rep *Report, it item, base Item, why string) error {
	if it.checks+1 >= r.cfg.MaxChecks {
		return r.review(ctx, rep, it, base, fmt.Sprintf("%s after %d checks", why, it.checks+1))
	}
	return r.reschedule(ctx, rep, it, base, recheckInconclusive)
}

// recheck says why an intent is looked at again later, which decides
// whether this check counts: a counted check grows the backoff
// (Config.Schedule) and brings Config.MaxChecks nearer.
type recheck int

const (
	// recheckInconclusive: the provider's answer proves nothing either
	// way. Counted.
	recheckInconclusive recheck = iota
	// recheckOutage: the provider could not be asked. Counted, so that
	// the backoff grows; an outage itself never flags an intent for
	// review.
	recheckOutage
	// recheckWaiting: something is under way (a void just requested, a
	// call holding the key). Not counted.
	recheckWaiting
)

func (r *Reconciler) reschedule(ctx context.Context, rep *Report, it item, base Item, why recheck) error {
	delay := r.cfg.Schedule[min(it.checks, len(r.cfg.Schedule)-1)]
	if base.Action == "" {
		base.Action = ActionRescheduled
	}
	if base.Detail == "" {
		base.Detail = "next check in " + delay.String()
	}
	base.LocalState = string(it.Status)
	checks := it.checks
	if why != recheckWaiting {
		checks++
	}
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if err := r.client.Operator().RescheduleTx(ctx, tx, it.Scope, it.Key, checks, delay); err != nil {
			return err
		}
		return r.record(ctx, tx, rep, it, base)
	})
	if err == nil {
		rep.Rescheduled++
	}
	return err
}

func (r *Reconciler) review(ctx context.Context, rep *Report, it item, base Item, reason string) error {
	base.Action, base.Detail = ActionNeedsReview, reason
	return r.resolve(ctx, rep, it, base, payments.Proof{Status: payments.IntentNeedsReview, Reason: reason})
}

// settle resolves an intent on the provider's final word on its attempt:
// succeeded (completed locally) or failed (failed with that proof).
func (r *Reconciler) settle(ctx context.Context, rep *Report, it item, base Item, p payments.Proof) error {
	if p.Status == payments.IntentSucceeded {
		base.Kind, base.Action = KindPendingSucceededAtProvider, ActionCompleted
	} else {
		base.Kind, base.Action = KindPendingFailedAtProvider, ActionFailedWithProof
	}
	return r.resolve(ctx, rep, it, base, p)
}

// resolve applies proof through payments (claim, one transaction with the
// audit row).
func (r *Reconciler) resolve(ctx context.Context, rep *Report, it item, base Item, p payments.Proof) error {
	if base.Detail == "" {
		base.Detail = p.Reason
	}
	base.LocalState = string(it.Status)
	crashpoint.Reach(ctx, crashpoint.ReconcileBeforeApply, it.Key)
	err := r.client.Operator().Resolve(ctx, it.Examined, p, func(ctx context.Context, tx pgx.Tx) error {
		if err := r.client.Operator().CheckedTx(ctx, tx, it.Scope, it.Key); err != nil {
			return err
		}
		return r.record(ctx, tx, rep, it, base)
	})
	switch {
	case err == nil:
		switch p.Status {
		case payments.IntentNeedsReview:
			rep.NeedsReview++
		case payments.IntentSucceeded, payments.IntentRequiresAction:
			rep.Repaired++
		default:
			rep.FailedWithProof++
		}
		return nil
	case errors.Is(err, payments.ErrNotOpen):
		return r.client.Operator().ReleaseClaim(ctx, it.Scope, it.Key)
	case errors.Is(err, idempotency.ErrInProgress):
		// A caller's retry holds the key right now: it resolves the
		// intent itself, or the next run does.
		return r.reschedule(ctx, rep, it, Item{Kind: base.Kind, ProviderState: base.ProviderState,
			Detail: "a call holds the key; looked again later"}, recheckWaiting)
	case errors.Is(err, payments.ErrChanged), errors.Is(err, idempotency.ErrLeaseLost):
		// The attempt was sent again (or the key taken over) after the
		// lookup began: what it showed may predate a charge. Never
		// applied; looked at again.
		return r.reschedule(ctx, rep, it, Item{Kind: base.Kind, ProviderState: base.ProviderState,
			Detail: "the attempt was sent again during the lookup; looked again later"}, recheckWaiting)
	}
	return err
}

// record writes one report row in tx and adds it to the report.
func (r *Reconciler) record(ctx context.Context, tx pgx.Tx, rep *Report, it item, x Item) error {
	x.Provider, x.Scope, x.IntentKey, x.IntentKind = it.Provider, it.Scope, it.Key, it.Kind
	x.Currency, x.Age = string(it.Amount.Currency()), it.age
	if x.LocalState == "" {
		x.LocalState = string(it.Status)
	}
	if err := insertItem(ctx, tx, rep.RunID, x); err != nil {
		return err
	}
	rep.add(x)
	r.metrics.divergence(ctx, x)
	return nil
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func insertItem(ctx context.Context, db execer, run int64, x Item) error {
	_, err := db.Exec(ctx, insertItemSQL,
		run, x.Kind, x.Provider, x.Scope, x.IntentKey, x.IntentKind, x.Currency, x.LocalState, x.ProviderState, x.Action, x.Detail, x.Age)
	return err
}

// idsOf lists the provider objects a lookup found for one attempt or
// intent: "id(status) " each.
func idsOf[T any](found []T, idStatus func(T) (id, status string)) string {
	ids := ""
	for _, o := range found {
		id, status := idStatus(o)
		ids += id + "(" + status + ") "
	}
	return ids
}
