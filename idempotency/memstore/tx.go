package memstore

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/payonce/payonce/idempotency"
)

var _ idempotency.TxStore[*Tx] = (*Store)(nil)

var (
	// ErrTxClosed is returned by a call on a transaction that was
	// committed or rolled back (pgx's ErrTxClosed).
	ErrTxClosed = errors.New("memstore: transaction already committed or rolled back")
	// ErrTxAborted is returned by a call on a transaction that an error
	// aborted (a deadlock, a context that ended while it waited): its
	// writes are discarded and its keys released; Rollback ends it, Commit
	// ends it with this error.
	ErrTxAborted = errors.New("memstore: transaction aborted; roll it back")
	// ErrDeadlock is returned by the call that would have closed a cycle of
	// transactions each waiting for a key another one holds; that call's
	// transaction is aborted, so that the others go on (PostgreSQL's
	// deadlock_detected). Take keys in one order to avoid it.
	ErrDeadlock = errors.New("memstore: deadlock: the transaction waited for a key held by a transaction that waits for one of its own")
)

// Tx is a transaction of a [Store], begun by [Store.Begin], for the *Tx
// methods of [idempotency.TxStore] and the caller's own writes
// ([Tx.OnCommit]). What it writes is its own until it commits: see the
// package documentation, Transactions. It is usable only with the store
// that began it. Like pgx.Tx, it is meant for one goroutine at a time;
// calls from several are safe but serialised.
type Tx struct {
	store *Store
	// done is closed when the transaction ends (commit, rollback or
	// abort) and releases its keys: the calls waiting for them look again.
	done chan struct{}

	// The fields below are guarded by store.mu.
	state txState
	cause error // why the transaction was aborted
	// staged holds the records the transaction wrote, as it wrote them;
	// it holds their keys against every other write and fence.
	staged map[recordID]*entry
	// fenced holds the keys it fenced (FenceTx) without writing them: no
	// other transaction and no direct call may write them meanwhile.
	fenced map[recordID]struct{}
	// waitingFor is the transaction it waits for, while it waits: the
	// edges that deadlock detection follows.
	waitingFor *Tx
	onCommit   []func()
}

type txState int

const (
	txOpen txState = iota
	txAborted
	txClosed
)

// keyLock is what open transactions hold of a key: the one that wrote its
// record, and those that fenced it. Fences share the key with one another
// (PostgreSQL's FOR SHARE); a write excludes everyone else.
type keyLock struct {
	writer  *Tx
	fencers map[*Tx]struct{}
}

// Begin starts a transaction ([idempotency.TxStore.Begin]). It holds
// nothing until its first write or fence.
//
// Errors: ctx.Err() if ctx is done.
func (s *Store) Begin(ctx context.Context) (*Tx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &Tx{
		store:  s,
		done:   make(chan struct{}),
		staged: make(map[recordID]*entry),
		fenced: make(map[recordID]struct{}),
	}, nil
}

// Commit applies the transaction's records to the store, as the direct
// calls would have (expiry, eviction, scopes and MaxRecords alike), then
// runs its OnCommit functions, then releases its keys to the calls waiting
// for them. ctx is only checked first: a done ctx rolls the transaction
// back, as a COMMIT that could not be sent leaves PostgreSQL's rolled back.
//
// Errors: ErrTxClosed when it has ended; an error matching ErrTxAborted
// when an error aborted it (it is then ended, nothing committed); ctx's
// error, wrapped, when ctx is done (rolled back); an
// *idempotency.InvalidError naming tx when it was not begun by
// [Store.Begin].
func (tx *Tx) Commit(ctx context.Context) error {
	if tx == nil || tx.store == nil {
		return errNotBegun
	}
	s := tx.store
	s.mu.Lock()
	if err := tx.open(); err != nil {
		if tx.state == txAborted {
			tx.state = txClosed
		}
		s.mu.Unlock()
		return err
	}
	if err := ctx.Err(); err != nil {
		s.end(tx, txClosed)
		s.mu.Unlock()
		return fmt.Errorf("memstore: commit: %w (the transaction was rolled back)", err)
	}
	for id, next := range tx.staged {
		if s.records[id] == nil {
			s.pendingNew--
		}
		s.put(id, next)
	}
	tx.state = txClosed
	fns := tx.onCommit
	tx.onCommit = nil
	s.mu.Unlock()

	// The keys are released after the functions, even if one panics: a
	// claim that waited for them finds the caller's writes done.
	defer func() {
		s.mu.Lock()
		s.release(tx)
		s.mu.Unlock()
	}()
	for _, f := range fns {
		f()
	}
	return nil
}

