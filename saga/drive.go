package saga

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/internal/crashpoint"
)

// Crash points (package internal/crashpoint) reached with the call's key
// around the commit that records a step's (or a compensation's) outcome.
const (
	pointBeforeCommit = "saga.before_commit"
	pointAfterCommit  = "saga.after_commit"
)

// querier is what both a pool and a transaction offer.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// driver moves one saga under its record's lease.
type driver struct {
	o     *Orchestrator
	lease idempotency.Lease
	def   *Definition
	s     *Saga
	// read is when s was read.
	read readClock
}

// drive runs the saga from where it stands to its outcome, or until a
// step leaves it pending. It returns the recording of the outcome, which
// it stored itself with the final transition.
func (o *Orchestrator) drive(ctx context.Context, lease idempotency.Lease, def *Definition, r ref, fp idempotency.Fingerprint, input []byte) (idempotency.Recording, error) {
	s, read, err := o.open(ctx, def, r, fp, input)
	if err != nil {
		return idempotency.Recording{}, err
	}
	d := &driver{o: o, lease: lease, def: def, s: s, read: read}
	for {
		if s.Status.Final() {
			// Its record was renewed after expiry: answer the same again.
			return d.finish(ctx, s.Status, nil)
		}
		if ctx.Err() != nil {
			return idempotency.Recording{}, context.Cause(ctx)
		}
		if s.Status == StatusCompensating {
			j := d.nextCompensation()
			if j < 0 {
				return d.finish(ctx, StatusRolledBack, nil)
			}
			review, err := d.compensate(ctx, j)
			if err != nil {
				return idempotency.Recording{}, err
			}
			if review != nil {
				return d.finish(ctx, StatusNeedsReview, review)
			}
			continue
		}
		i := d.nextStep()
		if i < 0 {
			return d.finish(ctx, StatusCompleted, nil)
		}
		if err := d.step(ctx, i); err != nil {
			return idempotency.Recording{}, err
		}
	}
}

// open records the saga when input is given and it is new, and reads it.
func (o *Orchestrator) open(ctx context.Context, def *Definition, r ref, fp idempotency.Fingerprint, input []byte) (*Saga, readClock, error) {
	if input != nil {
		names, kinds := make([]string, len(def.Steps)), make([]string, len(def.Steps))
		for i, s := range def.Steps {
			names[i], kinds[i] = s.Name, s.Kind.String()
		}
		if _, err := o.pool.Exec(ctx, createSQL, r.scope, r.key, r.record, def.Name, string(fp), input, names, kinds); err != nil {
			return nil, readClock{}, fmt.Errorf("saga: record saga: %w", err)
		}
	}
	s, read, err := load(ctx, o.pool, r.scope, r.key)
	if err != nil {
		return nil, read, err
	}
	if !idempotency.Fingerprint(s.fingerprint).Equal(fp) {
		// The key's record expired (or was pruned) and was claimed again
		// with other fields: the saga stands, and the claim is taken back.
		return nil, read, idempotency.Abandon(idempotency.ErrFingerprintMismatch)
	}
	if len(s.Steps) != len(def.Steps) {
		return nil, read, fmt.Errorf("%w: %q started with %d steps, %d registered", ErrDefinitionChanged, def.Name, len(s.Steps), len(def.Steps))
	}
	for i, st := range s.Steps {
		if st.Name != def.Steps[i].Name || st.Kind != def.Steps[i].Kind {
			return nil, read, fmt.Errorf("%w: %q step %d was %s %s, registered %s %s", ErrDefinitionChanged, def.Name, i,
				st.Kind, st.Name, def.Steps[i].Kind, def.Steps[i].Name)
		}
	}
	return s, read, nil
}

