package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// ReplayCache configures an executor's in-process cache of finished
// records ([Config].ReplayCache), which answers replays without a round
// trip to the store.
//
// A finished record (COMPLETED or FAILED) does not change on the claim
// path until it expires: Complete applies only under a live claim's lock
// version, a prune deletes only expired records, and a renewal replaces
// only an expired one. But it may change outside it: an operator deletes a
// FAILED record so that it can run again (the runbook), an erasure request
// deletes or blanks records, pgstore's SupersedeTx rewrites an outcome the
// world overturned. So an entry is served only while nothing can have
// changed it unseen:
//
//   - a store that reports such changes ([ChangeWatcher]; pgstore does,
//     from triggers that see manual SQL too, those of its replaycache
//     migration line) has the entry dropped as the
//     change commits, in every executor that caches it. Its report can be
//     late, or its connection can die unnoticed, so entries are served only
//     while the store has confirmed, less than 2×SyncInterval ago, that it
//     has reported every change committed before the confirmation was
//     asked for; past that the cache serves nothing until the next
//     confirmation. Whenever the store may have missed a change (its
//     connection was lost, which pgstore finds out at the latest by a ping
//     unanswered within SyncInterval) the cache forgets everything before
//     it serves again. A change is thus served stale for at most
//     2×SyncInterval after it committed (2s by default), and normally for
//     the time PostgreSQL takes to deliver a notification;
//   - a store that does not report changes (memstore needs not: nothing
//     changes its finished records but expiry) is bounded by MaxAge alone;
//   - whatever the store, an entry is served for at most MaxAge (5s by
//     default) after the read that filled it was sent: a ceiling that also
//     holds should the store's reports stop (a trigger disabled by
//     session_replication_role, a third-party store). An entry past its
//     bound leaves memory about then too, even if nobody asks for it
//     again: nothing of an erased record outlives MaxAge here;
//   - an entry is stored only from a replay the store answered, with the
//     record's remaining life measured on the store's clock (the
//     database's for pgstore) at the read, and counted down on this
//     process's clock from before the read was sent; it is served only
//     until Margin before that end (and never after the wall clock says
//     so either, in case this process was suspended). A read overtaken by
//     a report of its record's change, or by a flush (either arrived while
//     the read was in flight), is not stored;
//   - the request's fingerprint is compared with the entry's in constant
//     time: another fingerprint answers ErrFingerprintMismatch, as the
//     store would for an unexpired record;
//   - entries are per (scope, key): a scope never sees another's;
//   - a store that seals responses (pgstore's Config.Keyring, [Encrypted])
//     is never cached: plaintext responses are not kept in memory;
//   - a request with [Request].NoCache (a route's opt-out) goes to the
//     store, and neither reads nor fills the cache.
//
// Records in progress, expired, or missing are never cached: every claim
// of a new key, a reclaim, an in-progress answer goes to the store.
//
// An executor over a store that reports changes holds a listener while it
// lives (pgstore: one PostgreSQL connection); [Executor.Close] releases it.
type ReplayCache struct {
	// Size bounds how many finished records are kept; the least recently
	// used is evicted. Default 10,000.
	Size int
	// Margin is how long before a record's expiry its entry stops being
	// served: it absorbs the drift between this process's clock rate and
	// the store's. Default 1s; must not be negative.
	Margin time.Duration
	// MaxAge is the longest an entry is served, counted from before the
	// read that filled it was sent, whatever the record's own life: the
	// bound on a stale replay when the store does not report changes, and
	// a ceiling when it does. Default 5s; must not be negative.
	MaxAge time.Duration
	// SyncInterval is how often a store that reports changes confirms that
	// its listener still receives them (pgstore pings the listening
	// connection, and takes a ping unanswered within SyncInterval for a
	// dead connection). Entries are served only while the last
	// confirmation was asked for less than 2×SyncInterval ago: the bound on
	// a stale replay when the listener's connection dies silently.
	// Default 1s; must not be negative.
	SyncInterval time.Duration
	// Clock is this process's clock, counting an entry's life down.
	// Default time.Now. Tests that move the store's clock move this one
	// with it.
	Clock func() time.Time
	// Observe, when set, is told of each change that the store's reports
	// make to the cache (see [ReplayCacheEvent]), synchronously, after the
	// cache has applied it; it must not block. For instrumentation and
	// tests. Default nil.
	Observe func(ReplayCacheEvent)
}

