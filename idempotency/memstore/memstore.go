package memstore

import (
	"container/heap"
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// DefaultEvictAfter is how long an expired record stays visible when
// [Config.EvictAfter] is zero.
const DefaultEvictAfter = time.Hour

// evictBatch bounds the expired records one operation evicts, so that no
// single call pays for a whole backlog. Every operation evicts up to this
// many while a claim adds at most one record, so eviction keeps up.
const evictBatch = 64

// Config configures a [Store]. The zero value (or a nil *Config) gives the
// defaults.
type Config struct {
	// Clock is the store's clock: every timestamp and every lease and
	// expiry decision uses it. Default time.Now.
	Clock func() time.Time

	// MaxRecords bounds the records the store holds, tombstones included.
	// When it is full, a claim of a new key first deletes one expired
	// record if there is one, and otherwise returns
	// idempotency.ErrStoreFull; a live record (PROCESSING, or
	// COMPLETED/FAILED before its expiry) and a tombstone within its
	// refusal horizon are never evicted. Claims of keys already held are never refused. Default 0:
	// unlimited. New panics if it is negative.
	MaxRecords int

	// EvictAfter is how long an expired COMPLETED or FAILED record is kept
	// before it is evicted automatically. Until then it behaves like a
	// row that pgstore has not pruned yet: a claim renews it
	// (ExpiredIsNew) or refuses it (ExpiredRefused), Get returns it and
	// Prune deletes it. Eviction is a prune that runs EvictAfter late: a
	// record claimed under ExpiredRefused becomes a tombstone, evicted
	// itself EvictAfter after its refusal horizon. Default 0 means
	// DefaultEvictAfter (one hour). A negative value turns automatic
	// eviction off: only Prune deletes, as with pgstore.
	EvictAfter time.Duration
}

// Store is an [idempotency.Store] held in memory. It is safe for
// concurrent use. See the package documentation.
type Store struct {
	clock      func() time.Time
	maxRecords int
	evictAfter time.Duration // < 0: no automatic eviction

	mu      sync.Mutex
	records map[recordID]*entry
	// scopes lists the scopes holding a record of each key, so that a
	// claim with RefuseForeign finds another scope's record directly.
	scopes map[string]map[string]struct{}
	// expiry holds exactly the COMPLETED and FAILED records, tombstones
	// included, that no open transaction has written, the soonest due for
	// a prune first (see entry.due). PROCESSING records never expire, so
	// they are not in it; a record a transaction has written leaves it
	// until the transaction ends, so that no prune takes it meanwhile.
	expiry expiryHeap
	// firstVersion is the lock version of a new record: 0 until a record
	// is deleted, then above every deleted record's version. A key that is
	// deleted and claimed again thus never hands out a fencing token it
	// handed out before, and a holder stalled since then stays fenced off.
	// A rolled-back claim of a new key counts as a deleted record.
	firstVersion int64

	// locks holds the keys that open transactions wrote or fenced (see
	// tx.go); pendingNew counts the new keys they wrote, which count
	// towards MaxRecords from their claim on.
	locks      map[recordID]*keyLock
	pendingNew int
	// waiting counts the calls waiting for a transaction to end (tests
	// watch it).
	waiting int
}

var (
	_ idempotency.Store     = (*Store)(nil)
	_ idempotency.Sizer     = (*Store)(nil)
	_ idempotency.Abandoner = (*Store)(nil)
)

type recordID struct{ scope, key string }

type entry struct {
	rec  idempotency.Record
	slot int // index in Store.expiry, -1 while PROCESSING
	// refuseFor is how long past its expiry the record stays as a
	// tombstone: the claim's ClaimParams.RefuseFor (0 under ExpiredIsNew).
	refuseFor time.Duration
	// issued is the highest lock version handed out for the record,
	// committed or not: a transaction that reclaimed the record and rolled
	// back handed out a version the record never took, which the next
	// claim must not hand out again.
	issued int64
}

// nextVersion is the lock version the record's next holder gets: above
// every version handed out for it.
func (e *entry) nextVersion() int64 { return max(e.rec.LockVersion, e.issued) + 1 }

// clone returns a copy of e, down to its response, outside the expiry heap.
func (e *entry) clone() *entry {
	return &entry{rec: copyRecord(&e.rec), slot: -1, refuseFor: e.refuseFor, issued: e.issued}
}

// due is when a prune next takes the record: at its expiry (to delete it
// or reduce it to a tombstone), or, for a tombstone, at the end of its
// refusal horizon (to delete it).
func (e *entry) due() time.Time {
	if !e.rec.RefuseUntil.IsZero() {
		return e.rec.RefuseUntil
	}
	return e.rec.ExpiresAt
}

// New returns an empty store. A nil cfg means the defaults.
func New(cfg *Config) *Store {
	if cfg == nil {
		cfg = &Config{}
	}
	if cfg.MaxRecords < 0 {
		panic(&idempotency.InvalidError{Field: "MaxRecords", Reason: "negative; use 0 for unlimited"})
	}
	s := &Store{
		clock:      cfg.Clock,
		maxRecords: cfg.MaxRecords,
		evictAfter: cfg.EvictAfter,
		records:    make(map[recordID]*entry),
		scopes:     make(map[string]map[string]struct{}),
		locks:      make(map[recordID]*keyLock),
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.evictAfter == 0 {
		s.evictAfter = DefaultEvictAfter
	}
	return s
}

// Claim implements [idempotency.Store.Claim]. A new key gets a PROCESSING
// record at lock version 0 (once records have been pruned or evicted: above
// every deleted record's version, so tokens never repeat). An existing
// record is decided in this order:
//
//   - COMPLETED or FAILED and expired (expires at or before now), or a
//     tombstone: per p.Expired, renewed as a new PROCESSING record with
//     p's fingerprint and the next lock version (ClaimAcquired), or
//     refused (ClaimExpired). An expired record is never replayed.
//   - another fingerprint (compared in constant time): ClaimMismatch; the
//     record is untouched and nothing of it is returned.
//   - COMPLETED or FAILED: ClaimReplay with a copy of the record.
//   - PROCESSING with a live lease: ClaimInProgress with the time left.
//   - PROCESSING with an ended lease (orphaned or released):
//     ClaimReclaimed with the next lock version.
//
// The record decided on is the committed one. A claim that would write it
// (create, renew or reclaim it) while an open transaction holds its key
// waits for that transaction to end, then decides again on what it
// committed; a claim that only reads it does not wait (see the package
// documentation, Transactions).
//
// Errors: an *idempotency.InvalidError naming the field of p that is
// bad; idempotency.ErrStoreFull when MaxRecords is reached and the key is
// new; ctx.Err() if ctx is done, wrapped when it ended the wait for a
// transaction. On error nothing changes.
func (s *Store) Claim(ctx context.Context, p idempotency.ClaimParams) (idempotency.Claim, error) {
	return s.claim(ctx, nil, p)
}

// claim is Claim, or ClaimTx when tx is not nil: one decision (claimOn),
// written to the store or staged in tx.
func (s *Store) claim(ctx context.Context, tx *Tx, p idempotency.ClaimParams) (idempotency.Claim, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.Claim{}, err
	}
	if err := p.Validate(); err != nil {
		return idempotency.Claim{}, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if err := tx.open(); err != nil {
		return idempotency.Claim{}, err
	}
	id := recordID{p.Scope, p.Key}
	for {
		now := s.clock()
		s.evict(now)
		cur := s.view(tx, id)
		if cur == nil && p.RefuseForeign && s.foreign(tx, p.Scope, p.Key, now) {
			return idempotency.Claim{State: idempotency.ClaimForeign}, nil
		}
		c, next := claimOn(p, now, cur, s.firstVersion)
		if next == nil {
			return c, nil
		}
		if waited, err := s.waitFor(ctx, tx, id, false); err != nil {
			return idempotency.Claim{}, err
		} else if waited {
			continue
		}
		if cur == nil && !s.makeRoom(now) {
			return idempotency.Claim{}, idempotency.ErrStoreFull
		}
		s.write(tx, id, next)
		return c, nil
	}
}

// claimOn decides a claim of p at now on cur, the record as the claimer
// sees it (nil: none), in the order [Store.Claim] lists. It returns the
// claim and, when the claim writes the record, the record's new value
// (nil when the claim only reads it).
func claimOn(p idempotency.ClaimParams, now time.Time, cur *entry, firstVersion int64) (idempotency.Claim, *entry) {
	if cur == nil {
		next := &entry{slot: -1, rec: fresh(p, now, firstVersion), refuseFor: p.RefuseFor()}
		return acquired(idempotency.ClaimAcquired, &next.rec), next
	}
	r := &cur.rec
	if r.Status != idempotency.StatusProcessing && (!now.Before(r.ExpiresAt) || !r.RefuseUntil.IsZero()) {
		if p.Expired == idempotency.ExpiredRefused {
			return idempotency.Claim{State: idempotency.ClaimExpired}, nil
		}
		// The version keeps growing across renewals, so a lease of the
		// expired record can never act on the new one.
		next := &entry{slot: -1, rec: fresh(p, now, cur.nextVersion()), refuseFor: p.RefuseFor(), issued: cur.issued}
		return acquired(idempotency.ClaimAcquired, &next.rec), next
	}
	if !r.Fingerprint.Equal(p.Fingerprint) {
		return idempotency.Claim{State: idempotency.ClaimMismatch}, nil
	}
	switch {
	case r.Status != idempotency.StatusProcessing:
		return idempotency.Claim{State: idempotency.ClaimReplay, Record: copyRecord(r), StoreNow: now}, nil
	case r.LockedUntil.After(now):
		return idempotency.Claim{
			State:      idempotency.ClaimInProgress,
			Record:     copyRecord(r),
			RetryAfter: r.LockedUntil.Sub(now),
		}, nil
	default:
		// ExpiresAt stays: a PROCESSING record does not expire, and
		// Complete sets the expiry of the outcome.
		next := cur.clone()
		next.rec.LockVersion = cur.nextVersion()
		next.rec.LockedUntil = now.Add(p.LockTimeout)
		return acquired(idempotency.ClaimReclaimed, &next.rec), next
	}
}

// Complete implements [idempotency.Store.Complete]. The lease need not be
// live: a holder whose lease ran out may still complete as long as nobody
// reclaimed the record, which is what the fencing token is for. While an
// open transaction holds the record's key, it waits for the transaction
// to end, then looks again.
//
// Errors: idempotency.ErrLeaseLost when the record is absent, not
// PROCESSING, or at another lock version (a lease no store issued, such as
// the zero Lease, is simply lost); an *idempotency.InvalidError naming
// Completion.Status (not COMPLETED or FAILED) or Completion.Retention (not
// positive); ctx.Err() if ctx is done, wrapped when it ended the wait for
// a transaction. On error nothing changes.
func (s *Store) Complete(ctx context.Context, l idempotency.Lease, c idempotency.Completion) error {
	return s.complete(ctx, nil, l, c)
}

// complete is Complete, or CompleteTx when tx is not nil.
func (s *Store) complete(ctx context.Context, tx *Tx, l idempotency.Lease, c idempotency.Completion) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validCompletion(c); err != nil {
		return err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if err := tx.open(); err != nil {
		return err
	}
	id := recordID{l.Scope, l.Key}
	for {
		now := s.clock()
		s.evict(now)
		cur := s.view(tx, id)
		if !holds(cur, l) {
			return idempotency.ErrLeaseLost
		}
		if waited, err := s.waitFor(ctx, tx, id, false); err != nil {
			return err
		} else if waited {
			continue
		}
		next := cur.clone()
		resp := copyResponse(c.Response)
		next.rec.Status = c.Status
		next.rec.Response = &resp
		next.rec.CompletedAt = now
		next.rec.LockedUntil = time.Time{}
		next.rec.ExpiresAt = now.Add(c.Retention)
		s.write(tx, id, next)
		return nil
	}
}

func validCompletion(c idempotency.Completion) error {
	if c.Status != idempotency.StatusCompleted && c.Status != idempotency.StatusFailed {
		return &idempotency.InvalidError{Field: "Completion.Status", Reason: "must be COMPLETED or FAILED, got " + strconv.Quote(string(c.Status))}
	}
	if c.Retention <= 0 {
		return &idempotency.InvalidError{Field: "Completion.Retention", Reason: "must be positive, got " + c.Retention.String()}
	}
	return nil
}

// Release implements [idempotency.Store.Release]: the lease ends now and
// the record stays PROCESSING, so the next claim reclaims it. While an
// open transaction holds the record's key, it waits for the transaction
// to end, then looks again.
//
// Errors: idempotency.ErrLeaseLost as for [Store.Complete]; ctx.Err() if
// ctx is done, wrapped when it ended the wait for a transaction. On error
// nothing changes.
func (s *Store) Release(ctx context.Context, l idempotency.Lease) error {
	return s.onHeld(ctx, l, func(e *entry) { e.rec.LockedUntil = s.clock() })
}

// Abandon implements [idempotency.Abandoner]: the PROCESSING record held
// by l is deleted, as if never claimed.
//
// Errors: as for [Store.Release].
func (s *Store) Abandon(ctx context.Context, l idempotency.Lease) error {
	return s.onHeld(ctx, l, s.delete) // PROCESSING records are not in the expiry heap
}

// Heartbeat implements [idempotency.Store.Heartbeat]: the lease ends d
// from now.
//
// Errors: as for [Store.Release], and an *idempotency.InvalidError naming
// d when d is not positive.
func (s *Store) Heartbeat(ctx context.Context, l idempotency.Lease, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return &idempotency.InvalidError{Field: "d", Reason: "heartbeat extension must be positive, got " + d.String()}
	}
	return s.onHeld(ctx, l, func(e *entry) { e.rec.LockedUntil = s.clock().Add(d) })
}

// Get implements [idempotency.Store.Get]. It returns a copy: changing it
// does not change the store. It returns the committed record and never
// waits: what an open transaction wrote is not seen until it commits. An expired record not yet pruned or evicted
// is returned as it is; its ExpiresAt tells. A tombstone is returned
// without its Response, with RefuseUntil set.
//
// Errors: idempotency.ErrNotFound; ctx.Err() if ctx is done.
func (s *Store) Get(ctx context.Context, scope, key string) (idempotency.Record, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.Record{}, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.evict(s.clock())

	e, ok := s.records[recordID{scope, key}]
	if !ok {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	return copyRecord(&e.rec), nil
}

// Prune implements [idempotency.Store.Prune], soonest due first: expired
// records are deleted, or reduced to tombstones (their response dropped)
// when claimed under ExpiredRefused and their refusal horizon has not
// passed; tombstones past it are deleted. It counts every record it
// deletes or reduces, whether or not automatic eviction would have taken
// it later.
//
// Errors: an *idempotency.InvalidError when limit is not positive;
// ctx.Err() if ctx is done.
func (s *Store) Prune(ctx context.Context, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if limit <= 0 {
		return 0, &idempotency.InvalidError{Field: "limit", Reason: "must be positive"}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prune(s.clock(), limit), nil
}

// Len returns how many records the store holds, including expired ones
// not yet pruned or evicted: the value of the idempotency.store_size
// gauge.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// ApproxSize is Len, exact; it implements [idempotency.Sizer].
func (s *Store) ApproxSize(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return int64(s.Len()), nil
}

// holds reports whether l may act on e: e is present, PROCESSING and at
// l's version. Whether the lease's time has run out does not matter.
func holds(e *entry, l idempotency.Lease) bool {
	return e != nil && e.rec.Status == idempotency.StatusProcessing && e.rec.LockVersion == l.Version
}

// onHeld makes change to the committed entry that l may act on (see
// held), under the store's lock. Errors: idempotency.ErrLeaseLost;
// ctx.Err() if ctx is done, wrapped when it ended the wait for a
// transaction. On error nothing changes.
func (s *Store) onHeld(ctx context.Context, l idempotency.Lease, change func(*entry)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.held(ctx, l)
	if err != nil {
		return err
	}
	change(e)
	return nil
}

// held returns the committed entry that l may act on, once no open
// transaction holds its key (waiting for the one that does), after
// evicting what is due.
func (s *Store) held(ctx context.Context, l idempotency.Lease) (*entry, error) {
	id := recordID{l.Scope, l.Key}
	for {
		s.evict(s.clock())
		e := s.records[id]
		if !holds(e, l) {
			return nil, idempotency.ErrLeaseLost
		}
		if waited, err := s.waitFor(ctx, nil, id, false); err != nil {
			return nil, err
		} else if !waited {
			return e, nil
		}
	}
}

// put makes next the record of id in the store, the expiry heap and the
// scopes index kept up to date: the one way a claim or a completion, made
// directly or committed by a transaction, and a supersession change a
// record.
func (s *Store) put(id recordID, next *entry) {
	e := s.records[id]
	switch {
	case e == nil:
		e = &entry{slot: -1}
		s.records[id] = e
		if s.scopes[id.key] == nil {
			s.scopes[id.key] = map[string]struct{}{}
		}
		s.scopes[id.key][id.scope] = struct{}{}
	case e.slot >= 0:
		heap.Remove(&s.expiry, e.slot)
	}
	e.rec, e.refuseFor, e.issued = next.rec, next.refuseFor, next.issued
	if e.rec.Status != idempotency.StatusProcessing {
		heap.Push(&s.expiry, e)
	}
}

// prune takes at most limit records due at or before now and returns how
// many it took: a record that expired is deleted, or becomes a tombstone
// when its refusal horizon has not passed by now (it is then due again at
// the horizon's end, after now); a tombstone is deleted.
func (s *Store) prune(now time.Time, limit int) int {
	n := 0
	for n < limit && len(s.expiry) > 0 && !s.expiry[0].due().After(now) {
		e := s.expiry[0]
		n++
		if until := e.rec.ExpiresAt.Add(e.refuseFor); e.rec.RefuseUntil.IsZero() && until.After(now) {
			e.rec.Response = nil
			e.rec.RefuseUntil = until
			heap.Fix(&s.expiry, 0)
			continue
		}
		heap.Pop(&s.expiry)
		s.delete(e)
	}
	return n
}

// makeRoom reports whether a new record fits: MaxRecords is not reached,
// counting the new keys of open transactions, or a due record could be
// deleted. A tombstone within its horizon is
// kept whatever the bound, as a live record is: it still refuses its key.
// Reducing records to tombstones frees nothing, so it goes on past them,
// evictBatch records at most.
func (s *Store) makeRoom(now time.Time) bool {
	fits := func() bool { return s.maxRecords == 0 || len(s.records)+s.pendingNew < s.maxRecords }
	for range evictBatch {
		if fits() {
			return true
		}
		if s.prune(now, 1) == 0 {
			return false
		}
	}
	return fits()
}

// evict deletes, a bounded batch at a time, the records that expired at
// least evictAfter ago.
func (s *Store) evict(now time.Time) {
	if s.evictAfter < 0 {
		return
	}
	s.prune(now.Add(-s.evictAfter), evictBatch)
}

// foreign reports whether another scope holds a live record of key, as
// tx sees the records (nil: the committed ones).
func (s *Store) foreign(tx *Tx, scope, key string, now time.Time) bool {
	live := func(e *entry) bool {
		return e != nil && (e.rec.Status == idempotency.StatusProcessing || now.Before(e.rec.ExpiresAt))
	}
	for other := range s.scopes[key] {
		if other != scope && live(s.view(tx, recordID{other, key})) {
			return true
		}
	}
	if tx != nil {
		for id, e := range tx.staged {
			if id.key == key && id.scope != scope && live(e) {
				return true
			}
		}
	}
	return false
}

func (s *Store) delete(e *entry) {
	delete(s.records, recordID{e.rec.Scope, e.rec.Key})
	if set := s.scopes[e.rec.Key]; set != nil {
		delete(set, e.rec.Scope)
		if len(set) == 0 {
			delete(s.scopes, e.rec.Key)
		}
	}
	s.firstVersion = max(s.firstVersion, e.nextVersion())
}

func fresh(p idempotency.ClaimParams, now time.Time, version int64) idempotency.Record {
	return idempotency.Record{
		Scope:       p.Scope,
		Key:         p.Key,
		Fingerprint: p.Fingerprint,
		Status:      idempotency.StatusProcessing,
		LockVersion: version,
		LockedUntil: now.Add(p.LockTimeout),
		CreatedAt:   now,
		ExpiresAt:   now.Add(p.Retention),
	}
}

func acquired(state idempotency.ClaimState, r *idempotency.Record) idempotency.Claim {
	return idempotency.Claim{
		State: state,
		Lease: idempotency.Lease{Scope: r.Scope, Key: r.Key, Version: r.LockVersion},
	}
}

func copyRecord(r *idempotency.Record) idempotency.Record {
	c := *r
	if r.Response != nil {
		resp := copyResponse(*r.Response)
		c.Response = &resp
	}
	return c
}

func copyResponse(r idempotency.Response) idempotency.Response {
	c := idempotency.Response{Code: r.Code, Body: append([]byte{}, r.Body...)}
	if len(r.Header) > 0 {
		c.Header = r.Header.Clone()
	}
	return c
}

// expiryHeap is a min-heap of entries by due time (ExpiresAt, RefuseUntil
// for a tombstone) that keeps each entry's slot up to date, so a record
// leaving COMPLETED/FAILED (renewed after expiry) is removed in O(log n).
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].due().Before(h[j].due()) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].slot = i
	h[j].slot = j
}

func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.slot = len(*h)
	*h = append(*h, e)
}

func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.slot = -1
	return e
}
