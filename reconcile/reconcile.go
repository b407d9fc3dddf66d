package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/metric"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
)

// Config configures a [Reconciler]. The zero value means defaults.
type Config struct {
	// Instance names this reconciler in claims and runs. Default
	// "<hostname>-<pid>".
	Instance string
	// Grace is how long an open intent is left to its caller (and its
	// retries) before the reconciler looks at it. Default 2m.
	Grace time.Duration
	// ActionGrace is how long an intent waiting for the customer
	// (REQUIRES_ACTION: 3-D Secure) is left alone before the reconciler
	// looks at it. Default 24h.
	ActionGrace time.Duration
	// Schedule is the delay before each next check of an intent without a
	// conclusive answer (backoff): the n-th check waits Schedule[n]
	// (the last entry repeats). Default 1m, 5m, 1h, 6h, 24h.
	Schedule []time.Duration
	// MaxChecks is how many inconclusive checks an intent gets before it
	// becomes NEEDS_REVIEW. Provider outages do not count. Default 6.
	MaxChecks int
	// Batch is how many intents one run examines at most. Default 100.
	Batch int
	// ClaimTTL is how long a run holds the intents it examines; a crashed
	// reconciler's claims expire after it. Default 5m.
	ClaimTTL time.Duration
	// VerifyWithin: charges that succeeded locally within this window (and
	// at least Grace ago) are checked once against the provider. Default
	// 24h.
	VerifyWithin time.Duration
	// VerifyBatch bounds those checks per run. Default 50.
	VerifyBatch int
	// DriftWindow and DriftLag: every DriftEvery, the money each provider
	// implementing payments.Totaler moved in [now-DriftLag-DriftWindow,
	// now-DriftLag) is compared per currency with the ledger's entries of
	// the intents created in that window. Defaults 24h, 4h (PayPal's
	// transaction search lags up to 3h), 1h.
	DriftWindow, DriftLag, DriftEvery time.Duration
	// StuckAfter reports idempotency records still PROCESSING this long
	// after their lease ended. Default 5m.
	StuckAfter time.Duration
	// VoidAfter is how long to wait for a late AUTHORISATION before
	// voiding an attempt by its reference (providers implementing
	// payments.Voider: Adyen's technical cancel). Default 30m.
	VoidAfter time.Duration
	// Redrive allows a new attempt (the next attempt number, new derived
	// references) for an intent proven to have left nothing at the
	// provider; without it such an intent is failed with that proof.
	// Default false: a client that wants to pay again uses a new key.
	Redrive bool
	// Spec is the cron schedule of [Reconciler.Start] (five fields, six
	// with seconds, or a descriptor such as "@every 1m"). Default
	// "@every 1m".
	Spec string
	// Logger receives run summaries and failures. Default: discarded.
	Logger *slog.Logger
	// MeterProvider receives the reconcile instruments. Default: no-op.
	MeterProvider metric.MeterProvider
}

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ConfigError names a bad configuration field.
type ConfigError struct{ Field, Reason string }

func (e *ConfigError) Error() string { return "reconcile: " + e.Field + ": " + e.Reason }

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Instance == "" {
		host, _ := os.Hostname()
		out.Instance = host + "-" + strconv.Itoa(os.Getpid())
	}
	def := func(d *time.Duration, v time.Duration, name string) error {
		if *d < 0 {
			return &ConfigError{name, "negative"}
		}
		if *d == 0 {
			*d = v
		}
		return nil
	}
	for _, f := range []struct {
		d    *time.Duration
		v    time.Duration
		name string
	}{{&out.Grace, 2 * time.Minute, "Grace"}, {&out.ClaimTTL, 5 * time.Minute, "ClaimTTL"},
		{&out.StuckAfter, 5 * time.Minute, "StuckAfter"}, {&out.VoidAfter, 30 * time.Minute, "VoidAfter"},
		{&out.ActionGrace, 24 * time.Hour, "ActionGrace"}, {&out.VerifyWithin, 24 * time.Hour, "VerifyWithin"},
		{&out.DriftWindow, 24 * time.Hour, "DriftWindow"}, {&out.DriftLag, 4 * time.Hour, "DriftLag"}, {&out.DriftEvery, time.Hour, "DriftEvery"}} {
		if err := def(f.d, f.v, f.name); err != nil {
			return out, err
		}
	}
	if len(out.Schedule) == 0 {
		out.Schedule = []time.Duration{time.Minute, 5 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour}
	}
	for i, d := range out.Schedule {
		if d <= 0 {
			return out, &ConfigError{fmt.Sprintf("Schedule[%d]", i), "must be positive"}
		}
	}
	switch {
	case out.MaxChecks < 0:
		return out, &ConfigError{"MaxChecks", "negative"}
	case out.MaxChecks == 0:
		out.MaxChecks = 6
	}
	switch {
	case out.VerifyBatch < 0:
		return out, &ConfigError{"VerifyBatch", "negative"}
	case out.VerifyBatch == 0:
		out.VerifyBatch = 50
	}
	switch {
	case out.Batch < 0:
		return out, &ConfigError{"Batch", "negative"}
	case out.Batch == 0:
		out.Batch = 100
	}
	if out.Spec == "" {
		out.Spec = "@every 1m"
	}
	if _, err := cronParser.Parse(out.Spec); err != nil {
		return out, &ConfigError{"Spec", err.Error()}
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out, nil
}

