package pgstore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
)

// What operators run on the store (payonce stuck, release, prune): reading
// the records stuck PROCESSING, releasing one by hand under its fencing
// token with an audit row in the same transaction, and counting what a
// prune may delete.

// stuckSQL lists PROCESSING records whose lease ended at least $1 seconds
// ago, through the orphan-lock partial index, longest stuck first. The
// last column counts every match, not only the $2 returned.
const stuckSQL = `SELECT idempotency_key, user_id, lock_version, created_at, locked_until, now(), count(*) OVER ()
  FROM idempotency_store
 WHERE status = 'PROCESSING'
   AND (locked_until IS NULL OR locked_until <= now() - make_interval(secs => $1))
 ORDER BY locked_until NULLS FIRST, created_at
 LIMIT $2`

// leaseSQL reads a record's lease with the database clock beside it.
const leaseSQL = `SELECT status, lock_version, created_at, locked_until, now()
  FROM idempotency_store
 WHERE idempotency_key = $1 AND user_id = $2`

// leasesSQL reads the leases of the records named by the pairs of $1
// (scopes) and $2 (keys), through the primary key.
const leasesSQL = `SELECT r.user_id, r.idempotency_key, r.status, r.lock_version, r.created_at, r.locked_until, now()
  FROM unnest($1::text[], $2::text[]) AS t(scope, key)
  JOIN idempotency_store r ON r.idempotency_key = t.key AND r.user_id = t.scope`

// releaseStuckSQL is releaseSQL fenced by the lock version the operator
// was shown ($3): it matches nothing once the holder completed, failed or
// abandoned the record or a retry reclaimed it. Unless forced ($4) it also
// matches nothing while the lease is live, in case the holder extended it
// (heartbeat) since it was shown. LEAST keeps an ended lease's end, so
// that how long the record has waited still shows.
const releaseStuckSQL = `UPDATE idempotency_store
   SET locked_until = LEAST(locked_until, now())
 WHERE idempotency_key = $1 AND user_id = $2
   AND status NOT IN ('COMPLETED', 'FAILED') AND lock_version = $3
   AND ($4 OR locked_until IS NULL OR locked_until <= now())
RETURNING locked_until`

// countExpiredSQL counts what a prune may take, through the expiry and
// tombstone partial indexes: expired records, and tombstones past their
// refusal horizon.
const countExpiredSQL = `SELECT (SELECT count(*) FROM idempotency_store WHERE status <> 'PROCESSING' AND refuse_until IS NULL AND expires_at <= now())
     + (SELECT count(*) FROM idempotency_store WHERE status <> 'PROCESSING' AND refuse_until <= now())`

// LeaseState is what the store tells of a record's lease, with the
// database clock beside it.
type LeaseState = idempotency.LeaseState

// StuckParams selects the records [Store.Stuck] lists.
type StuckParams struct {
	// OlderThan selects the records whose lease ended at least this long
	// ago on the database clock; 0 selects every ended lease. It must not
	// be negative.
	OlderThan time.Duration
	// Limit bounds the records returned; it must be positive.
	Limit int
}

// StuckResult is what [Store.Stuck] found.
type StuckResult struct {
	// Records are the stuck records, longest stuck first: those without a
	// lease end, then by lease end, then by age.
	Records []LeaseState
	// Total counts every record that matched, not only those returned.
	Total int64
	// DatabaseNow is the database's clock at the listing.
	DatabaseNow time.Time
}

// Stuck lists the records stuck PROCESSING: their holder's lease ended
// p.OlderThan ago or more and no retry has reclaimed them since, through
// the orphan-lock index, in one statement (two when none matched, for the
// database clock). A stuck record is not an error in itself: the next
// retry of its key reclaims it.
//
// Errors: *idempotency.InvalidError naming a bad parameter; *Error from
// the database.
func (s *Store) Stuck(ctx context.Context, p StuckParams) (StuckResult, error) {
	switch {
	case p.OlderThan < 0:
		return StuckResult{}, &idempotency.InvalidError{Field: "OlderThan", Reason: "must not be negative, got " + p.OlderThan.String()}
	case p.Limit <= 0:
		return StuckResult{}, &idempotency.InvalidError{Field: "Limit", Reason: "must be positive, got " + strconv.Itoa(p.Limit)}
	}
	res := StuckResult{Records: []LeaseState{}}
	rows, err := s.pool.Query(ctx, stuckSQL, p.OlderThan.Seconds(), p.Limit)
	if err != nil {
		return res, translate("stuck", err)
	}
	defer rows.Close()
	for rows.Next() {
		r := LeaseState{Status: idempotency.StatusProcessing}
		if err := rows.Scan(&r.Key, &r.Scope, &r.LockVersion, &r.CreatedAt, &r.LockedUntil, &r.DatabaseNow, &res.Total); err != nil {
			return res, translate("stuck", err)
		}
		res.DatabaseNow = r.DatabaseNow
		res.Records = append(res.Records, r)
	}
	if err := rows.Err(); err != nil {
		return res, translate("stuck", err)
	}
	if len(res.Records) == 0 {
		if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&res.DatabaseNow); err != nil {
			return res, translate("stuck", err)
		}
	}
	return res, nil
}

