package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/memstore"
)

// countingStore counts the claims that reach the store, and may say that
// it seals responses.
type countingStore struct {
	idempotency.Store
	claims atomic.Int64
	seals  bool
}

func (s *countingStore) Claim(ctx context.Context, p idempotency.ClaimParams) (idempotency.Claim, error) {
	s.claims.Add(1)
	return s.Store.Claim(ctx, p)
}

func (s *countingStore) Seals() bool { return s.seals }

// manualClock is one clock for the store and the cache: the store's clock
// and this process's advance together unless a test skews them.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type cacheBench struct {
	store *countingStore
	exec  *idempotency.Executor
	clock *manualClock
	runs  atomic.Int64
}

func newCacheBench(t *testing.T, rc idempotency.ReplayCache, seals bool) *cacheBench {
	t.Helper()
	clock := &manualClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	b := &cacheBench{clock: clock, store: &countingStore{Store: memstore.New(&memstore.Config{Clock: clock.Now}), seals: seals}}
	if rc.Clock == nil {
		rc.Clock = clock.Now
	}
	exec, err := idempotency.New(b.store, &idempotency.Config{Retention: time.Hour, ReplayCache: &rc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Close() })
	b.exec = exec
	return b
}

func cacheReq(t *testing.T, scope, key, field string) idempotency.Request {
	t.Helper()
	fp, err := idempotency.NewFingerprint().String("f", field).Sum()
	if err != nil {
		t.Fatal(err)
	}
	return idempotency.Request{Scope: scope, Key: key, Fingerprint: fp}
}

func (b *cacheBench) do(t *testing.T, req idempotency.Request) (idempotency.Result, error) {
	t.Helper()
	return b.exec.Do(context.Background(), req, func(context.Context) (idempotency.Response, error) {
		n := b.runs.Add(1)
		return idempotency.Response{Code: 201, Header: map[string][]string{"X-Run": {"1"}}, Body: []byte(strings.Repeat("r", int(n)))}, nil
	})
}

// claimsFor runs req and reports how many claims reached the store.
func (b *cacheBench) claimsFor(t *testing.T, req idempotency.Request) (int64, idempotency.Result, error) {
	t.Helper()
	before := b.store.claims.Load()
	res, err := b.do(t, req)
	return b.store.claims.Load() - before, res, err
}

func TestReplayCacheAnswersReplaysWithoutTheStore(t *testing.T) {
	b := newCacheBench(t, idempotency.ReplayCache{}, false)
	req := cacheReq(t, "cus_a", "cus_a_k1", "v")
	first, err := b.do(t, req)
	if err != nil || first.Replayed {
		t.Fatalf("first: %+v %v", first, err)
	}
	// The first replay goes to the store (the cache fills from replays
	// the store answered, never from this process's own completion).
	if n, res, err := b.claimsFor(t, req); n != 1 || err != nil || !res.Replayed {
		t.Fatalf("first replay: %d claims, %+v %v", n, res, err)
	}
	for i := 0; i < 3; i++ {
		n, res, err := b.claimsFor(t, req)
		if n != 0 || err != nil || !res.Replayed || res.Status != idempotency.StatusCompleted ||
			res.Response.Code != 201 || string(res.Response.Body) != "r" || res.Response.Header.Get("X-Run") != "1" {
			t.Fatalf("cached replay %d: %d claims, %+v %v", i, n, res, err)
		}
		// The caller's copy is its own: changing it changes no later answer.
		res.Response.Body[0] = 'x'
		res.Response.Header.Set("X-Run", "changed")
	}
	if b.runs.Load() != 1 {
		t.Fatalf("the action ran %d times", b.runs.Load())
	}
	// Another fingerprint is refused from the cache as the store refuses it.
	other := cacheReq(t, "cus_a", "cus_a_k1", "other")
	if n, _, err := b.claimsFor(t, other); n != 0 || !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("mismatch: %d claims, %v", n, err)
	}
	// The same key in another scope is another record: the cache does not
	// answer for it.
	foreign := cacheReq(t, "cus_b", "cus_a_k1", "v")
	if n, res, err := b.claimsFor(t, foreign); n != 1 || err != nil || res.Replayed {
		t.Fatalf("other scope: %d claims, %+v %v", n, res, err)
	}
}