// Reconciler compares provider state with local state and repairs.
type Reconciler struct {
	pool    *pgxpool.Pool
	client  *payments.Client
	cfg     Config
	metrics *instruments

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
	return &Reconciler{pool: pool, client: client, cfg: c, metrics: ins}, nil
}

// Start runs RunOnce on Config.Spec until ctx ends or stop is called; runs
// never overlap within one Reconciler (a run still going when the next is
// due skips it). Several instances may run at once: they never examine
// the same intent together.
func (r *Reconciler) Start(ctx context.Context) (stop func()) {
	c := cron.New(cron.WithParser(cronParser), cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	ctx, cancel := context.WithCancel(ctx)
	_, _ = c.AddFunc(r.cfg.Spec, func() {
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("reconcile: run failed", "err", err)
		}
	})
	c.Start()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-c.Stop().Done()
		})
	}
}

// item is one open intent claimed for examination.
type item struct {
	payments.Examined
	checks int
	age    time.Duration
}

const claimSQL = `WITH due AS (
    SELECT idempotency_key, user_id FROM payment_intents
     WHERE status IN ('PENDING', 'UNKNOWN', 'REQUIRES_ACTION')
       AND updated_at < now() - $1::interval
       AND (status <> 'REQUIRES_ACTION' OR updated_at < now() - $5::interval)
       AND (reconcile_next_at IS NULL OR reconcile_next_at <= now())
       AND (reconcile_claimed_until IS NULL OR reconcile_claimed_until < now())
       AND provider = ANY($6)
     ORDER BY coalesce(reconcile_next_at, updated_at)
     LIMIT $2
     FOR UPDATE SKIP LOCKED)
UPDATE payment_intents p
   SET reconcile_claimed_until = now() + $3::interval, reconcile_claimed_by = $4
  FROM due
 WHERE p.idempotency_key = due.idempotency_key AND p.user_id = due.user_id
RETURNING p.idempotency_key, p.user_id, p.kind, p.provider, p.provider_key, coalesce(p.provider_id, ''), p.attempt,
          p.status, p.amount::text, p.currency, p.recipient, p.payment_method, coalesce(p.charge_key, ''),
          coalesce((SELECT c.provider_id FROM payment_intents c WHERE c.idempotency_key = p.charge_key AND c.user_id = p.user_id), ''),
          p.created_at, p.updated_at, p.reconcile_checks, now() - p.created_at, p.attempt_sent_at`

func (r *Reconciler) claim(ctx context.Context) ([]item, error) {
	if r.client == nil {
		return nil, nil // report only
	}
	rows, err := r.pool.Query(ctx, claimSQL, r.cfg.Grace, r.cfg.Batch, r.cfg.ClaimTTL, r.cfg.Instance, r.cfg.ActionGrace,
		r.client.ProviderNames())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []item
	for rows.Next() {
		var it item
		var status, amount, currency string
		var sentAt *time.Time
		if err := rows.Scan(&it.Key, &it.Scope, &it.Kind, &it.Provider, &it.ProviderKey, &it.ProviderID, &it.Attempt,
			&status, &amount, &currency, &it.Recipient, &it.PaymentMethod, &it.ChargeKey, &it.ChargeID,
			&it.CreatedAt, &it.UpdatedAt, &it.checks, &it.age, &sentAt); err != nil {
			return nil, err
		}
		if sentAt != nil {
			it.SentAt = *sentAt
		}
		it.Status = payments.IntentStatus(status)
		var err error
		it.Amount, err = money.Parse(amount, money.Currency(currency))
		if err != nil {
			return nil, fmt.Errorf("intent amount %s %s: %w", amount, currency, err)
		}
		out = append(out, it)
	}
	return out, rows.Err()
}

// RunOnce examines what is due now, repairs what it can prove, and stores
// and returns the run's report.
func (r *Reconciler) RunOnce(ctx context.Context) (*Report, error) {
	started := time.Now()
	rep := &Report{Instance: r.cfg.Instance, Started: started}
	if err := r.pool.QueryRow(ctx, `INSERT INTO reconcile_runs (instance) VALUES ($1) RETURNING id`, r.cfg.Instance).Scan(&rep.RunID); err != nil {
		return nil, fmt.Errorf("reconcile: start run: %w", err)
	}
	runErr := r.run(ctx, rep)
	rep.Finished = time.Now()
	var errText any
	if runErr != nil {
		rep.Error = runErr.Error()
		errText = rep.Error
	}
	_, err := r.pool.Exec(context.WithoutCancel(ctx), `UPDATE reconcile_runs SET finished_at = now(), examined = $2, repaired = $3,
		failed_with_proof = $4, needs_review = $5, rescheduled = $6, divergences = $7, error = $8 WHERE id = $1`,
		rep.RunID, rep.Examined, rep.Repaired, rep.FailedWithProof, rep.NeedsReview, rep.Rescheduled, len(rep.Items), errText)
	r.metrics.run(ctx, rep, rep.Finished.Sub(started))
	r.cfg.Logger.Info("reconcile: run", "run", rep.RunID, "examined", rep.Examined, "repaired", rep.Repaired,
		"failed_with_proof", rep.FailedWithProof, "needs_review", rep.NeedsReview, "rescheduled", rep.Rescheduled,
		"divergences", len(rep.Items))
	return rep, errors.Join(runErr, err)
}