// load reads a saga and its steps in one round trip.
func load(ctx context.Context, db querier, scope, key string) (*Saga, readClock, error) {
	b := &pgx.Batch{}
	b.Queue(loadSagaSQL, scope, key)
	b.Queue(loadStepsSQL, scope, key)
	br := db.SendBatch(ctx, b)
	defer br.Close()
	s := &Saga{Scope: scope, Key: key}
	var read readClock
	var status string
	var input []byte
	var finished, wake *time.Time
	err := br.QueryRow().Scan(&s.Name, &s.fingerprint, &status, &s.CurrentStep, &input, &s.FailedStep, &s.Reason,
		&s.CreatedAt, &s.UpdatedAt, &finished, &wake, &read.db)
	read.local = time.Now()
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, read, ErrNotFound
	}
	if err != nil {
		return nil, read, fmt.Errorf("saga: read saga: %w", err)
	}
	s.Status, s.Input, s.FinishedAt, s.WakeAt = Status(status), input, deref(finished), deref(wake)
	rows, err := br.Query()
	if err != nil {
		return nil, read, fmt.Errorf("saga: read steps: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var st StepState
		var kind, status string
		var output []byte
		var started, finished, compensated *time.Time
		if err := rows.Scan(&st.Position, &st.Name, &kind, &status, &output, &st.Error, &st.Note, &st.Attempts, &st.CompensationAttempts,
			&started, &finished, &compensated, &st.UpdatedAt); err != nil {
			return nil, read, fmt.Errorf("saga: read steps: %w", err)
		}
		st.Kind, st.Status, st.Output = kindOf(kind), StepStatus(status), output
		st.StartedAt, st.FinishedAt, st.CompensatedAt = deref(started), deref(finished), deref(compensated)
		s.Steps = append(s.Steps, st)
	}
	if err := rows.Err(); err != nil {
		return nil, read, fmt.Errorf("saga: read steps: %w", err)
	}
	return s, read, nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// nextStep is the first step not done, or -1.
func (d *driver) nextStep() int {
	for i, st := range d.s.Steps {
		if st.Status != StepDone {
			return i
		}
	}
	return -1
}

// nextCompensation is the last step done (or being compensated) that has
// a compensation, or -1.
func (d *driver) nextCompensation() int {
	for j := len(d.s.Steps) - 1; j >= 0; j-- {
		st := d.s.Steps[j].Status
		if (st == StepDone || st == StepCompensating) && d.def.Steps[j].Compensate != nil {
			return j
		}
	}
	return -1
}

// change is one transition of a step and its saga (see transitionSQL).
type change struct {
	step   int
	status StepStatus
	// output, when set, is stored; err is the attempt's error ("" after
	// a success).
	output               []byte
	err                  string
	attempt, compAttempt bool
	saga                 Status
	// failedStep and reason, when set, are stored on the saga.
	failedStep, reason string
	// note, when set, is stored on the step ([NothingToUndo]).
	note string
	// waiting reschedules the saga wait from now ([Wait]).
	waiting bool
	wait    time.Duration
}

// apply commits c in tx (a step's transaction, or the final one), fenced
// by the lease, and mirrors it in d.s.
func (d *driver) apply(ctx context.Context, tx pgx.Tx, c change) error {
	if err := d.o.store.FenceTx(ctx, tx, d.lease); err != nil {
		return err
	}
	var wake any
	if c.waiting {
		wake = c.wait.Seconds()
	}
	var at time.Time
	err := tx.QueryRow(ctx, transitionSQL, d.s.Scope, d.s.Key, c.step, string(c.status),
		nullable(c.output), nullable(c.err), count(c.attempt), count(c.compAttempt), string(c.saga),
		nullable(c.failedStep), nullable(c.reason), nullable(c.note), wake).Scan(&at)
	if err != nil {
		return fmt.Errorf("saga: record step %s: %w", d.s.Steps[c.step].Name, err)
	}
	st := &d.s.Steps[c.step]
	st.Status, st.Error = c.status, c.err
	if c.output != nil {
		st.Output = c.output
	}
	switch c.status {
	case StepDone, StepFailed:
		st.FinishedAt = at
	case StepCompensated:
		st.CompensatedAt = at
	}
	if c.note != "" {
		st.Note = c.note
	}
	d.s.WakeAt = time.Time{}
	if c.waiting {
		d.s.WakeAt = at.Add(c.wait)
	}
	st.Attempts += count(c.attempt)
	st.CompensationAttempts += count(c.compAttempt)
	d.s.Status, d.s.CurrentStep = c.saga, c.step
	if c.failedStep != "" {
		d.s.FailedStep = c.failedStep
	}
	if c.reason != "" {
		d.s.Reason = c.reason
	}
	return nil
}

// applyNow commits c in a transaction of its own (apply).
func (d *driver) applyNow(ctx context.Context, c change) error {
	return pgx.BeginTxFunc(ctx, d.o.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		return d.apply(ctx, tx, c)
	})
}

func nullable[T string | []byte](v T) any {
	if len(v) == 0 {
		return nil
	}
	return v
}

func count(b bool) int {
	if b {
		return 1
	}
	return 0
}

// call is what step i's action (or compensation) gets.
func (d *driver) call(i int, compensation bool) *Call {
	st := d.s.Steps[i]
	c := &Call{Saga: d.def.Name, Scope: d.s.Scope, SagaKey: d.s.Key, Step: st.Name, Key: SubKey(d.s.Key, st.Name),
		Attempt: st.Attempts + 1, Input: d.s.Input, Outputs: map[string]json.RawMessage{}}
	if compensation {
		c.Key, c.Attempt = CompensationKey(d.s.Key, st.Name), st.CompensationAttempts+1
	}
	c.done, c.read = map[string]time.Time{}, d.read
	for _, x := range d.s.Steps {
		if x.Output != nil {
			c.Outputs[x.Name] = x.Output
		}
		switch x.Status {
		case StepDone, StepCompensating, StepCompensated, StepNeedsReview:
			c.done[x.Name] = x.FinishedAt
		}
	}
	return c
}

