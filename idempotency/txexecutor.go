package idempotency

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// TxExecutor is an [Executor] over a [TxStore] with, in addition, the two
// ways of running an action whose writes live in the store's database:
// [TxExecutor.DoTx] (claim, action and outcome in one transaction) and
// [TxExecutor.WithTx] (the claim committed at once, the action and the
// outcome in one transaction).
type TxExecutor[TTx Tx] struct {
	*Executor
	store TxStore[TTx]
}

// NewTx returns a TxExecutor over store. A nil cfg means defaults; it
// returns an *InvalidError naming a bad Config field.
func NewTx[TTx Tx](store TxStore[TTx], cfg *Config) (*TxExecutor[TTx], error) {
	e, err := New(store, cfg)
	if err != nil {
		return nil, err
	}
	return &TxExecutor[TTx]{Executor: e, store: store}, nil
}

// TxStore returns the store the executor runs on.
func (e *TxExecutor[TTx]) TxStore() TxStore[TTx] { return e.store }

// TxAction is the work of the one-transaction mode: its writes go through
// tx and commit together with the outcome, or not at all.
type TxAction[TTx Tx] func(ctx context.Context, tx TTx) (Response, error)

// DoTx runs action in one transaction with the claim and the outcome
// ([TxStore.RunTx]): for actions whose effects live in the store's
// database, so that the effects and the idempotency record commit
// together, or neither does.
//
// A new key's record is invisible to other transactions until the commit:
// a concurrent duplicate waits for it and then replays the outcome,
// instead of answering "in progress". A crash before the commit leaves
// nothing, and a retry runs as new. No heartbeat is needed, since the
// transaction, not the lease, keeps duplicates out.
//
// A nil error from action commits its writes with the outcome COMPLETED. A
// [Permanent] error rolls back the transaction, then stores the outcome
// FAILED on its own. Any other error, or a panic, rolls back everything,
// the claim included.
//
// Errors are those of [Executor.Do].
func (e *TxExecutor[TTx]) DoTx(ctx context.Context, req Request, action TxAction[TTx]) (res Result, err error) {
	if err := req.Validate(); err != nil {
		return Result{}, err
	}
	ctx, span := e.tracer.Start(ctx, "idempotency.DoTx", trace.WithAttributes(KeyAttributes(req.Scope, req.Key)...))
	defer func() {
		span.SetAttributes(attribute.Bool(AttrReplayed, res.Replayed), attribute.String(AttrStatus, string(res.Status)))
		EndSpan(span, err)
	}()
	cfg := e.cfg
	var (
		resp Response
		aerr error
		ran  bool
	)
	c, err := e.store.RunTx(ctx, ClaimParams{
		Scope: req.Scope, Key: req.Key, Fingerprint: req.Fingerprint,
		LockTimeout: cfg.LockTimeout, Retention: cfg.Retention, Expired: cfg.Expired,
		RefusalHorizon: cfg.RefusalHorizon, RefuseForeign: req.RefuseForeign,
	}, func(ctx context.Context, tx TTx, _ Lease) (Completion, error) {
		ran = true
		started := cfg.Clock()
		resp, aerr = action(ctx, tx)
		took := cfg.Clock().Sub(started)
		var perm *PermanentError
		switch {
		case aerr == nil:
			e.metrics.Action(ctx, took, "completed")
		case errors.As(aerr, &perm):
			e.metrics.Action(ctx, took, "failed")
		default:
			e.metrics.Action(ctx, took, "transient")
		}
		if aerr != nil {
			return Completion{}, aerr
		}
		return Completion{Status: StatusCompleted, Response: resp, Retention: cfg.Retention}, nil
	})
	if c.State != 0 {
		e.metrics.Claim(ctx, req.Scope, c.State)
	}
	var perm *PermanentError
	switch {
	case ran && aerr != nil && errors.As(aerr, &perm):
		// The action's writes and the claim were rolled back; record the
		// failure on its own. A duplicate that claimed the key in between
		// is a legitimate first execution (nothing of this one committed):
		// its outcome stands and is what this call replays.
		return e.Executor.Do(ctx, req, func(context.Context) (Response, error) {
			return Response{}, aerr
		})
	case ran && aerr != nil:
		return Result{}, aerr
	case err != nil:
		return Result{}, err
	case !ran:
		return Settle(c)
	}
	return Result{Status: StatusCompleted, Response: resp, Lease: c.Lease,
		Reclaimed: c.State == ClaimReclaimed}, nil
}

type txKey struct{}

// TxFromContext returns the transaction of an action run by the Doer of
// [TxExecutor.WithTx]: the action's writes through it commit together
// with the outcome.
func TxFromContext[TTx Tx](ctx context.Context) (TTx, bool) {
	tx, ok := ctx.Value(txKey{}).(TTx)
	return tx, ok
}

// WithTx returns a Doer that claims like Do (the claim commits at once, so
// duplicates see "in progress" and a crashed holder's lease runs out), and
// runs the action in a transaction, available from [TxFromContext], in
// which the outcome is recorded ([TxStore.CompleteTx]) and committed with
// the action's writes. A crash before that commit leaves no writes and an
// orphaned claim that a retry takes over after the lock timeout.
//
// A [Permanent] error rolls the action's writes back and stores the
// failure; any other error rolls them back and releases the key.
func (e *TxExecutor[TTx]) WithTx() Doer { return txDoer[TTx]{e} }

type txDoer[TTx Tx] struct{ e *TxExecutor[TTx] }

func (d txDoer[TTx]) Do(ctx context.Context, req Request, action Action) (Result, error) {
	return d.e.Do(ctx, req, func(ctx context.Context) (Response, error) {
		lease, ok := LeaseFromContext(ctx)
		if !ok {
			return Response{}, errors.New("idempotency: no lease in the action's context")
		}
		tx, err := d.e.store.Begin(ctx)
		if err != nil {
			return Response{}, err
		}
		committed := false
		defer func() { // the action's writes, after an error or a panic
			if !committed {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.e.cfg.FinishTimeout)
				_ = tx.Rollback(rctx)
				cancel()
			}
		}()
		resp, aerr := action(context.WithValue(ctx, txKey{}, tx))
		if aerr != nil {
			// The executor stores a permanent failure or releases the key.
			return resp, aerr
		}
		if err := d.e.store.CompleteTx(ctx, tx, lease, Completion{
			Status: StatusCompleted, Response: resp, Retention: d.e.cfg.Retention}); err != nil {
			return Response{}, err
		}
		committed = true // a failed commit ends the transaction too
		if err := tx.Commit(ctx); err != nil {
			return Response{}, err
		}
		return resp, Recorded(StatusCompleted, resp)
	})
}
