package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payonce/payonce/idempotency"
)

// Limiter is an [idempotency.Limiter] shared by every instance that uses
// the same Redis: a fixed-window counter of new keys per scope, windows
// aligned on the Unix epoch by the server's clock (TIME), as pgstore's
// Limiter aligns them by the database's. Give it to the middleware as
// idempotency.MiddlewareConfig.Limiter; it works beside any store.
//
// Each Allow is one script, one round trip: the server reads its clock,
// finds the current window, and counts the key unless the scope already
// reached the limit in that window, in one atomic step, so no number of
// concurrent callers on any number of instances gets more than the limit
// per window. The counter of a scope is the hash
// "<prefix>:{<scope>}:rl:<window in ms>" beside the scope's records (the
// same hash tag: the same Cluster slot), and it expires (PEXPIREAT) when
// its window ends: nothing needs cleaning up. Replays are never counted
// (the middleware asks only for new keys).
//
// The trade-off, as with pgstore's: each new key costs one more round
// trip, and the new keys of one scope serialise on its counter for the
// instant the script runs. The counter lives on the primary and is
// replicated asynchronously: a failover may forget a window's count, and
// the scope then gets up to the limit again in that window.
type Limiter struct {
	rdb    redis.UniversalClient
	prefix string
	limit  int
	window time.Duration
}

var _ idempotency.Limiter = (*Limiter)(nil)

// NewLimiter allows limit new keys per scope per window (at least 1ms, in
// whole milliseconds: the server's clock counts milliseconds). cfg is the
// store's Config, so that the counters share the records' key prefix;
// only KeyPrefix is used, and a nil cfg means DefaultKeyPrefix. The
// client may be a standalone server's, a Sentinel-managed primary's or a
// Cluster's: each Allow touches one key.
//
// Errors: an *idempotency.InvalidError naming the bad argument (client,
// limit, window) or Config.KeyPrefix.
func NewLimiter(client redis.UniversalClient, limit int, window time.Duration, cfg *Config) (*Limiter, error) {
	switch {
	case client == nil:
		return nil, &idempotency.InvalidError{Field: "client", Reason: "nil: give the Redis client the limiter counts on"}
	case limit <= 0:
		return nil, &idempotency.InvalidError{Field: "limit", Reason: fmt.Sprintf("must be positive (new keys per scope per window), got %d", limit)}
	case window < time.Millisecond:
		return nil, &idempotency.InvalidError{Field: "window", Reason: fmt.Sprintf("must be at least 1ms, got %s", window)}
	case window%time.Millisecond != 0:
		return nil, &idempotency.InvalidError{Field: "window", Reason: fmt.Sprintf("must be a whole number of milliseconds, got %s", window)}
	}
	prefix := DefaultKeyPrefix
	if cfg != nil && cfg.KeyPrefix != "" {
		prefix = cfg.KeyPrefix
	}
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	return &Limiter{rdb: client, prefix: prefix, limit: limit, window: window}, nil
}

// counterKey is the scope's counter for windows of l.window: in the
// scope's hash tag, so in the slot of its records.
func (l *Limiter) counterKey(scope string) string {
	return l.prefix + ":{" + scope + "}:rl:" + strconv.FormatInt(l.window.Milliseconds(), 10)
}

// Allow implements [idempotency.Limiter]: it counts one new key for scope
// and reports whether it is within the limit. When it is not, retryAfter
// is the time left in the current window by the server's clock (at most
// the window); when it is, retryAfter is 0.
//
// Errors: an *idempotency.InvalidError naming scope when it is not a
// valid scope (idempotency.ValidateScope); the client's error (network,
// server, ctx), wrapped, naming the scope by its short hash only. On
// error the key may or may not have been counted.
func (l *Limiter) Allow(ctx context.Context, scope string) (bool, time.Duration, error) {
	if err := idempotency.ValidateScope(scope); err != nil {
		return false, 0, err
	}
	out, err := limitScript.Run(ctx, l.rdb, []string{l.counterKey(scope)}, l.window.Milliseconds(), l.limit).Int64Slice()
	if err != nil {
		return false, 0, fmt.Errorf("redisstore: limit of scope %s: %w", idempotency.ShortHash(scope), err)
	}
	if len(out) != 2 {
		return false, 0, fmt.Errorf("redisstore: limit of scope %s: unexpected reply %v", idempotency.ShortHash(scope), out)
	}
	if out[0] == 1 {
		return true, 0, nil
	}
	return false, time.Duration(out[1]) * time.Millisecond, nil
}

// limitScript counts one new key in the current window of ARGV[1] ms
// (aligned on the epoch, by the server's clock) of the counter KEYS[1],
// unless its count already reached ARGV[2]. It returns {1, ms left} when
// counted, {0, ms left} when refused.
//
// The counter is a hash: w, the start of the window it counts (ms); n,
// the count. A count of another window is never used, whatever the key's
// expiry did: Redis checks a key's expiry inside a script against the
// instant the script started, TIME may already be in the next window,
// and a clock stepped back leaves a counter of a window yet to come.
// The key expires at its window's end (PEXPIREAT).
var limitScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local w = tonumber(ARGV[1])
local start = now - now % w
local stop = start + w
local c = redis.call('HMGET', KEYS[1], 'w', 'n')
local n = 0
if tonumber(c[1]) == start then n = tonumber(c[2]) or 0 end
if n >= tonumber(ARGV[2]) then return {0, stop - now} end
redis.call('HSET', KEYS[1], 'w', start, 'n', n + 1)
redis.call('PEXPIREAT', KEYS[1], stop)
return {1, stop - now}
`)
