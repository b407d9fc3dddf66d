package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
)

// Executor is an [idempotency.Executor] over a [Store] with, in addition,
// the one-transaction mode [Executor.DoTx].
type Executor struct {
	*idempotency.Executor
	store *Store
}

// NewExecutor returns an Executor over store. A nil cfg means defaults; it
// returns an *idempotency.InvalidError naming a bad Config field.
func NewExecutor(store *Store, cfg *idempotency.Config) (*Executor, error) {
	e, err := idempotency.New(store, cfg)
	if err != nil {
		return nil, err
	}
	return &Executor{Executor: e, store: store}, nil
}

// TxAction is the work of the one-transaction mode: its writes go through
// tx and commit together with the outcome, or not at all.
type TxAction func(ctx context.Context, tx pgx.Tx) (idempotency.Response, error)

// DoTx runs action in one transaction with the claim and the outcome: for
// actions whose effects live in the same database, so that the effects and
// the idempotency record commit together, or neither does.
//
// A new key's record is invisible to other transactions until the commit:
// a concurrent duplicate waits on its row lock and then replays the
// outcome, instead of answering "in progress". A crash before the commit
// leaves nothing, and a retry runs as new. No heartbeat is needed, since
// the row lock, not the lease, keeps duplicates out.
//
// A nil error from action commits its writes with the outcome COMPLETED. A
// [idempotency.Permanent] error rolls back action's writes (to a savepoint)
// and commits the outcome FAILED. Any other error, or a panic, rolls back
// everything, the claim included.
//
// Errors are those of [idempotency.Executor.Do].
func (e *Executor) DoTx(ctx context.Context, req idempotency.Request, action TxAction) (res idempotency.Result, err error) {
	if err := req.Validate(); err != nil {
		return idempotency.Result{}, err
	}
	cfg := e.Config()
	// READ COMMITTED whatever the database's default: a claim that waited
	// on a concurrent insert must see that row when it looks again.
	tx, err := e.store.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return idempotency.Result{}, translate("begin", err)
	}
	committed := false
	defer func() {
		if !committed {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.FinishTimeout)
			_ = tx.Rollback(rctx)
			cancel()
		}
	}()

	c, err := claim(ctx, tx, idempotency.ClaimParams{
		Scope: req.Scope, Key: req.Key, Fingerprint: req.Fingerprint,
		LockTimeout: cfg.LockTimeout, Retention: cfg.Retention, Expired: cfg.Expired,
	})
	if err != nil {
		return idempotency.Result{}, err
	}
	if c.State != idempotency.ClaimAcquired && c.State != idempotency.ClaimReclaimed {
		return idempotency.Settle(c)
	}

	sp, err := tx.Begin(ctx) // a savepoint: a permanent failure undoes only the action
	if err != nil {
		return idempotency.Result{}, translate("savepoint", err)
	}
	resp, aerr := action(ctx, sp)
	res = idempotency.Result{Lease: c.Lease, Reclaimed: c.State == idempotency.ClaimReclaimed}
	var perm *idempotency.PermanentError
	switch {
	case aerr == nil:
		if err := sp.Commit(ctx); err != nil {
			return idempotency.Result{}, translate("release savepoint", err)
		}
		res.Status, res.Response = idempotency.StatusCompleted, resp
	case errors.As(aerr, &perm):
		if err := sp.Rollback(ctx); err != nil {
			return idempotency.Result{}, translate("rollback to savepoint", err)
		}
		res.Status, res.Response = idempotency.StatusFailed, perm.Response
	default:
		return idempotency.Result{}, aerr
	}
	if err := complete(ctx, tx, c.Lease, idempotency.Completion{Status: res.Status, Response: res.Response, Retention: cfg.Retention}); err != nil {
		if errors.Is(err, idempotency.ErrLeaseLost) {
			return idempotency.Result{}, fmt.Errorf("idempotency: outcome not recorded: %w", err)
		}
		return idempotency.Result{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return idempotency.Result{}, translate("commit", err)
	}
	committed = true
	if res.Status == idempotency.StatusFailed {
		return res, &idempotency.FailedError{Response: res.Response, Err: aerr}
	}
	return res, nil
}