// Lease reads the lease of the record (scope, key), with the database
// clock beside it, whatever the record's status; its response is not
// read. Errors: idempotency.ErrNotFound; *Error from the database.
func (s *Store) Lease(ctx context.Context, scope, key string) (LeaseState, error) {
	l := LeaseState{Scope: scope, Key: key}
	var status string
	err := s.pool.QueryRow(ctx, leaseSQL, key, scope).Scan(&status, &l.LockVersion, &l.CreatedAt, &l.LockedUntil, &l.DatabaseNow)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, idempotency.ErrNotFound
	}
	if err != nil {
		return l, translate("lease", err)
	}
	l.Status = idempotency.Status(status)
	return l, nil
}

// RecordRef names one record.
type RecordRef = idempotency.RecordRef

// Leases reads the leases of the named records in one statement: what a
// job driving its own rows (a saga's recovery) needs to tell a live
// holder from a crashed one. A record that does not exist is absent from
// the map.
func (s *Store) Leases(ctx context.Context, refs []RecordRef) (map[RecordRef]LeaseState, error) {
	out := make(map[RecordRef]LeaseState, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	scopes, keys := make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		scopes[i], keys[i] = r.Scope, r.Key
	}
	rows, err := s.pool.Query(ctx, leasesSQL, scopes, keys)
	if err != nil {
		return nil, translate("leases", err)
	}
	defer rows.Close()
	for rows.Next() {
		var l LeaseState
		var status string
		if err := rows.Scan(&l.Scope, &l.Key, &status, &l.LockVersion, &l.CreatedAt, &l.LockedUntil, &l.DatabaseNow); err != nil {
			return nil, translate("leases", err)
		}
		l.Status = idempotency.Status(status)
		out[RecordRef{Scope: l.Scope, Key: l.Key}] = l
	}
	if err := rows.Err(); err != nil {
		return nil, translate("leases", err)
	}
	return out, nil
}

// ReleaseStuckParams names the record [Store.ReleaseStuck] releases and
// the lease the operator was shown.
type ReleaseStuckParams struct {
	Scope, Key string
	// LockVersion is the lock version the operator was shown: the release
	// applies only while the record is PROCESSING under it.
	LockVersion int64
	// Force releases a lease that is still live. Its holder may then still
	// be executing when a retry reclaims the record: fencing keeps the
	// outcome single, but the side effect may run twice unless it is
	// idempotent downstream.
	Force bool
}

// ReleaseStuckResult is what [Store.ReleaseStuck] left.
type ReleaseStuckResult struct {
	// LockedUntil is the lease's end after the release: now, or the
	// earlier end of a lease that had already ended (kept, so that how
	// long the record waited still shows); nil when the record held none.
	LockedUntil *time.Time
}

// ReleaseStuck releases by hand the lease of a record stuck PROCESSING, as
// its holder would release it: the lease ends now (an ended lease keeps
// its end) and the record stays PROCESSING, so that the next retry of the
// key reclaims it under a new lock version and re-drives the action. It is
// fenced by p.LockVersion, and refuses a live lease unless p.Force. audit
// (nil: none) runs in the same transaction after the release matched, with
// its result; its error rolls the release back and is returned as it is.
//
// Errors: idempotency.ErrLeaseLost when the record is gone, no longer
// PROCESSING under p.LockVersion, or its lease is live without p.Force:
// nothing changed; *Error from the database.
func (s *Store) ReleaseStuck(ctx context.Context, p ReleaseStuckParams,
	audit func(ctx context.Context, tx pgx.Tx, res ReleaseStuckResult) error) (ReleaseStuckResult, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return ReleaseStuckResult{}, translate("release stuck", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	res, err := s.ReleaseStuckTx(ctx, tx, p)
	if err != nil {
		return ReleaseStuckResult{}, err
	}
	if audit != nil {
		if err := audit(ctx, tx, res); err != nil {
			return ReleaseStuckResult{}, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return ReleaseStuckResult{}, translate("release stuck", err)
	}
	return res, nil
}

// ReleaseStuckTx is [Store.ReleaseStuck] inside the caller's transaction,
// which commits the release with the caller's own rows.
func (s *Store) ReleaseStuckTx(ctx context.Context, tx pgx.Tx, p ReleaseStuckParams) (ReleaseStuckResult, error) {
	var res ReleaseStuckResult
	err := tx.QueryRow(ctx, releaseStuckSQL, p.Key, p.Scope, p.LockVersion, p.Force).Scan(&res.LockedUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, idempotency.ErrLeaseLost
	}
	if err != nil {
		return res, translate("release stuck", err)
	}
	return res, nil
}

// CountExpired counts the records a prune may take now (finished, past
// their expires_at and not tombstones yet; tombstones past their refusal
// horizon), through the expiry and tombstone partial indexes: a prune's
// progress total. The count reads the whole of both indexes' due parts:
// bound ctx on a large table.
func (s *Store) CountExpired(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, countExpiredSQL).Scan(&n); err != nil {
		return 0, translate("count expired", err)
	}
	return n, nil
}