// finishCtx outlives the caller's cancellation: a call that may have had
// its effect must be recorded.
func (o *Orchestrator) finishCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), o.cfg.FinishTimeout)
}

// hit reaches a commit point: the crash point of payonce's own tests, then
// the configured hook.
func (d *driver) hit(point, key string) {
	crashpoint.Hit(point, key)
	h := d.o.cfg.Hooks
	switch {
	case h == nil:
	case point == pointBeforeCommit && h.BeforeCommit != nil:
		h.BeforeCommit(key)
	case point == pointAfterCommit && h.AfterCommit != nil:
		h.AfterCommit(key)
	}
}

// invoke calls fn as step i's action (or compensation) and, when it
// succeeds, commits done with its output: a Local step's in fn's own
// transaction, a Remote step's after the call, which started is committed
// before. fn may complete done (a note). It returns fn's error (then only
// a Remote call's start is recorded) or the error of recording.
func (d *driver) invoke(ctx context.Context, i int, compensation bool, fn func(context.Context, *Call) ([]byte, error), started change, done *change) (callErr, err error) {
	c := d.call(i, compensation)
	if d.def.Steps[i].Kind == Remote {
		if err := d.applyNow(ctx, started); err != nil {
			return nil, err
		}
		out, cerr := fn(ctx, c)
		if cerr != nil {
			return cerr, nil
		}
		done.output = out
		rctx, cancel := d.o.finishCtx(ctx)
		defer cancel()
		d.hit(pointBeforeCommit, c.Key)
		if err := d.applyNow(rctx, *done); err != nil {
			return nil, err
		}
		d.hit(pointAfterCommit, c.Key)
		return nil, nil
	}
	tx, err := d.o.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("saga: begin: %w", err)
	}
	defer func() {
		rctx, cancel := d.o.finishCtx(ctx)
		_ = tx.Rollback(rctx) // a no-op after the commit
		cancel()
	}()
	c.Tx = tx
	out, cerr := fn(ctx, c)
	if cerr != nil {
		return cerr, nil
	}
	done.output = out
	if err := d.apply(ctx, tx, *done); err != nil {
		return nil, err
	}
	d.hit(pointBeforeCommit, c.Key)
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("saga: commit step %s: %w", c.Step, err)
	}
	d.hit(pointAfterCommit, c.Key)
	return nil, nil
}

// step runs step i once. A permanent failure turns the saga to
// compensating (nil error: the drive goes on); an unknown or transient
// one answers a *PendingError.
func (d *driver) step(ctx context.Context, i int) error {
	spec, prior := d.def.Steps[i], d.s.Steps[i].Status
	local := spec.Kind == Local
	done := change{step: i, status: StepDone, attempt: local, saga: StatusRunning}
	aerr, err := d.invoke(ctx, i, false, func(ctx context.Context, c *Call) ([]byte, error) {
		out, err := spec.Action(ctx, c)
		var none *nothingToUndoError
		if errors.As(err, &none) {
			return nil, Fail(fmt.Errorf("saga: the action of step %s returned NothingToUndo, which only a compensation may: %w", spec.Name, err))
		}
		if err != nil {
			return nil, err
		}
		b, err := encodeJSON(out)
		if err != nil && !local {
			// The call had its effect: run it again rather than forget it.
			err = Unknown(err)
		}
		if err != nil {
			return nil, fmt.Errorf("saga: output of step %s: %w", spec.Name, err)
		}
		return b, nil
	}, change{step: i, status: StepRunning, attempt: true, saga: StatusRunning}, &done)
	if err != nil {
		return err
	}
	if aerr == nil {
		d.o.metrics.step(ctx, d.def.Name, spec.Name, false, 0)
		return nil
	}
	class := d.o.cfg.Classify(aerr)
	d.o.metrics.step(ctx, d.def.Name, spec.Name, false, class)
	msg := aerr.Error()
	fail := change{step: i, err: msg, attempt: local, saga: StatusRunning}
	switch {
	case class == ClassPermanent:
		fail.status, fail.saga, fail.failedStep, fail.reason = StepFailed, StatusCompensating, spec.Name, msg
	case class == ClassUnknown || prior == StepUnknown || prior == StepRunning:
		// A transient failure (or a wait) after an unknown attempt leaves
		// it unknown.
		fail.status = StepUnknown
	default:
		fail.status = StepPending
	}
	if class == ClassWaiting {
		fail.waiting, fail.wait = true, waitOf(aerr)
	}
	rctx, cancel := d.o.finishCtx(ctx)
	defer cancel()
	key := SubKey(d.s.Key, spec.Name)
	d.hit(pointBeforeCommit, key)
	if err := d.applyNow(rctx, fail); err != nil {
		return err
	}
	d.hit(pointAfterCommit, key)
	if class == ClassPermanent {
		return nil
	}
	return &PendingError{Step: spec.Name, Unknown: fail.status == StepUnknown, RetryAfter: fail.wait, Err: aerr}
}