// Rollback discards the transaction's writes and releases its keys: a
// claim that waited for one of them then acts as if the transaction had
// never written it (a new key's claimer acquires it). The OnCommit
// functions never run. ctx is not used: a rollback cannot fail.
//
// Errors: ErrTxClosed when it has ended (committed or rolled back); nil
// for a transaction an error aborted, which it ends; an
// *idempotency.InvalidError naming tx when it was not begun by
// [Store.Begin].
func (tx *Tx) Rollback(context.Context) error {
	if tx == nil || tx.store == nil {
		return errNotBegun
	}
	s := tx.store
	s.mu.Lock()
	defer s.mu.Unlock()
	switch tx.state {
	case txClosed:
		return ErrTxClosed
	case txAborted:
		tx.state = txClosed
		return nil
	}
	s.end(tx, txClosed)
	return nil
}

// OnCommit adds f to the functions that run, in the order they were
// added, when the transaction commits: after its records are applied to
// the store and before its keys are released to the claims waiting for
// them, with no lock of the store held (f may call the store, but must not
// write the transaction's own keys: that call would wait for the
// transaction's end, which waits for f). It is how a test's own writes
// commit with the records; they never run after a rollback or an abort.
// A panic of f propagates from Commit, the records committed and the
// later functions not run. On a transaction that has ended or was
// aborted, or with a nil f, OnCommit does nothing.
func (tx *Tx) OnCommit(f func()) {
	if tx == nil || tx.store == nil || f == nil {
		return
	}
	tx.store.mu.Lock()
	defer tx.store.mu.Unlock()
	if tx.state == txOpen {
		tx.onCommit = append(tx.onCommit, f)
	}
}

// ClaimTx is [Store.Claim] inside tx ([idempotency.TxStore.ClaimTx]). A
// claim that creates, renews or reclaims the record holds its key until tx
// ends; the new record is tx's own until tx commits. tx sees its own
// writes: a second claim in tx of a key it claimed reports its live lease
// (ClaimInProgress), of a key it completed replays the outcome.
//
// Errors: those of [Store.Claim]; an *idempotency.InvalidError naming tx
// when it is nil or another store's; ErrTxClosed, or an error matching
// ErrTxAborted, when tx can no longer be used; ErrDeadlock when waiting
// would close a cycle (tx is then aborted). A ctx that ends while the claim
// waits aborts tx.
func (s *Store) ClaimTx(ctx context.Context, tx *Tx, p idempotency.ClaimParams) (idempotency.Claim, error) {
	if err := s.checkTx(tx); err != nil {
		return idempotency.Claim{}, err
	}
	return s.claim(ctx, tx, p)
}

// CompleteTx is [Store.Complete] inside tx
// ([idempotency.TxStore.CompleteTx]): the outcome is the store's when tx
// commits, and its key is held until then.
//
// Errors: those of [Store.Complete] (idempotency.ErrLeaseLost, changing
// nothing, when l is not the current lease as tx sees the record; tx
// should then be rolled back), and those of the transaction as for
// [Store.ClaimTx].
func (s *Store) CompleteTx(ctx context.Context, tx *Tx, l idempotency.Lease, c idempotency.Completion) error {
	if err := s.checkTx(tx); err != nil {
		return err
	}
	return s.complete(ctx, tx, l, c)
}