func TestReplayCacheStopsAMarginBeforeExpiry(t *testing.T) {
	// MaxAge above the record's life: only the expiry bounds the entry.
	b := newCacheBench(t, idempotency.ReplayCache{Margin: 5 * time.Second, MaxAge: 24 * time.Hour}, false)
	req := cacheReq(t, "cus_a", "cus_a_k1", "v")
	if _, err := b.do(t, req); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(10 * time.Minute)
	if n, _, _ := b.claimsFor(t, req); n != 1 { // fills the cache: 50 min left
		t.Fatalf("fill: %d claims", n)
	}
	b.clock.Advance(50*time.Minute - 5*time.Second - time.Millisecond)
	if n, res, err := b.claimsFor(t, req); n != 0 || err != nil || !res.Replayed {
		t.Fatalf("just inside the margin: %d claims, %+v %v", n, res, err)
	}
	b.clock.Advance(time.Millisecond)
	if n, res, err := b.claimsFor(t, req); n != 1 || err != nil || !res.Replayed {
		t.Fatalf("at the margin: %d claims, %+v %v", n, res, err)
	}
	// Past the expiry the store decides (a new execution under the
	// default policy); the cache never answered for the old record.
	b.clock.Advance(10 * time.Second)
	if n, res, err := b.claimsFor(t, req); n != 1 || err != nil || res.Replayed || b.runs.Load() != 2 {
		t.Fatalf("past expiry: %d claims, %+v %v, %d runs", n, res, err, b.runs.Load())
	}
}