// compensate runs step j's compensation until it succeeds (or finds
// nothing to undo), up to Config.CompensationAttempts times in this run;
// a wait ([Wait]) stops the run at once and reschedules the saga. A
// permanent failure returns the step's NEEDS_REVIEW transition, for the
// final transaction.
func (d *driver) compensate(ctx context.Context, j int) (*change, error) {
	spec := d.def.Steps[j]
	local := spec.Kind == Local
	wait := d.o.cfg.CompensationBackoff
	for try := 1; ; try++ {
		done := change{step: j, status: StepCompensated, compAttempt: local, saga: StatusCompensating}
		cerr, err := d.invoke(ctx, j, true, func(ctx context.Context, c *Call) ([]byte, error) {
			err := spec.Compensate(ctx, c)
			var none *nothingToUndoError
			if errors.As(err, &none) {
				done.note = none.reason
				return nil, nil
			}
			return nil, err
		}, change{step: j, status: StepCompensating, compAttempt: true, saga: StatusCompensating}, &done)
		if err != nil {
			return nil, err
		}
		if cerr == nil {
			d.o.metrics.step(ctx, d.def.Name, spec.Name, true, 0)
			return nil, nil
		}
		class := d.o.cfg.Classify(cerr)
		d.o.metrics.step(ctx, d.def.Name, spec.Name, true, class)
		msg := cerr.Error()
		if class == ClassPermanent {
			// The saga stays COMPENSATING in this transition: the final
			// one marks it NEEDS_REVIEW.
			return &change{step: j, status: StepNeedsReview, err: msg, compAttempt: local, saga: StatusCompensating,
				reason: fmt.Sprintf("compensation of step %s failed: %s (rolling back after step %s failed: %s)",
					spec.Name, msg, d.s.FailedStep, d.s.Reason)}, nil
		}
		again := change{step: j, status: StepCompensating, err: msg, compAttempt: local, saga: StatusCompensating}
		if class == ClassWaiting {
			again.waiting, again.wait = true, waitOf(cerr)
		}
		rctx, cancel := d.o.finishCtx(ctx)
		err = d.applyNow(rctx, again)
		cancel()
		if err != nil {
			return nil, err
		}
		if class == ClassWaiting {
			// Not retried in this run: nothing changes until what it waits
			// for happens.
			return nil, &PendingError{Step: spec.Name, Compensating: true, RetryAfter: again.wait, Err: cerr}
		}
		if try >= d.o.cfg.CompensationAttempts {
			return nil, &PendingError{Step: spec.Name, Compensating: true, Unknown: class == ClassUnknown, Err: cerr}
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// finish gives the saga its final status (after last, the transition
// that decided it, if any) and completes its idempotency record with the
// answer, built from the rows as committed, in one transaction.
func (d *driver) finish(ctx context.Context, status Status, last *change) (idempotency.Recording, error) {
	ctx, cancel := d.o.finishCtx(ctx)
	defer cancel()
	tx, err := d.o.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return idempotency.Recording{}, fmt.Errorf("saga: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if last != nil {
		if err := d.apply(ctx, tx, *last); err != nil {
			return idempotency.Recording{}, err
		}
	}
	if _, err := tx.Exec(ctx, finishSQL, d.s.Scope, d.s.Key, string(status)); err != nil {
		return idempotency.Recording{}, fmt.Errorf("saga: finish: %w", err)
	}
	s, _, err := load(ctx, tx, d.s.Scope, d.s.Key)
	if err != nil {
		return idempotency.Recording{}, err
	}
	body, err := json.Marshal(s.result())
	if err != nil {
		return idempotency.Recording{}, fmt.Errorf("saga: encode answer: %w", err)
	}
	rec := idempotency.Recording{Status: idempotency.StatusCompleted,
		Response: idempotency.Response{Code: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}}
	if status != StatusCompleted {
		rec.Status, rec.Response.Code = idempotency.StatusFailed, http.StatusUnprocessableEntity
	}
	if err := d.o.store.CompleteTx(ctx, tx, d.lease, idempotency.Completion{Status: rec.Status, Response: rec.Response,
		Retention: d.o.cfg.Retention}); err != nil {
		return idempotency.Recording{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return idempotency.Recording{}, fmt.Errorf("saga: commit outcome: %w", err)
	}
	return rec, nil
}