// FenceTx checks in tx that l still holds its record's lease (the record,
// as tx sees it, PROCESSING under l's lock version) and holds the key
// until tx ends ([idempotency.TxStore.FenceTx]): no claim, completion,
// release, heartbeat or abandonment by anyone else changes the record
// before tx commits or rolls back; they wait. Fences of other transactions
// are not blocked (PostgreSQL's FOR SHARE); a write by another transaction
// is waited for, then the lease checked again.
//
// Errors: idempotency.ErrLeaseLost when the lease was lost (the record was
// reclaimed, completed, superseded, released or abandoned, or never
// existed); tx should then be rolled back. Those of the transaction and
// ctx as for [Store.ClaimTx].
func (s *Store) FenceTx(ctx context.Context, tx *Tx, l idempotency.Lease) error {
	if err := s.checkTx(tx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := tx.open(); err != nil {
		return err
	}
	id := recordID{l.Scope, l.Key}
	for {
		s.evict(s.clock())
		if !holds(s.view(tx, id), l) {
			return idempotency.ErrLeaseLost
		}
		if _, own := tx.staged[id]; own {
			return nil // tx wrote it: no one else can
		}
		if waited, err := s.waitFor(ctx, tx, id, true); err != nil {
			return err
		} else if waited {
			continue
		}
		s.lockOf(id).fencers[tx] = struct{}{}
		tx.fenced[id] = struct{}{}
		return nil
	}
}

// SupersedeTx replaces inside tx the outcome of the record of (scope, key)
// with c ([idempotency.TxStore.SupersedeTx]), when the record, as tx sees
// it, is PROCESSING, or COMPLETED or FAILED and not expired (a tombstone
// counts as expired). The fingerprint is kept; the lock version grows, so
// its holder's lease is lost. The key is held until tx ends. It reports
// whether a record was replaced: false, changing nothing, when there is
// none or it expired (an expired record is never revived).
//
// Errors: an *idempotency.InvalidError naming the bad scope, key,
// Completion.Status or Completion.Retention; those of the transaction and
// ctx as for [Store.ClaimTx].
func (s *Store) SupersedeTx(ctx context.Context, tx *Tx, scope, key string, c idempotency.Completion) (bool, error) {
	if err := s.checkTx(tx); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := idempotency.ValidateScope(scope); err != nil {
		return false, err
	}
	if err := idempotency.ValidateKey(key); err != nil {
		return false, err
	}
	if err := validCompletion(c); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := tx.open(); err != nil {
		return false, err
	}
	id := recordID{scope, key}
	for {
		now := s.clock()
		s.evict(now)
		cur := s.view(tx, id)
		if cur == nil || cur.rec.Status != idempotency.StatusProcessing &&
			(!now.Before(cur.rec.ExpiresAt) || !cur.rec.RefuseUntil.IsZero()) {
			return false, nil
		}
		if waited, err := s.waitFor(ctx, tx, id, false); err != nil {
			return false, err
		} else if waited {
			continue
		}
		next := cur.clone()
		resp := copyResponse(c.Response)
		next.rec.Status = c.Status
		next.rec.Response = &resp
		next.rec.LockVersion = cur.nextVersion()
		next.rec.LockedUntil = time.Time{}
		next.rec.CompletedAt = now
		next.rec.ExpiresAt = now.Add(c.Retention)
		s.write(tx, id, next)
		return true, nil
	}
}

// RunTx claims p in a new transaction and, when the claim is acquired or
// reclaimed, runs fn in it, records the completion fn returns and commits
// ([idempotency.TxStore.RunTx]). Any other claim is returned as it is, the
// transaction rolled back and fn not run. An error of fn, of the
// completion or of the commit is returned with the claim, everything
// rolled back (the claim included); so is a panic of fn, which propagates.
// A concurrent claim of a new key waits for the commit and then replays
// the outcome.
//
// Errors: those of [Store.ClaimTx], fn's, those of [Store.CompleteTx]
// and [Tx.Commit]; an *idempotency.InvalidError naming fn when it is nil.
func (s *Store) RunTx(ctx context.Context, p idempotency.ClaimParams,
	fn func(ctx context.Context, tx *Tx, l idempotency.Lease) (idempotency.Completion, error)) (idempotency.Claim, error) {
	if err := p.Validate(); err != nil {
		return idempotency.Claim{}, err
	}
	if fn == nil {
		return idempotency.Claim{}, &idempotency.InvalidError{Field: "fn", Reason: "must not be nil"}
	}
	tx, err := s.Begin(ctx)
	if err != nil {
		return idempotency.Claim{}, err
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback(ctx)
		}
	}()
	c, err := s.ClaimTx(ctx, tx, p)
	if err != nil {
		return idempotency.Claim{}, err
	}
	if c.State != idempotency.ClaimAcquired && c.State != idempotency.ClaimReclaimed {
		return c, nil
	}
	done, err := fn(ctx, tx, c.Lease)
	if err != nil {
		return c, err
	}
	if err := s.CompleteTx(ctx, tx, c.Lease, done); err != nil {
		return c, err
	}
	committed = true // a failed commit ends the transaction too
	if err := tx.Commit(ctx); err != nil {
		return c, err
	}
	return c, nil
}

