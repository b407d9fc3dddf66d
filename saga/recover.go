package saga

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// RecoverResult counts what one [Orchestrator.Recover] found and did.
type RecoverResult struct {
	// Stuck is how many unfinished sagas it found past their lease (or
	// without progress for Config.StuckAfter).
	Stuck int
	// Woken is how many sagas it found whose wait ([Wait]) had ended; it
	// drove them like the stuck ones, but they are not counted stuck.
	Woken int
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
	// woken: it waited ([Wait]) and its wake time has passed.
	woken bool
}

// Recover finds unfinished sagas whose driver is gone (their idempotency
// record's lease ended: a crash, or a step whose outcome is unknown) or
// that made no progress for Config.StuckAfter, and those whose wait
// ([Wait]) has ended (a saga that waits is left alone until then), and
// drives each forward
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
	stuck, err := o.stuck(ctx)
	if err != nil {
		return res, fmt.Errorf("saga: list stuck sagas: %w", err)
	}
	var errs []error
	for _, x := range stuck {
		if ctx.Err() != nil {
			break
		}
		if x.woken {
			res.Woken++
		} else {
			res.Stuck++
			o.metrics.found(ctx, x.definition)
		}
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

// stuck lists at most Config.RecoverBatch unfinished sagas whose driver is
// gone or that made no progress for Config.StuckAfter, oldest progress
// first: the open sagas a page at a time, each page's record leases read
// through the store. Open sagas are the ones in flight, few beside the
// table; a saga that progresses during the listing may be missed, and is
// then found by the next run.
func (o *Orchestrator) stuck(ctx context.Context) ([]stuckSaga, error) {
	page := o.recoverPage
	var (
		stuck   []stuckSaga
		after   any = "-infinity" // then the last row's updated_at
		lastAt  time.Time
		lastKey [2]string
	)
	for len(stuck) < o.cfg.RecoverBatch {
		rows, err := o.pool.Query(ctx, openSagasSQL, o.cfg.StuckAfter.Seconds(), page, after, lastKey[0], lastKey[1])
		if err != nil {
			return nil, err
		}
		var (
			open  []stuckSaga
			stale []bool
			refs  []idempotency.RecordRef
		)
		for rows.Next() {
			var x stuckSaga
			var old bool
			if err := rows.Scan(&x.scope, &x.key, &x.record, &x.definition, &x.fingerprint, &lastAt, &old, &x.woken); err != nil {
				rows.Close()
				return nil, err
			}
			after, lastKey = lastAt, [2]string{x.scope, x.key}
			open, stale = append(open, x), append(stale, old)
			refs = append(refs, idempotency.RecordRef{Scope: x.scope, Key: x.record})
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		leases, err := o.store.Leases(ctx, refs)
		if err != nil {
			return nil, err
		}
		for i, x := range open {
			l, found := leases[refs[i]]
			// Stuck: no progress for a while (reported, then left to a
			// live holder by the claim), its record gone, or its
			// record's lease ended with nobody retrying.
			if stale[i] || !found || (l.Status == idempotency.StatusProcessing && !l.Live()) {
				stuck = append(stuck, x)
				if len(stuck) == o.cfg.RecoverBatch {
					break
				}
			}
		}
		if len(open) < page {
			break
		}
	}
	return stuck, nil
}
