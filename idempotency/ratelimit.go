package idempotency

import (
	"context"
	"sync"
	"time"
)

// Limiter bounds how many new keys a scope may create: key flooding fills
// the store and is a cheap attack. The middleware asks it once per new key
// (never for replays) and answers 429 with Retry-After when it refuses.
type Limiter interface {
	// Allow counts one new key for scope and reports whether it is within
	// the limit, and if not, how long until it may be.
	Allow(ctx context.Context, scope string) (ok bool, retryAfter time.Duration, err error)
}

// MemLimiter is a fixed-window Limiter in process memory: each instance of
// a service counts on its own, so N instances allow up to N times the
// limit. With PostgreSQL use pgstore's Limiter, with Redis redisstore's:
// shared by all instances.
// Memory is bounded: windows that ended are dropped as time passes.
type MemLimiter struct {
	limit  int
	window time.Duration
	clock  func() time.Time

	mu     sync.Mutex
	start  time.Time // the current window's start
	counts map[string]int
}

// NewMemLimiter allows limit new keys per scope per window. clock may be
// nil (time.Now).
func NewMemLimiter(limit int, window time.Duration, clock func() time.Time) (*MemLimiter, error) {
	if limit <= 0 {
		return nil, invalid("limit", "must be positive, got %d", limit)
	}
	if window <= 0 {
		return nil, invalid("window", "must be positive, got %s", window)
	}
	if clock == nil {
		clock = time.Now
	}
	return &MemLimiter{limit: limit, window: window, clock: clock, counts: map[string]int{}}, nil
}

// Allow implements [Limiter].
func (l *MemLimiter) Allow(ctx context.Context, scope string) (bool, time.Duration, error) {
	now := l.clock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if start := now.Truncate(l.window); !start.Equal(l.start) {
		l.start, l.counts = start, map[string]int{} // the old window's counts are dropped whole
	}
	if l.counts[scope] >= l.limit {
		return false, l.start.Add(l.window).Sub(now), nil
	}
	l.counts[scope]++
	return true, 0, nil
}