// Leases reads the committed leases of the named records, with the store's
// clock beside each ([idempotency.TxStore.Leases]). A record that does not
// exist, or exists only in an open transaction, is absent from the map. It
// never waits.
//
// Errors: ctx.Err() if ctx is done.
func (s *Store) Leases(ctx context.Context, refs []idempotency.RecordRef) (map[idempotency.RecordRef]idempotency.LeaseState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make(map[idempotency.RecordRef]idempotency.LeaseState, len(refs))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	s.evict(now)
	for _, ref := range refs {
		e := s.records[recordID{ref.Scope, ref.Key}]
		if e == nil {
			continue
		}
		l := idempotency.LeaseState{
			Scope: ref.Scope, Key: ref.Key,
			Status:      e.rec.Status,
			LockVersion: e.rec.LockVersion,
			CreatedAt:   e.rec.CreatedAt,
			DatabaseNow: now,
		}
		if !e.rec.LockedUntil.IsZero() {
			until := e.rec.LockedUntil
			l.LockedUntil = &until
		}
		out[ref] = l
	}
	return out, nil
}

var errNotBegun = &idempotency.InvalidError{Field: "tx", Reason: "not a transaction begun by memstore.Store.Begin"}

// checkTx checks that tx is one of s's.
func (s *Store) checkTx(tx *Tx) error {
	switch {
	case tx == nil || tx.store == nil:
		return errNotBegun
	case tx.store != s:
		return &idempotency.InvalidError{Field: "tx", Reason: "begun by another memstore.Store; a transaction is usable only with its own store"}
	}
	return nil
}

// open reports whether tx may be used, under its store's mutex. A nil tx
// (a direct call, no transaction) may.
func (tx *Tx) open() error {
	if tx == nil {
		return nil
	}
	switch tx.state {
	case txClosed:
		return ErrTxClosed
	case txAborted:
		return fmt.Errorf("%w: %w", ErrTxAborted, tx.cause)
	}
	return nil
}

// view returns the record of id as tx sees it (nil: none): its own write,
// else the committed record. A nil tx sees the committed records.
func (s *Store) view(tx *Tx, id recordID) *entry {
	if tx != nil {
		if e, ok := tx.staged[id]; ok {
			return e
		}
	}
	return s.records[id]
}

// write makes next the record of id: in the store at once without a
// transaction, else staged in tx, which then holds the key until it ends.
// A committed record that tx writes leaves the expiry heap meanwhile, so
// that no prune or eviction takes it from under tx; a new key counts
// towards MaxRecords from now on.
func (s *Store) write(tx *Tx, id recordID, next *entry) {
	if tx == nil {
		s.put(id, next)
		return
	}
	if _, ok := tx.staged[id]; !ok {
		s.lockOf(id).writer = tx
		if e := s.records[id]; e == nil {
			s.pendingNew++
		} else if e.slot >= 0 {
			heap.Remove(&s.expiry, e.slot)
		}
	}
	tx.staged[id] = next
}