// ReplayCacheEvent is a change that a store's reports made to a replay
// cache (see [ReplayCache].Observe).
type ReplayCacheEvent struct {
	Kind ReplayCacheEventKind
	// Scope and KeySHA256 name the record of a CacheInvalidated event: its
	// scope, and SHA-256 of its key (see [KeySHA256]); never the key.
	Scope, KeySHA256 string
	// Err says why the cache was flushed (CacheFlushed: the store's
	// listener lost its connection; nil when it connected, when a change
	// touched every record, and at Close) or why the store reports no
	// changes (CacheUnwatched).
	Err error
}

// ReplayCacheEventKind says what a [ReplayCacheEvent] did.
type ReplayCacheEventKind int

const (
	// CacheSynced: the store confirmed that it has reported every change
	// committed before the confirmation was asked for; entries may be
	// served until 2×SyncInterval after it was asked for.
	CacheSynced ReplayCacheEventKind = iota + 1
	// CacheInvalidated: a record changed; its entry, if any, is gone.
	CacheInvalidated
	// CacheFlushed: every entry is gone, and none is served until the
	// store next confirms (CacheSynced).
	CacheFlushed
	// CacheUnwatched: the store cannot report changes after all (pgstore
	// behind a transaction pooler without Config.ListenConfig): entries
	// are bounded by MaxAge alone.
	CacheUnwatched
)

func (k ReplayCacheEventKind) String() string {
	switch k {
	case CacheSynced:
		return "synced"
	case CacheInvalidated:
		return "invalidated"
	case CacheFlushed:
		return "flushed"
	case CacheUnwatched:
		return "unwatched"
	}
	return "unknown"
}

// ChangeWatcher is implemented by stores that report, as they commit, the
// changes made to finished records outside the claim path: a record that
// was COMPLETED or FAILED and not expired is deleted, or its status,
// fingerprint, response or expiry is changed. An executor with a
// [ReplayCache] over such a store drops the record's entry when told, so
// that every instance stops replaying it.
type ChangeWatcher interface {
	// WatchChanges reports changes through p until ctx ends, and then
	// returns nil. Its callbacks are called one at a time, from the
	// calling goroutine. It reconnects by itself after a failure: each
	// (re)connection calls OnReset before its first OnSync.
	//
	// It returns at once an error matching errors.ErrUnsupported when the
	// store cannot report changes in its configuration.
	WatchChanges(ctx context.Context, p WatchParams) error
}

// WatchParams are the inputs of [ChangeWatcher.WatchChanges].
type WatchParams struct {
	// SyncInterval is how often the watcher confirms (OnSync) that it
	// still receives every change; an unanswered confirmation within it is
	// a lost connection.
	SyncInterval time.Duration
	// Clock reads the time each confirmation is asked for (OnSync's sent).
	Clock func() time.Time
	// OnChange reports a change to the record of scope whose key's
	// SHA-256 is keySHA256 (see [KeySHA256]).
	OnChange func(scope, keySHA256 string)
	// OnSync reports that every change committed before sent has been
	// reported; sent is Clock's reading before the confirmation was asked
	// for.
	OnSync func(sent time.Time)
	// OnReset reports that changes may have been missed since the last
	// OnSync (err says why: a lost connection), or that a change touched
	// every record (err nil): everything known must be forgotten. Every
	// connection starts with one, err nil.
	OnReset func(err error)
}