// A process whose clock runs ahead of the store's stops serving early; one
// whose clock runs behind is bounded by the life the store reported,
// counted from before the read: the entry ends no later than the record.
func TestReplayCacheCountsDownFromBeforeTheRead(t *testing.T) {
	clock := &manualClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	// This process's clock reads an hour behind the store's: only the life
	// the store reported, counted on this clock, bounds entries, so the
	// offset between the two clocks does not matter.
	behind := func() time.Time { return clock.Now().Add(-time.Hour) }
	store := &countingStore{Store: memstore.New(&memstore.Config{Clock: clock.Now})}
	exec, err := idempotency.New(store, &idempotency.Config{Retention: time.Minute,
		ReplayCache: &idempotency.ReplayCache{Clock: behind, Margin: time.Second, MaxAge: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	req := cacheReq(t, "cus_a", "cus_a_k1", "v")
	runs := 0
	do := func() (int64, idempotency.Result) {
		before := store.claims.Load()
		res, err := exec.Do(context.Background(), req, func(context.Context) (idempotency.Response, error) {
			runs++
			return idempotency.Response{Code: 201}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return store.claims.Load() - before, res
	}
	do()
	do() // fills: 60s left on the store's clock
	clock.Advance(58 * time.Second)
	if n, res := do(); n != 0 || !res.Replayed {
		t.Fatalf("58s later: %d claims, %+v", n, res)
	}
	clock.Advance(time.Second)
	if n, _ := do(); n != 1 {
		t.Fatalf("59s later (60s life minus the 1s margin): %d claims", n)
	}
	clock.Advance(2 * time.Second)
	if n, res := do(); n != 1 || res.Replayed || runs != 2 {
		t.Fatalf("after expiry: %d claims, %+v, %d runs", n, res, runs)
	}
}

func TestReplayCacheLeavesSomeRequestsToTheStore(t *testing.T) {
	t.Run("NoCache", func(t *testing.T) {
		b := newCacheBench(t, idempotency.ReplayCache{}, false)
		req := cacheReq(t, "cus_a", "cus_a_k1", "v")
		req.NoCache = true
		for i := 0; i < 4; i++ {
			if n, res, err := b.claimsFor(t, req); n != 1 || err != nil || res.Replayed != (i > 0) {
				t.Fatalf("call %d: %d claims, %+v %v", i, n, res, err)
			}
		}
		// Its answers did not fill the cache for requests that allow it.
		req.NoCache = false
		if n, _, _ := b.claimsFor(t, req); n != 1 {
			t.Fatalf("after NoCache requests: %d claims", n)
		}
	})
	t.Run("SealingStore", func(t *testing.T) {
		b := newCacheBench(t, idempotency.ReplayCache{}, true)
		req := cacheReq(t, "cus_a", "cus_a_k1", "v")
		for i := 0; i < 4; i++ {
			if n, res, err := b.claimsFor(t, req); n != 1 || err != nil || res.Replayed != (i > 0) {
				t.Fatalf("call %d: %d claims, %+v %v", i, n, res, err)
			}
		}
	})
	t.Run("InProgressAndFailed", func(t *testing.T) {
		b := newCacheBench(t, idempotency.ReplayCache{}, false)
		req := cacheReq(t, "cus_a", "cus_a_k1", "v")
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error)
		go func() {
			_, err := b.exec.Do(context.Background(), req, func(context.Context) (idempotency.Response, error) {
				close(started)
				<-release
				return idempotency.Response{}, idempotency.Permanent(errors.New("declined"), idempotency.Response{Code: 402})
			})
			done <- err
		}()
		<-started
		for i := 0; i < 2; i++ {
			if n, _, err := b.claimsFor(t, req); n != 1 || !errors.Is(err, idempotency.ErrInProgress) {
				t.Fatalf("in progress %d: %d claims, %v", i, n, err)
			}
		}
		close(release)
		if err := <-done; !errors.Is(err, idempotency.ErrFailed) {
			t.Fatalf("holder: %v", err)
		}
		// A stored failure is finished too: cached after one store replay.
		for i, want := range []int64{1, 0} {
			if n, res, err := b.claimsFor(t, req); n != want || !errors.Is(err, idempotency.ErrFailed) || !res.Replayed {
				t.Fatalf("failed replay %d: %d claims, %+v %v", i, n, res, err)
			}
		}
	})
}

func TestReplayCacheIsBounded(t *testing.T) {
	b := newCacheBench(t, idempotency.ReplayCache{Size: 2}, false)
	keys := []idempotency.Request{cacheReq(t, "cus_a", "cus_a_k1", "v"), cacheReq(t, "cus_a", "cus_a_k2", "v"), cacheReq(t, "cus_a", "cus_a_k3", "v")}
	for _, r := range keys {
		b.do(t, r) // executes
		b.do(t, r) // fills
	}
	// k1 was the least recently used of three in a cache of two; reading
	// it from the store fills it again, evicting k2 (k3 was used since).
	for _, step := range []struct {
		key    int
		claims int64
	}{{1, 0}, {2, 0}, {0, 1}, {2, 0}, {1, 1}} {
		if n, res, err := b.claimsFor(t, keys[step.key]); err != nil || !res.Replayed || n != step.claims {
			t.Fatalf("k%d: %d claims (want %d), %+v %v", step.key+1, n, step.claims, res, err)
		}
	}
}

func TestReplayCacheConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		rc    idempotency.ReplayCache
		field string
	}{
		{idempotency.ReplayCache{Size: -1}, "Config.ReplayCache.Size"},
		{idempotency.ReplayCache{Margin: -time.Second}, "Config.ReplayCache.Margin"},
		{idempotency.ReplayCache{MaxAge: -time.Second}, "Config.ReplayCache.MaxAge"},
		{idempotency.ReplayCache{SyncInterval: -time.Second}, "Config.ReplayCache.SyncInterval"},
	} {
		_, err := idempotency.New(memstore.New(nil), &idempotency.Config{ReplayCache: &tc.rc})
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || !errors.Is(err, idempotency.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want an InvalidError naming %s", tc.rc, err, tc.field)
		}
	}
}

// An entry is served for at most MaxAge after the read that filled it was
// sent, whatever the record's life: the bound on a stale replay over a
// store that reports no changes (default 5s).
func TestReplayCacheMaxAge(t *testing.T) {
	for _, tc := range []struct {
		name   string
		maxAge time.Duration
		want   time.Duration
	}{{"Default", 0, 5 * time.Second}, {"Set", 90 * time.Second, 90 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			b := newCacheBench(t, idempotency.ReplayCache{MaxAge: tc.maxAge}, false)
			req := cacheReq(t, "cus_a", "cus_a_k1", "v")
			if _, err := b.do(t, req); err != nil {
				t.Fatal(err)
			}
			if n, _, _ := b.claimsFor(t, req); n != 1 { // fills: an hour left on the record
				t.Fatalf("fill: %d claims", n)
			}
			b.clock.Advance(tc.want - time.Millisecond)
			if n, res, err := b.claimsFor(t, req); n != 0 || err != nil || !res.Replayed {
				t.Fatalf("just before MaxAge: %d claims, %+v %v", n, res, err)
			}
			b.clock.Advance(time.Millisecond)
			if n, res, err := b.claimsFor(t, req); n != 1 || err != nil || !res.Replayed {
				t.Fatalf("at MaxAge: %d claims, %+v %v", n, res, err)
			}
		})
	}
}

// watchingStore is a store that reports changes when its test says so:
// the test drives the callbacks its executor handed WatchChanges.
type watchingStore struct {
	*countingStore
	params  chan idempotency.WatchParams
	stopped chan struct{}
	// unsupported makes WatchChanges refuse at once.
	unsupported bool
	// inFlight, when set, runs after the store answered a claim and
	// before the executor gets the answer.
	inFlight func()
}

func (s *watchingStore) Claim(ctx context.Context, p idempotency.ClaimParams) (idempotency.Claim, error) {
	c, err := s.countingStore.Claim(ctx, p)
	if s.inFlight != nil {
		s.inFlight()
	}
	return c, err
}

func (s *watchingStore) WatchChanges(ctx context.Context, p idempotency.WatchParams) error {
	defer close(s.stopped)
	if s.unsupported {
		return fmt.Errorf("watchingStore: %w", errors.ErrUnsupported)
	}
	s.params <- p
	<-ctx.Done()
	return nil
}

// watchBench is a cacheBench over a watchingStore, with the cache's events.
type watchBench struct {
	*cacheBench
	store  *watchingStore
	watch  idempotency.WatchParams
	events chan idempotency.ReplayCacheEvent
}

func newWatchBench(t *testing.T, rc idempotency.ReplayCache, unsupported bool) *watchBench {
	t.Helper()
	clock := &manualClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	counting := &countingStore{Store: memstore.New(&memstore.Config{Clock: clock.Now})}
	ws := &watchingStore{countingStore: counting, params: make(chan idempotency.WatchParams, 1),
		stopped: make(chan struct{}), unsupported: unsupported}
	events := make(chan idempotency.ReplayCacheEvent, 100)
	rc.Clock = clock.Now
	rc.Observe = func(ev idempotency.ReplayCacheEvent) { events <- ev }
	exec, err := idempotency.New(ws, &idempotency.Config{Retention: time.Hour, ReplayCache: &rc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Close() })
	b := &watchBench{cacheBench: &cacheBench{store: counting, exec: exec, clock: clock}, store: ws, events: events}
	if !unsupported {
		b.watch = <-ws.params
	}
	return b
}

// next returns the cache's next event, which must be of kind k.
func (b *watchBench) next(t *testing.T, k idempotency.ReplayCacheEventKind) idempotency.ReplayCacheEvent {
	t.Helper()
	ev := <-b.events
	if ev.Kind != k {
		t.Fatalf("event %v (%+v), want %v", ev.Kind, ev, k)
	}
	return ev
}

// connect plays a watcher that connects: a reset, then a confirmation
// asked for now.
func (b *watchBench) connect(t *testing.T) {
	t.Helper()
	b.watch.OnReset(nil)
	b.next(t, idempotency.CacheFlushed)
	b.watch.OnSync(b.clock.Now())
	b.next(t, idempotency.CacheSynced)
}

// wantClaims runs req and stops the test unless n claims reached the
// store and the answer was a replay.
func (b *watchBench) wantClaims(t *testing.T, what string, req idempotency.Request, n int64) {
	t.Helper()
	got, res, err := b.claimsFor(t, req)
	if got != n || !res.Replayed || err != nil {
		t.Fatalf("%s: %d claims (want %d), %+v %v", what, got, n, res, err)
	}
}

// Over a store that reports changes, a changed record's entry is dropped
// in every executor that holds it, and nothing else is.
func TestReplayCacheDropsAChangedRecord(t *testing.T) {
	b := newWatchBench(t, idempotency.ReplayCache{}, false)
	b.connect(t)
	k1, k2 := cacheReq(t, "cus_a", "cus_a_k1", "v"), cacheReq(t, "cus_a", "cus_a_k2", "v")
	other := cacheReq(t, "cus_b", "cus_a_k1", "v") // the same key in another scope
	for _, r := range []idempotency.Request{k1, k2, other} {
		if _, err := b.do(t, r); err != nil {
			t.Fatal(err)
		}
		b.wantClaims(t, "fill", r, 1)
		b.wantClaims(t, "cached", r, 0)
	}
	b.watch.OnChange("cus_a", idempotency.KeySHA256(k1.Key))
	if ev := b.next(t, idempotency.CacheInvalidated); ev.Scope != "cus_a" || ev.KeySHA256 != idempotency.KeySHA256(k1.Key) {
		t.Fatalf("event %+v", ev)
	}
	b.wantClaims(t, "k1 after its change", k1, 1)
	b.wantClaims(t, "k2 after k1's change", k2, 0)
	b.wantClaims(t, "k1 of another scope after k1's change", other, 0)
	b.wantClaims(t, "k1 cached again", k1, 0)

	// A report that names no record is read as "anything changed".
	b.watch.OnChange("cus_a", "not-a-hash")
	if ev := b.next(t, idempotency.CacheFlushed); ev.Err == nil {
		t.Fatal("a flush for a bad report says nothing")
	}
	b.wantClaims(t, "k2 after a bad report", k2, 1)
}

// Nothing is served before the store's first confirmation, nor once
// 2×SyncInterval passed without one, until the next; a reset (a lost
// connection) flushes the cache.
func TestReplayCacheServesOnlyWhileTheStoreConfirms(t *testing.T) {
	b := newWatchBench(t, idempotency.ReplayCache{SyncInterval: time.Second}, false)
	req := cacheReq(t, "cus_a", "cus_a_k1", "v")
	if _, err := b.do(t, req); err != nil {
		t.Fatal(err)
	}
	b.wantClaims(t, "fill before the first confirmation", req, 1)
	b.wantClaims(t, "before the first confirmation", req, 1)

	b.connect(t)
	b.wantClaims(t, "fill", req, 1)
	b.clock.Advance(2*time.Second - time.Millisecond)
	b.wantClaims(t, "just inside 2×SyncInterval", req, 0)
	b.clock.Advance(time.Millisecond)
	b.wantClaims(t, "at 2×SyncInterval", req, 1)
	b.wantClaims(t, "unconfirmed", req, 1)
	// The same connection confirms again (late, not lost: it missed
	// nothing): the entry is served again.
	b.watch.OnSync(b.clock.Now())
	b.next(t, idempotency.CacheSynced)
	b.wantClaims(t, "after a late confirmation", req, 0)
	// A confirmation asked for earlier than the last changes nothing.
	b.watch.OnSync(b.clock.Now().Add(-time.Minute))
	b.next(t, idempotency.CacheSynced)
	b.clock.Advance(2*time.Second - time.Millisecond)
	b.wantClaims(t, "after an older confirmation", req, 0)
	b.watch.OnSync(b.clock.Now())
	b.next(t, idempotency.CacheSynced)

	// A lost connection: everything goes, and nothing is served until the
	// next connection confirms.
	lost := errors.New("connection reset")
	b.watch.OnReset(lost)
	if ev := b.next(t, idempotency.CacheFlushed); !errors.Is(ev.Err, lost) {
		t.Fatalf("flush: %+v", ev)
	}
	b.wantClaims(t, "after a reset", req, 1)
	b.wantClaims(t, "after a reset, unconfirmed", req, 1)
	b.connect(t)
	b.wantClaims(t, "fill after reconnecting", req, 1)
	b.wantClaims(t, "after reconnecting", req, 0)
}

// A change report that arrives while a claim is in flight keeps the
// claim's answer out of the cache: the store may have read the record
// before the change committed.
func TestReplayCacheDropsAReadOvertakenByAChange(t *testing.T) {
	b := newWatchBench(t, idempotency.ReplayCache{}, false)
	b.connect(t)
	req := cacheReq(t, "cus_a", "cus_a_k1", "v")
	if _, err := b.do(t, req); err != nil {
		t.Fatal(err)
	}
	b.store.inFlight = func() {
		b.store.inFlight = nil
		b.watch.OnChange("cus_a", idempotency.KeySHA256(req.Key))
	}
	b.wantClaims(t, "overtaken read", req, 1)
	b.next(t, idempotency.CacheInvalidated)
	b.wantClaims(t, "after an overtaken read", req, 1) // nothing was cached
	b.wantClaims(t, "filled by a clean read", req, 0)

	// A report of another record in flight (the same key in another scope
	// among them) does not keep this read out.
	b.watch.OnChange("cus_a", idempotency.KeySHA256(req.Key))
	b.next(t, idempotency.CacheInvalidated)
	b.store.inFlight = func() {
		b.store.inFlight = nil
		b.watch.OnChange("cus_a", idempotency.KeySHA256("cus_a_k2"))
		b.watch.OnChange("cus_b", idempotency.KeySHA256(req.Key))
	}
	b.wantClaims(t, "read while other records changed", req, 1)
	b.next(t, idempotency.CacheInvalidated)
	b.next(t, idempotency.CacheInvalidated)
	b.wantClaims(t, "after a read while other records changed", req, 0)

	// More reports in flight than the cache remembers: the read is kept
	// out, since one of them may have been its record's.
	b.watch.OnChange("cus_a", idempotency.KeySHA256(req.Key))
	b.next(t, idempotency.CacheInvalidated)
	b.store.inFlight = func() {
		b.store.inFlight = nil
		for i := range 300 {
			b.watch.OnChange("cus_a", idempotency.KeySHA256(fmt.Sprintf("cus_a_other%d", i)))
			b.next(t, idempotency.CacheInvalidated)
		}
	}
	b.wantClaims(t, "read while 300 other records changed", req, 1)
	b.wantClaims(t, "after a read while 300 other records changed", req, 1)

	// A reset in flight as well.
	b.watch.OnChange("cus_a", idempotency.KeySHA256(req.Key))
	b.next(t, idempotency.CacheInvalidated)
	b.store.inFlight = func() {
		b.store.inFlight = nil
		b.watch.OnReset(nil)
		b.watch.OnSync(b.clock.Now())
	}
	b.wantClaims(t, "read overtaken by a reset", req, 1)
	b.next(t, idempotency.CacheFlushed)
	b.next(t, idempotency.CacheSynced)
	b.wantClaims(t, "after a read overtaken by a reset", req, 1)
}

// Close ends the watcher and the cache: later requests go to the store.
func TestReplayCacheClose(t *testing.T) {
	b := newWatchBench(t, idempotency.ReplayCache{}, false)
	b.connect(t)
	req := cacheReq(t, "cus_a", "cus_a_k1", "v")
	if _, err := b.do(t, req); err != nil {
		t.Fatal(err)
	}
	b.wantClaims(t, "fill", req, 1)
	b.wantClaims(t, "cached", req, 0)
	if err := b.exec.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.store.stopped:
	default:
		t.Fatal("Close returned before the watcher did")
	}
	b.next(t, idempotency.CacheFlushed)
	b.wantClaims(t, "after Close", req, 1)
	b.wantClaims(t, "after Close, again", req, 1)
	if err := b.exec.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// A store that turns out unable to report changes leaves MaxAge alone to
// bound the entries.
func TestReplayCacheOverAStoreThatCannotWatch(t *testing.T) {
	b := newWatchBench(t, idempotency.ReplayCache{MaxAge: time.Minute}, true)
	if ev := b.next(t, idempotency.CacheUnwatched); !errors.Is(ev.Err, errors.ErrUnsupported) {
		t.Fatalf("event %+v", ev)
	}
	req := cacheReq(t, "cus_a", "cus_a_k1", "v")
	if _, err := b.do(t, req); err != nil {
		t.Fatal(err)
	}
	b.wantClaims(t, "fill", req, 1)
	b.clock.Advance(time.Minute - time.Millisecond)
	b.wantClaims(t, "within MaxAge", req, 0)
	b.clock.Advance(time.Millisecond)
	b.wantClaims(t, "at MaxAge", req, 1)
}
