package saga

import (
	"context"
	"errors"
	"fmt"

	"github.com/payonce/payonce/idempotency"
)

// RecoverResult counts what one [Orchestrator.Recover] found and did.
type RecoverResult struct {
	// Stuck is how many unfinished sagas it found past their lease (or
	// without progress for Config.StuckAfter).
	Stuck int
	// Completed, RolledBack and NeedsReview: sagas it drove to that
	// outcome.
	Completed, RolledBack, NeedsReview int
	// Pending: sagas it drove that stopped again before their outcome (a
	// step's outcome still unknown, a transient failure).
	Pending int
	// Busy: sagas held by a live lease (a client or another recoverer is
	// driving them).
	Busy int
	// Unregistered: sagas whose definition is not registered here.
	Unregistered int
	// Failed: sagas whose drive ended with another error (returned).
	Failed int
}

type stuckSaga struct {
	ref
	definition, fingerprint string
}

// Recover finds unfinished sagas whose driver is gone (their idempotency
// record's lease ended: a crash, or a step whose outcome is unknown) or
// that made no progress for Config.StuckAfter, and drives each forward
// (re-running its pending or unknown step with the same sub-key) or back
// (compensating), at most Config.RecoverBatch of them. It claims each
// saga's key exactly as a client's retry does: a saga is never driven by
// two recoverers, or a recoverer and a client, at once. Only registered
// definitions are driven.
//
// It returns what it did, and the errors of the sagas it could not drive
// (joined); a database error when listing them stops it.
func (o *Orchestrator) Recover(ctx context.Context) (RecoverResult, error) {
	var res RecoverResult
	rows, err := o.pool.Query(ctx, stuckSQL, o.cfg.StuckAfter.Seconds(), o.cfg.RecoverBatch)
	if err != nil {
		return res, fmt.Errorf("saga: list stuck sagas: %w", err)
	}
	var stuck []stuckSaga
	for rows.Next() {
		var x stuckSaga
		if err := rows.Scan(&x.scope, &x.key, &x.record, &x.definition, &x.fingerprint); err != nil {
			rows.Close()
			return res, fmt.Errorf("saga: list stuck sagas: %w", err)
		}
		stuck = append(stuck, x)
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("saga: list stuck sagas: %w", err)
	}
	var errs []error
	for _, x := range stuck {
		if ctx.Err() != nil {
			break
		}
		res.Stuck++
		o.metrics.found(ctx, x.definition)
		def := o.definition(x.definition)
		if def == nil {
			res.Unregistered++
			o.cfg.Logger.Warn("saga: stuck saga of an unregistered definition", "saga", x.definition,
				"key", idempotency.ShortHash(x.record))
			continue
		}
		_, err := o.run(ctx, def, x.ref, idempotency.Fingerprint(x.fingerprint), nil)
		switch {
		case err == nil:
			res.Completed++
		case errors.Is(err, ErrRolledBack):
			res.RolledBack++
		case errors.Is(err, ErrNeedsReview):
			res.NeedsReview++
		case errors.Is(err, ErrPending):
			res.Pending++
		case errors.Is(err, idempotency.ErrInProgress):
			res.Busy++
		default:
			res.Failed++
			errs = append(errs, fmt.Errorf("saga %s (key %s): %w", x.definition, idempotency.ShortHash(x.record), err))
		}
	}
	return res, errors.Join(errs...)
}
