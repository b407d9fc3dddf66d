package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/redisstore"
	"github.com/payonce/payonce/idempotency/redisstore/redistest"
)

// serverNow reads the server's clock, the one the limiter's windows are
// aligned by.
func serverNow(t *testing.T, rdb *redis.Client) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// windowEnd is the end of the epoch-aligned window of length w holding at.
func windowEnd(at time.Time, w time.Duration) time.Time {
	ms := at.UnixMilli()
	wm := w.Milliseconds()
	return time.UnixMilli(ms - ms%wm + wm)
}

func newLimiter(t *testing.T, rdb redis.UniversalClient, limit int, window time.Duration, prefix string) *redisstore.Limiter {
	t.Helper()
	l, err := redisstore.NewLimiter(rdb, limit, window, &redisstore.Config{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// inOneWindow runs f, which must happen within one window of w by the
// server's clock, and runs it again (up to 5 times, f starting afresh)
// when the server's clock crossed a window's end meanwhile: f's error
// fails the test only when f ran within one window. It returns that
// window's end.
func inOneWindow(t *testing.T, rdb *redis.Client, w time.Duration, f func(try int) error) time.Time {
	t.Helper()
	for try := range 5 {
		before := serverNow(t, rdb)
		err := f(try)
		end := windowEnd(before, w)
		if serverNow(t, rdb).Before(end) {
			if err != nil {
				t.Fatal(err)
			}
			return end
		}
		t.Logf("try %d crossed a window's end (%v); again", try, err)
	}
	t.Fatal("every try crossed a window's end")
	return time.Time{}
}

// A storm of new keys from one scope through two limiters on two clients
// (two instances of a service): exactly limit are allowed in the window,
// whichever instance asks, and each refusal's Retry-After is the time
// left in the window by the server's clock.
func TestLimiterStormSharedAcrossInstances(t *testing.T) {
	t.Parallel()
	const limit, callers = 10, 200
	const window = time.Minute
	prefix := redistest.Prefix()
	rdb, other := redistest.Client(t), redistest.Client(t)
	instances := []*redisstore.Limiter{
		newLimiter(t, rdb, limit, window, prefix),
		newLimiter(t, other, limit, window, prefix),
	}
	ctx := ctxFor(t)
	for _, c := range []*redis.Client{rdb, other} { // both connected before the storm
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	inOneWindow(t, rdb, window, func(try int) error {
		scope := "usr_flood" + strconv.Itoa(try)
		before := serverNow(t, rdb)
		var perInstance [2]atomic.Int64
		var mu sync.Mutex
		var afters []time.Duration
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok, after, err := instances[i%2].Allow(ctx, scope)
				switch {
				case err != nil:
					t.Error(err)
				case ok:
					perInstance[i%2].Add(1)
					if after != 0 {
						t.Errorf("allowed with Retry-After %s, want 0", after)
					}
				default:
					mu.Lock()
					afters = append(afters, after)
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		after := serverNow(t, rdb)
		if got := perInstance[0].Load() + perInstance[1].Load(); got != limit {
			return fmt.Errorf("allowed %d of %d callers, want exactly %d (instances: %d + %d)",
				got, callers, limit, perInstance[0].Load(), perInstance[1].Load())
		}
		if perInstance[0].Load() == 0 || perInstance[1].Load() == 0 {
			t.Logf("one instance got every allowance (%d + %d): the count is shared all the same",
				perInstance[0].Load(), perInstance[1].Load())
		}
		// Refused: Retry-After is what was left of the window when the
		// server decided, between the storm's start and its end.
		end := windowEnd(before, window)
		lo, hi := end.Sub(after)-time.Millisecond, end.Sub(before)+time.Millisecond
		for _, a := range afters {
			if a < lo || a > hi || a <= 0 || a > window {
				return fmt.Errorf("Retry-After %s, want within [%s, %s] (the rest of the window)", a, lo, hi)
			}
		}
		if len(afters) != callers-limit {
			return fmt.Errorf("%d refusals, want %d", len(afters), callers-limit)
		}
		// Either instance refuses now, whichever counted the allowances.
		for i, l := range instances {
			if ok, _, err := l.Allow(ctx, scope); err != nil || ok {
				return fmt.Errorf("instance %d after the storm: allowed %v, %v; want refused", i, ok, err)
			}
		}
		return nil
	})
}

// Once a scope reached its limit, a new window allows it again, exactly
// limit times. The test polls until allowed (refusals are not counted,
// so polling changes nothing), with a deadline, and checks by the
// server's clock that the allowance came no sooner than the window's end.
func TestLimiterNewWindowAllowsAgain(t *testing.T) {
	t.Parallel()
	const limit = 2
	const window = time.Second
	rdb := redistest.Client(t)
	l := newLimiter(t, rdb, limit, window, redistest.Prefix())
	ctx := ctxFor(t)
	// exhaust makes limit+1 calls: limit allowed, then one refused.
	exhaust := func(scope string) (refusedAfter time.Duration, err error) {
		for i := range limit + 1 {
			ok, after, err := l.Allow(ctx, scope)
			if err != nil {
				t.Fatal(err)
			}
			if want := i < limit; ok != want {
				return 0, fmt.Errorf("call %d: allowed %v, want %v", i+1, ok, want)
			}
			refusedAfter = after
		}
		return refusedAfter, nil
	}
	var scope string
	end := inOneWindow(t, rdb, window, func(try int) error {
		scope = "usr_again" + strconv.Itoa(try)
		after, err := exhaust(scope)
		if err == nil && (after <= 0 || after > window) {
			err = fmt.Errorf("Retry-After %s, want within the window %s", after, window)
		}
		return err
	})

	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	deadline := time.After(30 * time.Second)
	for allowed := false; !allowed; {
		select {
		case <-poll.C:
		case <-deadline:
			t.Fatal("no allowance within 30s, for a 1s window")
		}
		ok, _, err := l.Allow(ctx, scope)
		if err != nil {
			t.Fatal(err)
		}
		allowed = ok
	}
	if now := serverNow(t, rdb); now.Before(end) {
		t.Fatalf("allowed again at %s, before the window's end %s", now, end)
	}
	// The new window gives the full limit again, and no more: the one
	// allowed above, limit-1 more, then a refusal. That is checked when
	// the calls stayed in one window (on a loaded machine they may not).
	before := serverNow(t, rdb)
	got := 1
	for ; got <= limit; got++ {
		ok, _, err := l.Allow(ctx, scope)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
	}
	if windowEnd(before, window).Equal(windowEnd(serverNow(t, rdb), window)) && got != limit {
		t.Fatalf("the new window allowed %d, want %d", got, limit)
	}
}

// Each scope has its own count: one scope at its limit takes nothing from
// another.
func TestLimiterScopesIndependent(t *testing.T) {
	t.Parallel()
	const limit = 3
	rdb := redistest.Client(t)
	l := newLimiter(t, rdb, limit, time.Hour, redistest.Prefix())
	ctx := ctxFor(t)
	inOneWindow(t, rdb, time.Hour, func(try int) error {
		count := func(scope string, n int) int {
			got := 0
			for range n {
				ok, _, err := l.Allow(ctx, scope)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					got++
				}
			}
			return got
		}
		a, b := "usr_a"+strconv.Itoa(try), "usr_b"+strconv.Itoa(try)
		if got := count(a, limit+5); got != limit {
			return fmt.Errorf("scope a: %d allowed, want %d", got, limit)
		}
		if got := count(b, limit+5); got != limit {
			return fmt.Errorf("scope b after a reached its limit: %d allowed, want %d", got, limit)
		}
		return nil
	})
}

// The counter sits beside the scope's records: "<prefix>:{<scope>}:rl:
// <window ms>" (the scope's hash tag, so the records' Cluster slot), and
// it expires when its window ends.
func TestLimiterCounterKeyExpiresWithWindow(t *testing.T) {
	t.Parallel()
	const window = 90 * time.Second
	prefix := redistest.Prefix()
	rdb := redistest.Client(t)
	l := newLimiter(t, rdb, 5, window, prefix)
	ctx := ctxFor(t)
	before := serverNow(t, rdb)
	if ok, _, err := l.Allow(ctx, "usr_ttl"); err != nil || !ok {
		t.Fatalf("Allow: %v %v", ok, err)
	}
	key := prefix + ":{usr_ttl}:rl:90000"
	at, err := rdb.PExpireTime(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if at <= 0 {
		t.Fatalf("counter %s: PEXPIRETIME %s, want its window's end", key, at)
	}
	ends := []time.Time{windowEnd(before, window), windowEnd(serverNow(t, rdb), window)}
	if got := time.UnixMilli(at.Milliseconds()); !got.Equal(ends[0]) && !got.Equal(ends[1]) {
		t.Fatalf("counter expires at %s, want its window's end %s", got, ends[0])
	}
	keys, err := rdb.Keys(ctx, prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != key {
		t.Fatalf("keys %v, want only %s", keys, key)
	}
}

// A counter of another window is never counted, whatever its key's expiry
// says: left by the instant a script starts before a window's end and
// reads the clock after it, or by a server clock stepped back.
func TestLimiterIgnoresCounterOfAnotherWindow(t *testing.T) {
	t.Parallel()
	const window = time.Hour
	prefix := redistest.Prefix()
	rdb := redistest.Client(t)
	l := newLimiter(t, rdb, 2, window, prefix)
	ctx := ctxFor(t)
	inOneWindow(t, rdb, window, func(try int) error {
		scope := "usr_stale" + strconv.Itoa(try)
		key := prefix + ":{" + scope + "}:rl:3600000"
		start := windowEnd(serverNow(t, rdb), window).Add(-window)
		for _, other := range []time.Time{start.Add(-window), start.Add(window)} {
			// Full, and no expiry: only the window it names can stop it counting.
			if err := rdb.HSet(ctx, key, "w", other.UnixMilli(), "n", 2).Err(); err != nil {
				t.Fatal(err)
			}
			if ok, _, err := l.Allow(ctx, scope); err != nil || !ok {
				return fmt.Errorf("the counter of the window starting %s counted in the one starting %s: allowed %v, %v", other, start, ok, err)
			}
		}
		return nil
	})
}

// Bad arguments get an InvalidError naming them; a bad scope changes
// nothing; errors never hold the scope (nor so the counter's key), only
// its short hash.
func TestLimiterErrors(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	for _, c := range []struct {
		client redis.UniversalClient
		limit  int
		window time.Duration
		prefix string
		field  string
	}{
		{nil, 1, time.Minute, "", "client"},
		{rdb, 0, time.Minute, "", "limit"},
		{rdb, -3, time.Minute, "", "limit"},
		{rdb, 1, 0, "", "window"},
		{rdb, 1, -time.Second, "", "window"},
		{rdb, 1, 500 * time.Microsecond, "", "window"},
		{rdb, 1, 1500 * time.Microsecond, "", "window"},
		{rdb, 1, time.Minute, "a b", "Config.KeyPrefix"},
	} {
		_, err := redisstore.NewLimiter(c.client, c.limit, c.window, &redisstore.Config{KeyPrefix: c.prefix})
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != c.field || ie.Reason == "" {
			t.Errorf("NewLimiter(limit %d, window %s, prefix %q): %v, want an InvalidError naming %s", c.limit, c.window, c.prefix, err, c.field)
		}
	}
	if _, err := redisstore.NewLimiter(rdb, 1, time.Millisecond, nil); err != nil {
		t.Errorf("nil config, 1ms window: %v", err)
	}

	prefix := redistest.Prefix()
	l := newLimiter(t, rdb, 1, time.Hour, prefix)
	ctx := ctxFor(t)
	for _, bad := range []string{"", "usr {x}", strings.Repeat("s", 200)} {
		_, _, err := l.Allow(ctx, bad)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != "scope" {
			t.Errorf("Allow(%.20q): %v, want an InvalidError naming scope", bad, err)
		}
	}
	if n, err := rdb.Keys(ctx, prefix+":*").Result(); err != nil || len(n) != 0 {
		t.Fatalf("bad scopes wrote %v (%v)", n, err)
	}

	scope := "usr_secret_tenant_7fQ9x"
	key := prefix + ":{" + scope + "}:rl:3600000"
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := l.Allow(canceled, scope); !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), scope) {
		t.Errorf("canceled: %v, want context.Canceled without the scope", err)
	}
	// A server error: the counter's key holds another type.
	if err := rdb.Set(ctx, key, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, _, err := l.Allow(ctx, scope)
	t.Logf("a server error reads: %v", err)
	if err == nil || strings.Contains(err.Error(), scope) || !strings.Contains(err.Error(), idempotency.ShortHash(scope)) {
		t.Errorf("server error: %v, want an error naming the scope by its short hash %s only", err, idempotency.ShortHash(scope))
	}
}

// On a Cluster, each scope's counter lives in its scope's slot: a storm
// over many scopes at once (spread over the primaries) allows exactly
// limit per scope, through two clients. The nodes run on this machine's
// clock; a storm that crossed an hour's end (a new window) is run again
// on new scopes.
func TestLimiterOnCluster(t *testing.T) {
	t.Parallel()
	const limit, scopes, perScope = 5, 24, 20
	ctx := ctxFor(t)
	prefix := redistest.Prefix()
	a, b := redistest.ClusterClient(t), redistest.ClusterClient(t)
	instances := []*redisstore.Limiter{
		newLimiter(t, a, limit, time.Hour, prefix),
		newLimiter(t, b, limit, time.Hour, prefix),
	}
	for try := range 3 {
		before := time.Now().Truncate(time.Hour)
		var allowed [scopes]atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range scopes * perScope {
			wg.Go(func() {
				<-start
				ok, _, err := instances[i%2].Allow(ctx, fmt.Sprintf("usr_%d_%02d", try, i%scopes))
				if err != nil {
					t.Error(err)
				}
				if ok {
					allowed[i%scopes].Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if !time.Now().Truncate(time.Hour).Equal(before) {
			t.Logf("try %d crossed an hour's end; again", try)
			continue
		}
		for s := range scopes {
			if got := allowed[s].Load(); got != limit {
				t.Errorf("scope %d: allowed %d of %d, want %d", s, got, perScope, limit)
			}
		}
		return
	}
	t.Fatal("every try crossed an hour's end")
}
