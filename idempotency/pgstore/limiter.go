package pgstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
)

// Limiter is an [idempotency.Limiter] shared by every instance that uses
// the same database: a fixed-window counter per scope in the table
// idempotency_rate_limits, windows aligned by the database clock.
//
// The trade-off: each new key costs one more short autocommit statement,
// and the new keys of one scope serialise on that scope's counter row for
// the instant of that statement (not of the request). Replays are never
// counted. Counters of ended windows are deleted now and then by Allow.
type Limiter struct {
	pool   *pgxpool.Pool
	limit  int
	window time.Duration
	calls  atomic.Int64
}

var _ idempotency.Limiter = (*Limiter)(nil)

// NewLimiter allows limit new keys per scope per window.
func NewLimiter(pool *pgxpool.Pool, limit int, window time.Duration) (*Limiter, error) {
	switch {
	case pool == nil:
		return nil, &idempotency.InvalidError{Field: "pool", Reason: "nil"}
	case limit <= 0:
		return nil, &idempotency.InvalidError{Field: "limit", Reason: fmt.Sprintf("must be positive, got %d", limit)}
	case window < time.Second:
		return nil, &idempotency.InvalidError{Field: "window", Reason: fmt.Sprintf("must be at least 1s, got %s", window)}
	}
	return &Limiter{pool: pool, limit: limit, window: window}, nil
}

// Allow implements [idempotency.Limiter].
func (l *Limiter) Allow(ctx context.Context, scope string) (bool, time.Duration, error) {
	if l.calls.Add(1)%1000 == 0 {
		if _, err := l.pool.Exec(ctx, limitCleanupSQL, (2 * l.window).Seconds()); err != nil {
			return false, 0, translate("limit cleanup", err)
		}
	}
	var ok bool
	var left float64
	if err := l.pool.QueryRow(ctx, limitSQL, scope, l.window.Seconds(), l.limit).Scan(&ok, &left); err != nil {
		return false, 0, translate("limit", err)
	}
	return ok, time.Duration(left * float64(time.Second)), nil
}