// KeySHA256 returns SHA-256 of key in lowercase hex: how a [ChangeWatcher]
// names a record's key (as operator_audit's key_sha256 does). Its first 12
// characters are [ShortHash]'s.
func KeySHA256(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Sealer is implemented by stores that may seal stored responses; the
// replay cache keeps nothing of a store whose Seals reports true.
type Sealer interface {
	Seals() bool
}

func (c *ReplayCache) withDefaults() (ReplayCache, error) {
	out := *c
	switch {
	case out.Size < 0:
		return out, invalid("Config.ReplayCache.Size", "must not be negative, got %d", out.Size)
	case out.Margin < 0:
		return out, invalid("Config.ReplayCache.Margin", "must not be negative, got %s", out.Margin)
	case out.MaxAge < 0:
		return out, invalid("Config.ReplayCache.MaxAge", "must not be negative (0 means 5s), got %s", out.MaxAge)
	case out.SyncInterval < 0:
		return out, invalid("Config.ReplayCache.SyncInterval", "must not be negative (0 means 1s), got %s", out.SyncInterval)
	}
	if out.Size == 0 {
		out.Size = 10_000
	}
	if out.Margin == 0 {
		out.Margin = time.Second
	}
	if out.MaxAge == 0 {
		out.MaxAge = 5 * time.Second
	}
	if out.SyncInterval == 0 {
		out.SyncInterval = time.Second
	}
	if out.Clock == nil {
		out.Clock = time.Now
	}
	return out, nil
}

type cacheKey struct{ scope, key string }

// hashKey names a record as a store's change report does.
type hashKey struct {
	scope string
	sum   [sha256.Size]byte
}

// cached is one finished record as a replay answered it.
type cached struct {
	fp     Fingerprint
	status Status
	resp   Response
	hash   hashKey
	// until is when the entry stops being served, on the monotonic clock
	// (a time with a monotonic reading) and on the wall clock.
	until, untilWall time.Time
}

// queued is an entry in the order it was stored, for the sweep.
type queued struct {
	k cacheKey
	e *cached
}

// changeLog is how many of the latest change reports a cache remembers,
// to tell whether one concerned a read in flight.
const changeLog = 256

type replayCache struct {
	cfg ReplayCache
	// gen grows with every change report and every flush (under mu). A
	// read sent at generation g is not stored when a flush or a report of
	// its record came since: it may hold what changed. changes[x %
	// changeLog] is the record reported at generation x, flushGen the
	// generation of the last flush.
	gen      atomic.Uint64
	changes  [changeLog]hashKey
	flushGen uint64

	mu     sync.Mutex
	lru    *simplelru.LRU[cacheKey, *cached]
	byHash map[hashKey]cacheKey
	// queue holds the entries in the order they were stored; the sweep
	// drops, from its front, those past their end, so that an entry
	// nobody asks for again leaves memory too. An entry's end is at most
	// MaxAge after it was stored, so the queue is nearly in end order.
	queue []queued
	sweep *time.Timer // armed while the queue is not empty
	// watched: a store's reports bound the entries, which are served only
	// until syncedAt (and syncedWall) plus 2×SyncInterval. Zero syncedAt:
	// not confirmed since the last flush.
	watched              bool
	syncedAt, syncedWall time.Time
	closed               bool
}

func newReplayCache(cfg ReplayCache) (*replayCache, error) {
	c := &replayCache{cfg: cfg}
	if err := c.reset(); err != nil {
		return nil, invalid("Config.ReplayCache.Size", "%v", err)
	}
	return c, nil
}

// reset empties the cache (under mu, or before it is shared).
func (c *replayCache) reset() error {
	l, err := simplelru.NewLRU[cacheKey, *cached](c.cfg.Size, func(_ cacheKey, e *cached) {
		delete(c.byHash, e.hash)
	})
	if err != nil {
		return err
	}
	c.lru, c.byHash, c.queue = l, make(map[hashKey]cacheKey), nil
	return nil
}

// generation is read before a claim is sent; put stores its answer only
// if it has not grown since.
func (c *replayCache) generation() uint64 { return c.gen.Load() }

// servingLocked reports whether entries may be served at now. A lapsed
// confirmation stops serving but flushes nothing: the entries are still
// exact if the store's next confirmation comes over the same connection
// (a late one), and a lost connection flushes them (OnReset) before any.
func (c *replayCache) servingLocked(now time.Time) bool {
	switch {
	case c.closed:
		return false
	case !c.watched:
		return true
	case c.syncedAt.IsZero():
		return false
	}
	window := 2 * c.cfg.SyncInterval
	return now.Before(c.syncedAt.Add(window)) && now.Round(0).Before(c.syncedWall.Add(window))
}

// flushLocked forgets every entry and every confirmation.
func (c *replayCache) flushLocked() {
	c.flushGen = c.gen.Add(1)
	c.syncedAt, c.syncedWall = time.Time{}, time.Time{}
	_ = c.reset() // the size was accepted once
}

// get answers req from the cache: a finished record's outcome, or
// ErrFingerprintMismatch. ok is false when the cache holds nothing live
// for req's (scope, key).
func (c *replayCache) get(req Request) (claim Claim, ok bool) {
	k := cacheKey{req.Scope, req.Key}
	now := c.cfg.Clock()
	c.mu.Lock()
	if !c.servingLocked(now) {
		c.mu.Unlock()
		return Claim{}, false
	}
	e, found := c.lru.Get(k)
	if found && (!now.Before(e.until) || !now.Round(0).Before(e.untilWall)) {
		c.lru.Remove(k)
		found = false
	}
	if !found {
		c.mu.Unlock()
		return Claim{}, false
	}
	fp, status := e.fp, e.status
	var resp Response
	mismatch := !fp.Equal(req.Fingerprint)
	if !mismatch {
		resp = cloneResponse(e.resp)
	}
	c.mu.Unlock()
	if mismatch {
		return Claim{State: ClaimMismatch}, true
	}
	return Claim{State: ClaimReplay, Record: Record{Scope: req.Scope, Key: req.Key, Fingerprint: fp,
		Status: status, Response: &resp}}, true
}

// put keeps the record of a replay the store answered; sent is this
// process's clock when the claim was sent, gen the cache's generation
// then.
func (c *replayCache) put(req Request, claim Claim, sent time.Time, gen uint64) {
	rec := claim.Record
	if claim.State != ClaimReplay || rec.Response == nil || claim.StoreNow.IsZero() || rec.ExpiresAt.IsZero() {
		return
	}
	life := min(rec.ExpiresAt.Sub(claim.StoreNow)-c.cfg.Margin, c.cfg.MaxAge)
	if life <= 0 {
		return
	}
	k := cacheKey{req.Scope, req.Key}
	e := &cached{fp: req.Fingerprint, status: rec.Status, resp: cloneResponse(*rec.Response),
		hash:  hashKey{scope: req.Scope, sum: sha256.Sum256([]byte(req.Key))},
		until: sent.Add(life), untilWall: sent.Round(0).Add(life)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.overtakenLocked(e.hash, gen) {
		return // a change report or a flush overtook the read: it may hold what changed
	}
	c.lru.Add(k, e)
	c.byHash[e.hash] = k
	c.queue = append(c.queue, queued{k, e})
	c.sweepLocked(c.cfg.Clock())
}

// overtakenLocked reports whether, since generation gen, the cache was
// flushed or the record named h was reported changed (or so many reports
// came that the log no longer tells).
func (c *replayCache) overtakenLocked(h hashKey, gen uint64) bool {
	cur := c.gen.Load()
	if cur == gen {
		return false
	}
	if c.flushGen > gen || cur-gen > changeLog {
		return true
	}
	for g := gen + 1; g <= cur; g++ {
		if c.changes[g%changeLog] == h {
			return true
		}
	}
	return false
}

// sweepLocked drops the entries at the queue's front that are past their
// end or no longer cached, and arms the sweep for the next one.
func (c *replayCache) sweepLocked(now time.Time) {
	i := 0
	for ; i < len(c.queue); i++ {
		q := c.queue[i]
		if cur, ok := c.lru.Peek(q.k); ok && cur == q.e {
			if now.Before(q.e.until) && now.Round(0).Before(q.e.untilWall) {
				break
			}
			c.lru.Remove(q.k)
		}
	}
	c.queue = c.queue[i:]
	if len(c.queue) == 0 {
		c.queue = nil
		return
	}
	if c.sweep == nil && !c.closed {
		// The real clock's wait: Clock may be a test's, which the
		// timer's next firing reads again.
		c.sweep = time.AfterFunc(max(c.queue[0].e.until.Sub(now), 10*time.Millisecond), func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.sweep = nil
			c.sweepLocked(c.cfg.Clock())
		})
	}
}

// changed drops the entry of the record of scope whose key's SHA-256 is
// keySHA256 (a store's change report).
func (c *replayCache) changed(scope, keySHA256 string) {
	var sum [sha256.Size]byte
	if n, err := hex.Decode(sum[:], []byte(keySHA256)); err != nil || n != len(sum) || len(keySHA256) != 2*len(sum) {
		// A report that names no record is read as "anything changed".
		c.flushed(fmt.Errorf("idempotency: a change report names no record (key hash %q is not 64 hex digits)", keySHA256))
		return
	}
	h := hashKey{scope, sum}
	c.mu.Lock()
	c.changes[c.gen.Add(1)%changeLog] = h
	if k, ok := c.byHash[h]; ok {
		c.lru.Remove(k)
	}
	c.mu.Unlock()
	c.observe(ReplayCacheEvent{Kind: CacheInvalidated, Scope: scope, KeySHA256: keySHA256})
}

// synced records the store's confirmation asked for at sent.
func (c *replayCache) synced(sent time.Time) {
	c.mu.Lock()
	if sent.After(c.syncedAt) {
		c.syncedAt, c.syncedWall = sent, sent.Round(0)
	}
	c.mu.Unlock()
	c.observe(ReplayCacheEvent{Kind: CacheSynced})
}

// flushed forgets everything (err: why, nil for a connection that starts
// or a change to every record).
func (c *replayCache) flushed(err error) {
	c.mu.Lock()
	c.flushLocked()
	c.mu.Unlock()
	c.observe(ReplayCacheEvent{Kind: CacheFlushed, Err: err})
}

// unwatched lets MaxAge alone bound the entries: the store cannot report
// changes (err says why).
func (c *replayCache) unwatched(err error) {
	c.mu.Lock()
	c.watched = false
	c.mu.Unlock()
	c.observe(ReplayCacheEvent{Kind: CacheUnwatched, Err: err})
}

// close forgets everything and serves nothing more.
func (c *replayCache) close() {
	c.mu.Lock()
	c.closed = true
	c.flushLocked()
	if c.sweep != nil {
		c.sweep.Stop()
		c.sweep = nil
	}
	c.mu.Unlock()
	c.observe(ReplayCacheEvent{Kind: CacheFlushed})
}

func (c *replayCache) observe(ev ReplayCacheEvent) {
	if c.cfg.Observe != nil {
		c.cfg.Observe(ev)
	}
}

// watch runs w's reports into the cache until ctx ends (see
// [ChangeWatcher.WatchChanges] for what it returns).
func (c *replayCache) watch(ctx context.Context, w ChangeWatcher) error {
	return w.WatchChanges(ctx, WatchParams{SyncInterval: c.cfg.SyncInterval, Clock: c.cfg.Clock,
		OnChange: c.changed, OnSync: c.synced, OnReset: c.flushed})
}

// cloneResponse copies r, so that neither the caller nor the cache sees
// the other's changes.
func cloneResponse(r Response) Response {
	return Response{Code: r.Code, Header: r.Header.Clone(), Body: bytes.Clone(r.Body)}
}