func (r *Reconciler) run(ctx context.Context, rep *Report) error {
	items, err := r.claim(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: claim: %w", err)
	}
	var errs []error
	for _, it := range items {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		rep.Examined++
		if err := r.examine(ctx, rep, it); err != nil {
			errs = append(errs, fmt.Errorf("intent %s: %w", idempotency.ShortHash(it.Key), err))
		}
	}
	if err := r.verifySucceeded(ctx, rep); err != nil {
		errs = append(errs, err)
	}
	if err := r.balanceDrift(ctx, rep); err != nil {
		errs = append(errs, err)
	}
	if err := r.stuckRecords(ctx, rep); err != nil {
		errs = append(errs, err)
	}
	if err := r.webhookDivergences(ctx, rep); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Actions recorded in the report.
const (
	ActionCompleted       = "completed locally"
	ActionFailedWithProof = "failed with proof"
	ActionNewAttempt      = "reopened for a new attempt"
	ActionNeedsReview     = "needs review"
	ActionRescheduled     = "rescheduled"
	ActionVoidSent        = "void requested"
	ActionReported        = "reported"
)

// Divergence kinds.
const (
	KindPendingSucceededAtProvider = "pending locally, succeeded at provider"
	KindPendingFailedAtProvider    = "pending locally, failed at provider"
	KindPendingMissingAtProvider   = "pending locally, missing at provider"
	KindPendingUnknownAtProvider   = "pending locally, unknown at provider"
	KindAmountDiffers              = "amount differs"
	KindSucceededMissingAtProvider = "succeeded locally, missing at provider"
	KindSucceededFailedAtProvider  = "succeeded locally, failed at provider"
	KindRefundTotalsDiffer         = "refund totals differ"
	KindBalanceDrift               = "balance drift"
	KindDuplicateAtProvider        = "several charges at provider"
	KindRefundOutcomeMissing       = "refund outcome never arrived"
	KindProviderUnavailable        = "provider unavailable"
	KindStuckRecord                = "stuck record"
	KindUnmatchedProviderObject    = "provider object without local intent"
	KindWebhookConflict            = "provider contradicts a final local state"
	// KindPastProviderWindow: an open intent whose references are past the
	// provider's deduplication window, and the provider can no longer say
	// what the attempt did (no lookup by payonce's references then).
	KindPastProviderWindow = "past provider's deduplication window"
	// KindVoidRefused: a void of an attempt whose outcome was lost did not
	// cancel anything (Adyen TECHNICAL_CANCEL or CANCEL_OR_REFUND
	// success=false): the payment may exist, captured.
	KindVoidRefused = "void refused at provider"
)

func (r *Reconciler) examine(ctx context.Context, rep *Report, it item) error {
	prov := r.client.Provider(it.Provider)
	if prov == nil {
		return r.review(ctx, rep, it, Item{Kind: KindPendingUnknownAtProvider, ProviderState: "provider not configured"},
			"the intent's provider "+it.Provider+" is not configured")
	}
	if it.Kind == "REFUND" {
		return r.examineRefund(ctx, rep, it)
	}
	res, err := prov.Lookup(ctx, payments.LookupRequest{Key: it.Key, ProviderKey: it.ProviderKey, ProviderID: it.ProviderID,
		From: it.lookupFrom(), To: payments.LookupUntil(it.SentAt, payments.DedupWindowOf(prov, payments.StepCharge))})
	if errors.Is(err, payments.ErrCannotTell) {
		return r.review(ctx, rep, it, Item{Kind: KindPastProviderWindow, ProviderState: "cannot tell", LocalState: string(it.Status)},
			"past "+it.Provider+"'s deduplication window for attempt "+strconv.Itoa(it.Attempt)+": "+err.Error())
	}
	if err != nil {
		// An outage: look again later, never fail on it.
		return r.reschedule(ctx, rep, it, Item{Kind: KindProviderUnavailable, ProviderState: "lookup failed", Detail: err.Error()}, false)
	}
	mine := res.Charges
	base := Item{LocalState: string(it.Status)}
	switch {
	case len(mine) > 1:
		ids := ""
		for _, ch := range mine {
			ids += ch.ProviderID + "(" + string(ch.Status) + ") "
		}
		base.Kind, base.ProviderState = KindDuplicateAtProvider, ids
		return r.review(ctx, rep, it, base, fmt.Sprintf("%d charges at %s for one attempt: %s", len(mine), it.Provider, ids))
	case len(mine) == 1:
		ch := mine[0]
		base.ProviderState = string(ch.Status) + " " + ch.ProviderID
		if ch.Amount.Currency() != "" && !ch.Amount.Equal(it.Amount) {
			base.Kind = KindAmountDiffers
			base.ProviderState += " " + ch.Amount.AmountString() + " " + string(ch.Amount.Currency())
			return r.review(ctx, rep, it, base, "the provider charged "+ch.Amount.AmountString()+", the intent is "+it.Amount.AmountString())
		}
		switch ch.Status {
		case payments.ChargeSucceeded:
			base.Kind, base.Action = KindPendingSucceededAtProvider, ActionCompleted
			return r.resolve(ctx, rep, it, base, payments.Proof{Status: payments.IntentSucceeded, ProviderID: ch.ProviderID,
				Reason: "the provider reports the charge succeeded"})
		case payments.ChargeFailed:
			base.Kind, base.Action = KindPendingFailedAtProvider, ActionFailedWithProof
			return r.resolve(ctx, rep, it, base, payments.Proof{Status: payments.IntentDeclined, ProviderID: ch.ProviderID,
				DeclineCode: "declined", Reason: "the provider reports the charge failed"})
		case payments.ChargeRequiresAction:
			if it.Status != payments.IntentRequiresAction {
				// Record what the provider waits for; ActionGrace later,
				// the intent is looked at again.
				base.Kind, base.Action = KindPendingUnknownAtProvider, ActionCompleted
				return r.resolve(ctx, rep, it, base, payments.Proof{Status: payments.IntentRequiresAction, ProviderID: ch.ProviderID,
					Reason: "the provider waits for the customer's action"})
			}
			base.Kind = KindPendingUnknownAtProvider
			return r.inconclusive(ctx, rep, it, base, "still waiting for the customer at the provider")
		default: // pending at the provider: still open there
			base.Kind = KindPendingUnknownAtProvider
			return r.inconclusive(ctx, rep, it, base, "still "+string(ch.Status)+" at the provider")
		}
	case res.Consistent:
		base.Kind, base.ProviderState = KindPendingMissingAtProvider, "none (consistent lookup)"
		if it.SentAt.IsZero() {
			// A reopened attempt nobody retried yet: reopening it again
			// would only advance the attempt number on every run. It waits
			// for the client's retry; once its checks run out, nothing was
			// charged by any attempt and it fails with that proof.
			if it.checks+1 >= r.cfg.MaxChecks {
				base.Action = ActionFailedWithProof
				return r.resolve(ctx, rep, it, base, payments.Proof{Status: payments.IntentFailed,
					Reason: fmt.Sprintf("no charge at the provider for any attempt; attempt %d was reopened and never sent (no retry after %d checks)",
						it.Attempt, it.checks+1)})
			}
			return r.reschedule(ctx, rep, it, base, true)
		}
		if r.cfg.Redrive {
			base.Action = ActionNewAttempt
			return r.resolve(ctx, rep, it, base, payments.Proof{Status: payments.IntentFailed, NextAttempt: true,
				Reason: "a consistent lookup found no charge for attempt " + strconv.Itoa(it.Attempt)})
		}
		base.Action = ActionFailedWithProof
		return r.resolve(ctx, rep, it, base, payments.Proof{Status: payments.IntentFailed,
			Reason: "a consistent lookup found no charge for this attempt"})
	default:
		base.Kind, base.ProviderState = KindPendingUnknownAtProvider, "none yet (eventually consistent)"
		if v, ok := prov.(payments.Voider); ok && it.age >= r.cfg.VoidAfter {
			sent, err := r.voidSent(ctx, it)
			if err != nil {
				return err
			}
			if !sent {
				if err := v.Void(ctx, payments.VoidRequest{Key: it.Key, ProviderKey: it.ProviderKey, ProviderID: it.ProviderID}); err != nil {
					return r.reschedule(ctx, rep, it, Item{Kind: KindProviderUnavailable, ProviderState: "void failed", Detail: err.Error()}, false)
				}
				base.Action, base.Detail = ActionVoidSent, "void of "+voidTarget(it)+"; its notification settles the intent"
				return r.reschedule(ctx, rep, it, base, false)
			}
			// A void that cancelled something settles the intent through
			// its notification (EventCancelled). One that did not is no
			// proof of absence: a captured payment cannot be cancelled by
			// reference, a refused one cannot be cancelled at all. A human
			// reads the provider's reason.
			evs, err := r.client.Operator().StoredEvents(ctx, it.Provider, it.ProviderKey)
			if err != nil {
				return err
			}
			// The payment such a refusal hints at announces itself by its
			// AUTHORISATION (Adyen retries deliveries), which the next
			// lookups find: the intent waits for it, and goes to review
			// only once its checks run out.
			for _, ev := range evs {
				if ev.Kind == payments.EventCancelFailed {
					base.ProviderState = "void refused: " + ev.DeclineCode
					if ev.ChargeID != "" {
						base.ProviderState += " (payment " + ev.ChargeID + ")"
					}
					if it.checks+1 >= r.cfg.MaxChecks {
						base.Kind = KindVoidRefused
						return r.review(ctx, rep, it, base, fmt.Sprintf("the provider refused to void the attempt (%s: %s) and no "+
							"notification of the payment came after %d checks: the payment may exist and be captured; check it at the provider",
							ev.Type, ev.DeclineCode, it.checks+1))
					}
					base.Detail = "the void was refused (" + ev.DeclineCode + "): waiting for the payment's notification"
					return r.reschedule(ctx, rep, it, base, true)
				}
			}
		}
		return r.inconclusive(ctx, rep, it, base, "no conclusive answer from the provider")
	}
}

// examineRefund asks providers that can look a refund up
// (payments.RefundLooker) what exists for the attempt; others report
// refund outcomes only by notification: the intent waits for it, then goes
// to review.
func (r *Reconciler) examineRefund(ctx context.Context, rep *Report, it item) error {
	base := Item{Kind: KindRefundOutcomeMissing, LocalState: string(it.Status)}
	rl, ok := r.client.Provider(it.Provider).(payments.RefundLooker)
	if !ok {
		base.ProviderState = "no refund lookup; no notification yet"
		return r.inconclusive(ctx, rep, it, base, "the refund's outcome never arrived")
	}
	res, err := rl.LookupRefund(ctx, payments.RefundLookupRequest{Key: it.Key, ProviderKey: it.ProviderKey,
		ProviderID: it.ProviderID, ChargeID: it.ChargeID})
	if errors.Is(err, payments.ErrCannotTell) {
		return r.review(ctx, rep, it, Item{Kind: KindPastProviderWindow, ProviderState: "cannot tell", LocalState: string(it.Status)},
			"past "+it.Provider+"'s deduplication window for the refund: "+err.Error())
	}
	if err != nil {
		return r.reschedule(ctx, rep, it, Item{Kind: KindProviderUnavailable, ProviderState: "refund lookup failed", Detail: err.Error()}, false)
	}
	switch {
	case len(res.Refunds) > 1:
		ids := ""
		for _, rf := range res.Refunds {
			ids += rf.ProviderID + "(" + string(rf.Status) + ") "
		}
		base.Kind, base.ProviderState = KindDuplicateAtProvider, ids
		return r.review(ctx, rep, it, base, fmt.Sprintf("%d refunds at %s for one attempt: %s", len(res.Refunds), it.Provider, ids))
	case len(res.Refunds) == 1:
		rf := res.Refunds[0]
		base.ProviderState = string(rf.Status) + " " + rf.ProviderID
		if rf.Amount.Currency() != "" && !rf.Amount.Equal(it.Amount) {
			base.Kind = KindAmountDiffers
			return r.review(ctx, rep, it, base, "the provider refunded "+rf.Amount.AmountString()+", the intent is "+it.Amount.AmountString())
		}
		switch rf.Status {
		case payments.RefundSucceeded:
			base.Kind, base.Action = KindPendingSucceededAtProvider, ActionCompleted
			return r.resolve(ctx, rep, it, base, payments.Proof{Status: payments.IntentSucceeded, ProviderID: rf.ProviderID,
				Reason: "the provider reports the refund succeeded"})
		case payments.RefundFailed:
			base.Kind, base.Action = KindPendingFailedAtProvider, ActionFailedWithProof
			return r.resolve(ctx, rep, it, base, payments.Proof{Status: payments.IntentFailed, ProviderID: rf.ProviderID,
				Reason: "the provider reports the refund failed"})
		default:
			return r.inconclusive(ctx, rep, it, base, "the refund is still pending at the provider")
		}
	case res.Consistent:
		base.Kind, base.ProviderState, base.Action = KindPendingMissingAtProvider, "none (consistent lookup)", ActionFailedWithProof
		return r.resolve(ctx, rep, it, base, payments.Proof{Status: payments.IntentFailed,
			Reason: "a consistent lookup found no refund for this attempt"})
	default:
		base.ProviderState = "none yet (eventually consistent)"
		return r.inconclusive(ctx, rep, it, base, "the refund's outcome never arrived")
	}
}

// lookupFrom is where a lookup by creation time starts: a little before
// the attempt was first sent (a reopened attempt's own send, not the
// intent's creation).
func (it item) lookupFrom() time.Time {
	from := it.CreatedAt
	if !it.SentAt.IsZero() && it.SentAt.After(from) {
		from = it.SentAt
	}
	return from.Add(-10 * time.Minute)
}

// voidTarget says what a void addresses: the known provider object
// (reversed whatever its state), else the attempt's reference (a
// technical cancel).
func voidTarget(it item) string {
	if it.ProviderID != "" {
		return "payment " + it.ProviderID + " (cancel or refund)"
	}
	return "reference " + it.ProviderKey + " (technical cancel)"
}

func (r *Reconciler) voidSent(ctx context.Context, it item) (bool, error) {
	var n int
	err := r.pool.QueryRow(ctx, `SELECT count(*) FROM reconcile_items WHERE scope = $1 AND intent_key = $2 AND action = $3`,
		it.Scope, it.Key, ActionVoidSent).Scan(&n)
	return n > 0, err
}

// inconclusive reschedules, or flags for review once the checks ran out.
func (r *Reconciler) inconclusive(ctx context.Context, rep *Report, it item, base Item, why string) error {
	if it.checks+1 >= r.cfg.MaxChecks {
		return r.review(ctx, rep, it, base, fmt.Sprintf("%s after %d checks", why, it.checks+1))
	}
	return r.reschedule(ctx, rep, it, base, true)
}

func (r *Reconciler) reschedule(ctx context.Context, rep *Report, it item, base Item, count bool) error {
	delay := r.cfg.Schedule[min(it.checks, len(r.cfg.Schedule)-1)]
	if base.Action == "" {
		base.Action = ActionRescheduled
	}
	if base.Detail == "" {
		base.Detail = "next check in " + delay.String()
	}
	base.LocalState = string(it.Status)
	checks := it.checks
	if count || base.Kind == KindProviderUnavailable {
		checks++ // backoff grows either way; outages never lead to review
	}
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE payment_intents SET reconcile_checks = $3, reconcile_next_at = now() + $4::interval,
			reconcile_claimed_until = NULL WHERE idempotency_key = $1 AND user_id = $2`, it.Key, it.Scope, checks, delay)
		if err != nil {
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

// resolve applies proof through payments (claim, one transaction with the
// audit row).
func (r *Reconciler) resolve(ctx context.Context, rep *Report, it item, base Item, p payments.Proof) error {
	if base.Detail == "" {
		base.Detail = p.Reason
	}
	base.LocalState = string(it.Status)
	err := r.client.Operator().Resolve(ctx, it.Examined, p, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE payment_intents SET reconcile_checks = reconcile_checks + 1, reconcile_claimed_until = NULL
			WHERE idempotency_key = $1 AND user_id = $2`, it.Key, it.Scope); err != nil {
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
		_, err = r.pool.Exec(ctx, `UPDATE payment_intents SET reconcile_claimed_until = NULL WHERE idempotency_key = $1 AND user_id = $2`, it.Key, it.Scope)
		return err
	case errors.Is(err, idempotency.ErrInProgress):
		// A caller's retry holds the key right now: it resolves the
		// intent itself, or the next run does.
		return r.reschedule(ctx, rep, it, Item{Kind: base.Kind, ProviderState: base.ProviderState,
			Detail: "a call holds the key; looked again later"}, false)
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
	_, err := db.Exec(ctx, `INSERT INTO reconcile_items (run_id, kind, provider, scope, intent_key, intent_kind, currency,
		local_state, provider_state, action, detail, age) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		run, x.Kind, x.Provider, x.Scope, x.IntentKey, x.IntentKind, x.Currency, x.LocalState, x.ProviderState, x.Action, x.Detail, x.Age)
	return err
}

// stuckRecords reports idempotency records PROCESSING long after their
// lease ended (a crashed holder whose key nobody retried).
func (r *Reconciler) stuckRecords(ctx context.Context, rep *Report) error {
	rows, err := r.pool.Query(ctx, `SELECT user_id, idempotency_key, lock_version, now() - locked_until, now() - created_at
		FROM idempotency_store WHERE status = 'PROCESSING' AND locked_until < now() - $1::interval
		ORDER BY locked_until LIMIT $2`, r.cfg.StuckAfter, r.cfg.Batch)
	if err != nil {
		return fmt.Errorf("reconcile: stuck records: %w", err)
	}
	var found []Item
	for rows.Next() {
		var x Item
		var version int64
		var past time.Duration
		if err := rows.Scan(&x.Scope, &x.IntentKey, &version, &past, &x.Age); err != nil {
			rows.Close()
			return err
		}
		x.Kind, x.Action, x.LocalState = KindStuckRecord, ActionReported, "PROCESSING"
		x.Detail = fmt.Sprintf("lease ended %s ago, holder version %d; a retry of the key reclaims it (payonce release to force)",
			past.Round(time.Second), version)
		found = append(found, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	return r.reportAll(ctx, rep, found)
}

// webhookDivergences reports events stored since the previous run that
// named no local intent or contradicted a final one.
func (r *Reconciler) webhookDivergences(ctx context.Context, rep *Report) error {
	rows, err := r.pool.Query(ctx, `SELECT provider, event_id, event_type, outcome, detail, coalesce(intent_user, ''),
		coalesce(intent_key, ''), coalesce(currency, ''), coalesce(provider_id, ''), now() - received_at
		FROM webhook_events
		WHERE outcome IN ('unmatched', 'conflict', 'second_object')
		  AND received_at > coalesce((SELECT max(started_at) FROM reconcile_runs WHERE finished_at IS NOT NULL AND id <> $1), '-infinity')
		ORDER BY received_at`, rep.RunID)
	if err != nil {
		return fmt.Errorf("reconcile: webhook events: %w", err)
	}
	var found []Item
	for rows.Next() {
		var x Item
		var id, typ, outcome, pid string
		if err := rows.Scan(&x.Provider, &id, &typ, &outcome, &x.Detail, &x.Scope, &x.IntentKey, &x.Currency, &pid, &x.Age); err != nil {
			rows.Close()
			return err
		}
		switch outcome {
		case payments.EventConflict:
			x.Kind = KindWebhookConflict
		case payments.EventSecondObject:
			x.Kind = KindDuplicateAtProvider
		default:
			x.Kind = KindUnmatchedProviderObject
		}
		x.ProviderState, x.Action = typ+" "+pid+" (event "+id+")", ActionReported
		found = append(found, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	return r.reportAll(ctx, rep, found)
}

// reportAll stores items that need no repair and adds them to the report.
func (r *Reconciler) reportAll(ctx context.Context, rep *Report, items []Item) error {
	for _, x := range items {
		if err := insertItem(ctx, r.pool, rep.RunID, x); err != nil {
			return err
		}
		rep.add(x)
		r.metrics.divergence(ctx, x)
	}
	return nil
}

// verifySucceeded checks, once each, that charges that succeeded locally
// exist at the provider with their amount. A divergence is reported (the
// intent is final: a human decides); an unreachable provider leaves the
// charge to a later run.
func (r *Reconciler) verifySucceeded(ctx context.Context, rep *Report) error {
	if r.client == nil {
		return nil
	}
	rows, err := r.pool.Query(ctx, `WITH due AS (
	    SELECT idempotency_key, user_id FROM payment_intents
	     WHERE status = 'SUCCEEDED' AND kind = 'CHARGE' AND verified_at IS NULL
	       AND updated_at BETWEEN now() - $1::interval AND now() - $2::interval AND provider = ANY($3)
	     ORDER BY updated_at LIMIT $4 FOR UPDATE SKIP LOCKED)
	UPDATE payment_intents p SET verified_at = now() FROM due
	 WHERE p.idempotency_key = due.idempotency_key AND p.user_id = due.user_id
	RETURNING p.idempotency_key, p.user_id, p.provider, p.provider_key, coalesce(p.provider_id, ''), p.amount::text, p.currency,
	          p.created_at, now() - p.created_at`, r.cfg.VerifyWithin, r.cfg.Grace, r.client.ProviderNames(), r.cfg.VerifyBatch)
	if err != nil {
		return fmt.Errorf("reconcile: verify: %w", err)
	}
	var due []item
	for rows.Next() {
		var it item
		var amount, currency string
		if err := rows.Scan(&it.Key, &it.Scope, &it.Provider, &it.ProviderKey, &it.ProviderID, &amount, &currency, &it.CreatedAt, &it.age); err != nil {
			rows.Close()
			return err
		}
		var err error
		it.Amount, err = money.Parse(amount, money.Currency(currency))
		if err != nil {
			rows.Close()
			return err
		}
		it.Kind, it.Status = "CHARGE", payments.IntentSucceeded
		due = append(due, it)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var found []Item
	for _, it := range due {
		res, err := r.client.Provider(it.Provider).Lookup(ctx, payments.LookupRequest{Key: it.Key, ProviderKey: it.ProviderKey,
			ProviderID: it.ProviderID, From: it.CreatedAt.Add(-10 * time.Minute), To: time.Now().Add(5 * time.Minute), WithRefunds: true})
		if err != nil {
			if _, uerr := r.pool.Exec(ctx, `UPDATE payment_intents SET verified_at = NULL WHERE idempotency_key = $1 AND user_id = $2`,
				it.Key, it.Scope); uerr != nil {
				return uerr
			}
			continue
		}
		x := Item{Provider: it.Provider, Scope: it.Scope, IntentKey: it.Key, IntentKind: it.Kind, Currency: string(it.Amount.Currency()),
			LocalState: "SUCCEEDED " + it.ProviderID + " " + it.Amount.AmountString(), Action: ActionReported, Age: it.age}
		var match *payments.ChargeResult
		for i := range res.Charges {
			if res.Charges[i].ProviderID == it.ProviderID || match == nil {
				match = &res.Charges[i]
			}
		}
		switch {
		case len(res.Charges) > 1:
			ids := ""
			for _, ch := range res.Charges {
				ids += ch.ProviderID + "(" + string(ch.Status) + ") "
			}
			x.Kind, x.ProviderState = KindDuplicateAtProvider, ids
			x.Detail = fmt.Sprintf("%d charges at %s for one intent settled with %s: the customer may have paid more than once",
				len(res.Charges), it.Provider, it.ProviderID)
		case match == nil && res.Consistent:
			x.Kind, x.ProviderState = KindSucceededMissingAtProvider, "none (consistent lookup)"
			x.Detail = "payonce recorded a charge the provider does not have: the ledger counts money that never moved"
		case match == nil:
			continue // an eventually consistent "none" proves nothing
		case match.Status == payments.ChargeFailed:
			x.Kind, x.ProviderState = KindSucceededFailedAtProvider, string(match.Status)+" "+match.ProviderID
			x.Detail = "the provider reports the charge failed; the ledger counts it"
		case match.Amount.Currency() != "" && !match.Amount.Equal(it.Amount):
			x.Kind, x.ProviderState = KindAmountDiffers, string(match.Status)+" "+match.ProviderID+" "+match.Amount.AmountString()+" "+string(match.Amount.Currency())
			x.Detail = "the provider charged " + match.Amount.AmountString() + ", payonce recorded " + it.Amount.AmountString()
		case match.RefundsKnown:
			local, open, err := r.localRefunds(ctx, it)
			if err != nil {
				return err
			}
			if open > 0 || local.Equal(match.Refunded) || (local.IsZero() && match.Refunded.IsZero()) {
				continue // as recorded, or refunds still settling (they reset the check)
			}
			x.Kind, x.ProviderState = KindRefundTotalsDiffer, "refunded "+match.Refunded.AmountString()+" of "+match.ProviderID
			x.LocalState = "SUCCEEDED, refunded " + local.AmountString()
			x.Detail = "the provider refunded " + match.Refunded.AmountString() + ", payonce recorded " + local.AmountString() +
				" (a refund made outside payonce, or one payonce recorded that the provider lacks)"
		default:
			continue // as recorded
		}
		found = append(found, x)
	}
	return r.reportAll(ctx, rep, found)
}

// localRefunds sums the succeeded refunds payonce recorded for a charge and
// counts those still open.
func (r *Reconciler) localRefunds(ctx context.Context, it item) (money.Money, int, error) {
	var sum string
	var open int
	err := r.pool.QueryRow(ctx, `SELECT coalesce(sum(amount) FILTER (WHERE status = 'SUCCEEDED'), 0)::text,
		count(*) FILTER (WHERE status IN ('PENDING', 'UNKNOWN'))
		FROM payment_intents WHERE kind = 'REFUND' AND charge_key = $1 AND user_id = $2`, it.Key, it.Scope).Scan(&sum, &open)
	if err != nil {
		return money.Money{}, 0, err
	}
	m, err := money.Parse(sum, it.Amount.Currency())
	return m, open, err
}

// balanceDrift compares, per provider and currency, the money the provider
// reports it moved over the window with the ledger's entries for the
// intents created in it. Intents are created just before their provider
// object, so a charge within a moment of the window's edge can show once
// as drift of its amount; the next window agrees.
func (r *Reconciler) balanceDrift(ctx context.Context, rep *Report) error {
	if r.client == nil {
		return nil
	}
	r.mu.Lock()
	due := time.Since(r.lastDrift) >= r.cfg.DriftEvery
	if due {
		r.lastDrift = time.Now()
	}
	r.mu.Unlock()
	if !due {
		return nil
	}
	var to time.Time
	if err := r.pool.QueryRow(ctx, `SELECT now() - $1::interval`, r.cfg.DriftLag).Scan(&to); err != nil {
		return err
	}
	from := to.Add(-r.cfg.DriftWindow)
	var found []Item
	for _, name := range r.client.ProviderNames() {
		t, ok := r.client.Provider(name).(payments.Totaler)
		if !ok {
			continue
		}
		theirs, err := t.Totals(ctx, from, to)
		if err != nil {
			found = append(found, Item{Kind: KindProviderUnavailable, Provider: name, Action: ActionReported,
				ProviderState: "totals unavailable", Detail: err.Error()})
			continue
		}
		ours, err := r.ledgerTotals(ctx, name, from, to)
		if err != nil {
			return err
		}
		currencies := map[money.Currency]bool{}
		for c := range theirs {
			currencies[c] = true
		}
		for c := range ours {
			currencies[c] = true
		}
		for c := range currencies {
			a, b := ours[c], theirs[c]
			if sameMoney(a.Charged, b.Charged, c) && sameMoney(a.Refunded, b.Refunded, c) {
				continue
			}
			found = append(found, Item{Kind: KindBalanceDrift, Provider: name, Currency: string(c), Action: ActionReported,
				LocalState:    "ledger: charged " + amountOf(a.Charged, c) + ", refunded " + amountOf(a.Refunded, c),
				ProviderState: "charged " + amountOf(b.Charged, c) + ", refunded " + amountOf(b.Refunded, c),
				Detail:        "over " + from.UTC().Format(time.RFC3339) + " to " + to.UTC().Format(time.RFC3339)})
		}
	}
	return r.reportAll(ctx, rep, found)
}

// ledgerTotals sums the ledger's provider-cash postings of the intents
// created in [from, to), per currency: charges in, refunds out.
func (r *Reconciler) ledgerTotals(ctx context.Context, provider string, from, to time.Time) (map[money.Currency]payments.Totals, error) {
	rows, err := r.pool.Query(ctx, `SELECT p.currency,
		coalesce(sum(p.amount) FILTER (WHERE e.step = $4), 0)::text,
		coalesce(-sum(p.amount) FILTER (WHERE e.step = $5), 0)::text
		FROM ledger_postings p
		JOIN ledger_entries e ON e.id = p.entry_id
		JOIN ledger_accounts a ON a.id = p.account_id
		JOIN payment_intents i ON i.idempotency_key = e.key
		WHERE a.code = $1 AND i.provider = $6 AND i.created_at >= $2 AND i.created_at < $3
		GROUP BY p.currency`, ledger.ProviderCash(provider), from, to, ledger.StepCharge, ledger.StepRefund, provider)
	if err != nil {
		return nil, fmt.Errorf("reconcile: ledger totals: %w", err)
	}
	defer rows.Close()
	out := map[money.Currency]payments.Totals{}
	for rows.Next() {
		var code, charged, refunded string
		if err := rows.Scan(&code, &charged, &refunded); err != nil {
			return nil, err
		}
		cur, err := money.ParseCurrency(code)
		if err != nil {
			return nil, err
		}
		var t payments.Totals
		if t.Charged, err = money.Parse(charged, cur); err != nil {
			return nil, err
		}
		if t.Refunded, err = money.Parse(refunded, cur); err != nil {
			return nil, err
		}
		out[cur] = t
	}
	return out, rows.Err()
}

func sameMoney(a, b money.Money, c money.Currency) bool {
	return amountOf(a, c) == amountOf(b, c)
}

// amountOf prints m, a missing amount as zero of c.
func amountOf(m money.Money, c money.Currency) string {
	if m.Currency() == "" {
		z, _ := money.FromMinor(0, c)
		return z.AmountString()
	}
	return m.AmountString()
}