func (s *Store) lockOf(id recordID) *keyLock {
	lk := s.locks[id]
	if lk == nil {
		lk = &keyLock{fencers: map[*Tx]struct{}{}}
		s.locks[id] = lk
	}
	return lk
}

// blocker returns an open transaction other than tx that holds id against
// a write (any writer or fencer), or against a fence (a writer); nil when
// there is none.
func (s *Store) blocker(tx *Tx, id recordID, fence bool) *Tx {
	lk := s.locks[id]
	if lk == nil {
		return nil
	}
	if lk.writer != nil && lk.writer != tx {
		return lk.writer
	}
	if !fence {
		for f := range lk.fencers {
			if f != tx {
				return f
			}
		}
	}
	return nil
}

// waitFor waits, when a transaction other than tx holds id against the
// caller's write (or fence), for that transaction to end, and reports
// whether it waited: the caller then looks at the record again. It
// releases s.mu while it waits. A wait that would close a cycle of
// transactions fails at once with ErrDeadlock, and a ctx that ends first
// fails it with ctx's error; either aborts tx. A direct call (tx nil) that
// waits for a transaction its own goroutine holds waits until ctx ends.
func (s *Store) waitFor(ctx context.Context, tx *Tx, id recordID, fence bool) (bool, error) {
	on := s.blocker(tx, id, fence)
	if on == nil {
		return false, nil
	}
	if tx != nil {
		for t := on; t != nil; t = t.waitingFor {
			if t == tx {
				s.abort(tx, ErrDeadlock)
				return false, fmt.Errorf("%w (the transaction was aborted; roll it back)", ErrDeadlock)
			}
		}
		tx.waitingFor = on
	}
	s.waiting++
	s.mu.Unlock()
	select {
	case <-on.done:
	case <-ctx.Done():
	}
	s.mu.Lock()
	s.waiting--
	if tx != nil {
		tx.waitingFor = nil
	}
	select {
	case <-on.done:
	default:
		err := fmt.Errorf("memstore: waiting for a key another transaction holds: %w", ctx.Err())
		if tx != nil && tx.state == txOpen {
			s.abort(tx, err)
			err = fmt.Errorf("%w (the transaction was aborted; roll it back)", err)
		}
		return false, err
	}
	if err := tx.open(); err != nil { // rolled back meanwhile by another goroutine
		return false, err
	}
	return true, nil
}

// abort ends tx on an error: its writes are discarded and its keys
// released at once (as PostgreSQL does); it stays to be rolled back.
func (s *Store) abort(tx *Tx, cause error) {
	s.end(tx, txAborted)
	tx.cause = cause
}

// end discards tx's writes, releases its keys and puts it in state.
func (s *Store) end(tx *Tx, state txState) {
	for id, st := range tx.staged {
		e := s.records[id]
		if e == nil {
			// A rolled-back new record counts as a deleted one: its
			// versions are never handed out again.
			s.pendingNew--
			s.firstVersion = max(s.firstVersion, st.nextVersion())
			continue
		}
		e.issued = max(e.issued, st.rec.LockVersion, st.issued)
		if e.rec.Status != idempotency.StatusProcessing && e.slot < 0 {
			heap.Push(&s.expiry, e)
		}
	}
	tx.state = state
	tx.onCommit = nil
	s.release(tx)
}

// release drops tx's hold on its keys and wakes the calls waiting for
// them.
func (s *Store) release(tx *Tx) {
	drop := func(id recordID, lk *keyLock) {
		if lk.writer == nil && len(lk.fencers) == 0 {
			delete(s.locks, id)
		}
	}
	for id := range tx.staged {
		if lk := s.locks[id]; lk != nil && lk.writer == tx {
			lk.writer = nil
			drop(id, lk)
		}
	}
	for id := range tx.fenced {
		if lk := s.locks[id]; lk != nil {
			delete(lk.fencers, tx)
			drop(id, lk)
		}
	}
	tx.staged, tx.fenced, tx.waitingFor = nil, nil, nil
	close(tx.done)
}
