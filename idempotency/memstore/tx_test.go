package memstore

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// txSetup is setup, and at the end of the test checks that every
// transaction ended: no key held, no new key pending, no call waiting.
func txSetup(t *testing.T, cfg *Config) *bundle {
	t.Helper()
	b := setup(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	b.ctx = ctx
	t.Cleanup(func() {
		s := b.store
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.locks) != 0 || s.pendingNew != 0 || s.waiting != 0 {
			t.Errorf("after the test: %d keys held, %d new keys pending, %d calls waiting", len(s.locks), s.pendingNew, s.waiting)
		}
	})
	return b
}

// txSetupClaimed is txSetup with key claimed in an open transaction: the
// bundle, the key's params, the transaction and the claim.
func txSetupClaimed(t *testing.T, key string) (*bundle, idempotency.ClaimParams, *Tx, idempotency.Claim) {
	t.Helper()
	b := txSetup(t, nil)
	p := params(t, key)
	tx := b.begin(t)
	return b, p, tx, b.claimTx(t, tx, p, idempotency.ClaimAcquired)
}

func (b *bundle) begin(t *testing.T) *Tx {
	t.Helper()
	tx, err := b.store.Begin(b.ctx)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	return tx
}

func (b *bundle) claimTx(t *testing.T, tx *Tx, p idempotency.ClaimParams, want idempotency.ClaimState) idempotency.Claim {
	t.Helper()
	c, err := b.store.ClaimTx(b.ctx, tx, p)
	if err != nil {
		t.Fatalf("ClaimTx(%s): %v", p.Key, err)
	}
	if c.State != want {
		t.Fatalf("ClaimTx(%s) = %s, want %s", p.Key, c.State, want)
	}
	return c
}

func done(status idempotency.Status, body string) idempotency.Completion {
	return idempotency.Completion{Status: status, Response: idempotency.Response{Code: 201, Body: []byte(body)}, Retention: retention}
}

// answer is what a call racing an open transaction answered, with
// whether the test had begun to end the transaction by then.
type answer struct {
	claim idempotency.Claim
	err   error
	ended bool
}

// race runs call in a goroutine and returns the channel of its answer.
func race(ended *atomic.Bool, call func() (idempotency.Claim, error)) <-chan answer {
	got := make(chan answer, 1)
	go func() {
		c, err := call()
		got <- answer{c, err, ended.Load()}
	}()
	return got
}

// untilWaiting returns once n calls wait for a transaction to end, by
// polling the store's state; it fails the test when one of the racing
// calls answers first: it did not wait.
func untilWaiting(t *testing.T, s *Store, n int, racing ...<-chan answer) {
	t.Helper()
	for {
		s.mu.Lock()
		w := s.waiting
		s.mu.Unlock()
		if w >= n {
			return
		}
		for _, ch := range racing {
			if len(ch) > 0 {
				a := <-ch
				t.Fatalf("a call answered %s %v while it had to wait for an open transaction", a.claim.State, a.err)
			}
		}
		runtime.Gosched()
	}
}

// claimAcross claims p while tx holds its key: once the claim waits for
// tx, tx ends by end (its Commit or Rollback), and the claim's answer is
// returned.
func (b *bundle) claimAcross(t *testing.T, p idempotency.ClaimParams, end func(context.Context) error) answer {
	t.Helper()
	var ended atomic.Bool
	got := race(&ended, func() (idempotency.Claim, error) { return b.store.Claim(b.ctx, p) })
	untilWaiting(t, b.store, 1, got)
	ended.Store(true)
	if err := end(b.ctx); err != nil {
		t.Fatal(err)
	}
	return <-got
}

// A claim of a key that an open transaction claimed waits for it; after a
// rollback, which leaves nothing, it acquires the key with a version the
// rolled-back claim never had.
func TestTxRollbackLeavesNothingAndTheWaiterAcquires(t *testing.T) {
	t.Parallel()
	b, p, tx, inTx := txSetupClaimed(t, "rollback")
	if _, err := b.store.Get(b.ctx, p.Scope, p.Key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("Get of a record claimed in an open transaction: %v, want ErrNotFound", err)
	}
	if ls, err := b.store.Leases(b.ctx, []idempotency.RecordRef{{Scope: p.Scope, Key: p.Key}}); err != nil || len(ls) != 0 {
		t.Fatalf("Leases of a record claimed in an open transaction: %v %v, want none", ls, err)
	}

	a := b.claimAcross(t, p, tx.Rollback)
	if a.err != nil || a.claim.State != idempotency.ClaimAcquired || !a.ended {
		t.Fatalf("the waiting claim: %s %v (ended %v), want acquired after the rollback", a.claim.State, a.err, a.ended)
	}
	if a.claim.Lease.Version <= inTx.Lease.Version {
		t.Fatalf("version %d after the rollback of version %d: a fencing token repeated", a.claim.Lease.Version, inTx.Lease.Version)
	}
	wantErr(t, b.store.Complete(b.ctx, inTx.Lease, done(idempotency.StatusCompleted, "{}")), idempotency.ErrLeaseLost)
}

// After a commit, a claim that waited gets what was committed: in
// progress, or the replay of the outcome; never the key.
func TestTxCommitWakesTheWaiterWithTheRecord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		complete bool
		want     idempotency.ClaimState
	}{
		{"claimed", false, idempotency.ClaimInProgress},
		{"completed", true, idempotency.ClaimReplay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, p, tx, c := txSetupClaimed(t, "commit")
			if tc.complete {
				if err := b.store.CompleteTx(b.ctx, tx, c.Lease, done(idempotency.StatusCompleted, `{"id":"ch_1"}`)); err != nil {
					t.Fatal(err)
				}
			}
			a := b.claimAcross(t, p, tx.Commit)
			if a.err != nil || a.claim.State != tc.want || !a.ended {
				t.Fatalf("the waiting claim: %s %v (ended %v), want %s after the commit", a.claim.State, a.err, a.ended, tc.want)
			}
			if tc.complete && string(a.claim.Record.Response.Body) != `{"id":"ch_1"}` {
				t.Fatalf("replayed %q", a.claim.Record.Response.Body)
			}
			if r := b.get(t, p); r.LockVersion != c.Lease.Version {
				t.Fatalf("committed version %d, want %d", r.LockVersion, c.Lease.Version)
			}
		})
	}
}

// Of 32 concurrent RunTx of one new key, one runs fn, and the other 31,
// all waiting for its transaction, replay its outcome.
func TestRunTxConcurrentRunsOnce(t *testing.T) {
	t.Parallel()
	const n = 32
	b := txSetup(t, nil)
	p := params(t, "runtx")
	var ran, written atomic.Int32
	start := make(chan struct{})
	answers := make(chan answer, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			c, err := b.store.RunTx(b.ctx, p, func(ctx context.Context, tx *Tx, l idempotency.Lease) (idempotency.Completion, error) {
				ran.Add(1)
				tx.OnCommit(func() { written.Add(1) })
				// Every other caller must be waiting for this transaction.
				untilWaiting(t, b.store, n-1)
				return done(idempotency.StatusCompleted, "once"), nil
			})
			answers <- answer{claim: c, err: err}
		})
	}
	close(start)
	wg.Wait()
	close(answers)
	states := map[idempotency.ClaimState]int{}
	for a := range answers {
		if a.err != nil {
			t.Fatalf("RunTx: %v", a.err)
		}
		states[a.claim.State]++
		if a.claim.State == idempotency.ClaimReplay && string(a.claim.Record.Response.Body) != "once" {
			t.Fatalf("replayed %q", a.claim.Record.Response.Body)
		}
	}
	if ran.Load() != 1 || written.Load() != 1 || states[idempotency.ClaimAcquired] != 1 || states[idempotency.ClaimReplay] != n-1 {
		t.Fatalf("fn ran %d times, wrote %d times, claims %v; want once, once, 1 acquired and %d replays", ran.Load(), written.Load(), states, n-1)
	}
}

// A fence holds the lease until its transaction ends: a reclaim waits for
// the commit, and a fence after the reclaim finds the lease lost.
func TestFenceTxBlocksReclaimUntilCommit(t *testing.T) {
	t.Parallel()
	b := txSetup(t, nil)
	p := params(t, "fence")
	holder := b.claim(t, p, idempotency.ClaimAcquired)
	b.clock.Advance(lockTimeout + time.Second) // the lease ended; no retry yet

	tx := b.begin(t)
	if err := b.store.FenceTx(b.ctx, tx, holder.Lease); err != nil {
		t.Fatalf("the holder's fence: %v", err)
	}
	var (
		mu     sync.Mutex
		events []string
		ended  atomic.Bool
	)
	note := func(e string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}
	got := race(&ended, func() (idempotency.Claim, error) {
		c, err := b.store.Claim(b.ctx, p)
		note("reclaim answered")
		return c, err
	})
	untilWaiting(t, b.store, 1, got)
	note("commit")
	ended.Store(true)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil || a.claim.State != idempotency.ClaimReclaimed || !a.ended || a.claim.Lease.Version <= holder.Lease.Version {
		t.Fatalf("the retry: %s %+v %v (ended %v), want a reclaim after the commit", a.claim.State, a.claim.Lease, a.err, a.ended)
	}
	if want := []string{"commit", "reclaim answered"}; !slices.Equal(events, want) {
		t.Fatalf("events %v, want %v", events, want)
	}

	tx = b.begin(t)
	wantErr(t, b.store.FenceTx(b.ctx, tx, holder.Lease), idempotency.ErrLeaseLost)
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
}

// Fences of one lease in several transactions share the key; the
// holder's own writes (a heartbeat) wait for all of them.
func TestFenceTxSharedAndHoldsTheHolderToo(t *testing.T) {
	t.Parallel()
	b := txSetup(t, nil)
	p := params(t, "fence-shared")
	holder := b.claim(t, p, idempotency.ClaimAcquired)
	tx1, tx2 := b.begin(t), b.begin(t)
	for _, tx := range []*Tx{tx1, tx2} {
		if err := b.store.FenceTx(b.ctx, tx, holder.Lease); err != nil {
			t.Fatalf("fence: %v", err)
		}
	}
	var ended atomic.Bool
	got := race(&ended, func() (idempotency.Claim, error) {
		return idempotency.Claim{}, b.store.Heartbeat(b.ctx, holder.Lease, time.Minute)
	})
	untilWaiting(t, b.store, 1, got)
	if err := tx1.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	untilWaiting(t, b.store, 1, got) // now for tx2
	ended.Store(true)
	if err := tx2.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-got; a.err != nil || !a.ended {
		t.Fatalf("the holder's heartbeat: %v (ended %v), want nil after both fences ended", a.err, a.ended)
	}
}

// OnCommit functions run in order at the commit, after the records are
// applied, with no store lock held, and before the claims waiting for
// the transaction's keys go on; never after a rollback or an abort.
func TestTxOnCommit(t *testing.T) {
	t.Parallel()
	b, p, tx, c := txSetupClaimed(t, "oncommit")
	if err := b.store.CompleteTx(b.ctx, tx, c.Lease, done(idempotency.StatusCompleted, "{}")); err != nil {
		t.Fatal(err)
	}
	var ran []string
	var written atomic.Bool
	tx.OnCommit(func() {
		if r := b.get(t, p); r.Status != idempotency.StatusCompleted { // Get: no store lock held
			t.Errorf("OnCommit saw the record %s, want it applied", r.Status)
		}
		b.store.mu.Lock()
		held := b.store.blocker(nil, recordID{p.Scope, p.Key}, false) == tx
		b.store.mu.Unlock()
		if !held {
			t.Error("OnCommit ran after the transaction's keys were released to the waiting claims")
		}
		ran = append(ran, "first")
	})
	tx.OnCommit(func() { ran = append(ran, "second"); written.Store(true) })
	got := race(&written, func() (idempotency.Claim, error) { return b.store.Claim(b.ctx, params(t, "oncommit")) })
	untilWaiting(t, b.store, 1, got)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ran, []string{"first", "second"}) {
		t.Fatalf("OnCommit ran %v", ran)
	}
	if a := <-got; a.claim.State != idempotency.ClaimReplay || !a.ended {
		t.Fatalf("the waiting claim: %s %v, written before it went on: %v", a.claim.State, a.err, a.ended)
	}
	tx.OnCommit(func() { t.Error("OnCommit after the commit ran") })

	tx = b.begin(t)
	b.claimTx(t, tx, params(t, "oncommit-rollback"), idempotency.ClaimAcquired)
	tx.OnCommit(func() { t.Error("OnCommit ran after a rollback") })
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	wantErr(t, tx.Commit(b.ctx), ErrTxClosed)
}

// A transaction sees its own writes; nobody else does until it commits.
func TestTxSeesItsOwnWrites(t *testing.T) {
	t.Parallel()
	b, p, tx, c := txSetupClaimed(t, "own")
	b.claimTx(t, tx, p, idempotency.ClaimInProgress)
	if err := b.store.FenceTx(b.ctx, tx, c.Lease); err != nil {
		t.Fatalf("fence of its own claim: %v", err)
	}
	if err := b.store.CompleteTx(b.ctx, tx, c.Lease, done(idempotency.StatusCompleted, "own")); err != nil {
		t.Fatal(err)
	}
	if r := b.claimTx(t, tx, p, idempotency.ClaimReplay); string(r.Record.Response.Body) != "own" {
		t.Fatalf("replayed %q", r.Record.Response.Body)
	}
	if _, err := b.store.Get(b.ctx, p.Scope, p.Key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("Get before the commit: %v, want ErrNotFound", err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if r := b.get(t, p); r.Status != idempotency.StatusCompleted {
		t.Fatalf("after the commit: %s", r.Status)
	}
}

// CompleteTx with a lease that is not the current one fails and changes
// nothing; a plain completion of a record that an open transaction
// superseded waits, then finds its lease lost.
func TestCompleteTxLeaseLostAndSupersedeFencesTheHolder(t *testing.T) {
	t.Parallel()
	b := txSetup(t, nil)
	p := params(t, "lost")
	holder := b.claim(t, p, idempotency.ClaimAcquired)
	tx := b.begin(t)
	stale := holder.Lease
	stale.Version++
	wantErr(t, b.store.CompleteTx(b.ctx, tx, stale, done(idempotency.StatusCompleted, "{}")), idempotency.ErrLeaseLost)
	if ok, err := b.store.SupersedeTx(b.ctx, tx, p.Scope, p.Key, done(idempotency.StatusFailed, "overturned")); !ok || err != nil {
		t.Fatalf("SupersedeTx: %v %v", ok, err)
	}
	var ended atomic.Bool
	got := race(&ended, func() (idempotency.Claim, error) {
		return idempotency.Claim{}, b.store.Complete(b.ctx, holder.Lease, done(idempotency.StatusCompleted, "{}"))
	})
	untilWaiting(t, b.store, 1, got)
	if r := b.get(t, p); r.Status != idempotency.StatusProcessing || r.LockVersion != holder.Lease.Version {
		t.Fatalf("committed record during the transaction: %s v%d", r.Status, r.LockVersion)
	}
	ended.Store(true)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-got; !errors.Is(a.err, idempotency.ErrLeaseLost) || !a.ended {
		t.Fatalf("the holder's Complete: %v (ended %v), want ErrLeaseLost after the commit", a.err, a.ended)
	}
	r := b.get(t, p)
	if r.Status != idempotency.StatusFailed || r.LockVersion != holder.Lease.Version+1 || string(r.Response.Body) != "overturned" {
		t.Fatalf("after the supersede: %s v%d %q", r.Status, r.LockVersion, r.Response.Body)
	}
}

// A record that a transaction holds is neither evicted nor pruned under
// it; a commit puts it back under expiry as a direct call would, and lock
// versions never repeat across rollbacks.
func TestTxKeepsExpiryAndVersions(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		t.Run(map[bool]string{true: "commit", false: "rollback"}[commit], func(t *testing.T) {
			t.Parallel()
			b := txSetup(t, &Config{EvictAfter: time.Hour})
			p := params(t, "renew")
			p.Retention = time.Hour
			c := b.claim(t, p, idempotency.ClaimAcquired)
			old := done(idempotency.StatusCompleted, "old")
			old.Retention = time.Hour
			if err := b.store.Complete(b.ctx, c.Lease, old); err != nil {
				t.Fatal(err)
			}
			b.clock.Advance(90 * time.Minute) // expired, not evicted yet
			tx := b.begin(t)
			renewed := b.claimTx(t, tx, p, idempotency.ClaimAcquired)
			b.clock.Advance(2 * time.Hour) // evictable, but held
			if r := b.get(t, p); r.Status != idempotency.StatusCompleted {
				t.Fatalf("the committed record under the transaction: %s", r.Status)
			}
			if n, err := b.store.Prune(b.ctx, 10); err != nil || n != 0 {
				t.Fatalf("Prune under the transaction: %d %v, want 0", n, err)
			}
			if commit {
				if err := tx.Commit(b.ctx); err != nil {
					t.Fatal(err)
				}
				if r := b.get(t, p); r.Status != idempotency.StatusProcessing || r.LockVersion != renewed.Lease.Version {
					t.Fatalf("after the commit: %s v%d", r.Status, r.LockVersion)
				}
				return
			}
			if err := tx.Rollback(b.ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := b.store.Get(b.ctx, p.Scope, p.Key); !errors.Is(err, idempotency.ErrNotFound) {
				t.Fatalf("the expired record after the rollback: %v, want evicted", err)
			}
			if again := b.claim(t, p, idempotency.ClaimAcquired); again.Lease.Version <= renewed.Lease.Version {
				t.Fatalf("version %d after a rolled-back renewal at %d", again.Lease.Version, renewed.Lease.Version)
			}
		})
	}
}

// A reclaim rolled back hands out a version that the next reclaim skips.
func TestTxReclaimRolledBackIsNeverReissued(t *testing.T) {
	t.Parallel()
	b := txSetup(t, nil)
	p := params(t, "reclaim")
	holder := b.claim(t, p, idempotency.ClaimAcquired)
	b.clock.Advance(lockTimeout)
	tx := b.begin(t)
	rolled := b.claimTx(t, tx, p, idempotency.ClaimReclaimed)
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	next := b.claim(t, p, idempotency.ClaimReclaimed)
	if next.Lease.Version <= rolled.Lease.Version || rolled.Lease.Version <= holder.Lease.Version {
		t.Fatalf("versions: holder %d, rolled back %d, next %d", holder.Lease.Version, rolled.Lease.Version, next.Lease.Version)
	}
	wantErr(t, b.store.Complete(b.ctx, rolled.Lease, done(idempotency.StatusCompleted, "{}")), idempotency.ErrLeaseLost)
}

// A transaction's new key counts towards MaxRecords from its claim on.
func TestTxNewKeyCountsTowardsMaxRecords(t *testing.T) {
	t.Parallel()
	b := txSetup(t, &Config{MaxRecords: 2})
	tx := b.begin(t)
	b.claimTx(t, tx, params(t, "a"), idempotency.ClaimAcquired)
	b.claim(t, params(t, "b"), idempotency.ClaimAcquired)
	if _, err := b.store.Claim(b.ctx, params(t, "c")); !errors.Is(err, idempotency.ErrStoreFull) {
		t.Fatalf("claim beyond MaxRecords: %v, want ErrStoreFull", err)
	}
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.claim(t, params(t, "c"), idempotency.ClaimAcquired)
}

// Closed, aborted, foreign and absent transactions, and bad inputs, get
// clear errors and change nothing.
func TestTxMisuse(t *testing.T) {
	t.Parallel()
	b := txSetup(t, nil)
	p := params(t, "misuse")
	l := idempotency.Lease{Scope: p.Scope, Key: p.Key}
	c := done(idempotency.StatusCompleted, "{}")
	calls := func(tx *Tx) map[string]error {
		_, claimErr := b.store.ClaimTx(b.ctx, tx, p)
		_, supersedeErr := b.store.SupersedeTx(b.ctx, tx, p.Scope, p.Key, c)
		return map[string]error{
			"ClaimTx":     claimErr,
			"CompleteTx":  b.store.CompleteTx(b.ctx, tx, l, c),
			"FenceTx":     b.store.FenceTx(b.ctx, tx, l),
			"SupersedeTx": supersedeErr,
		}
	}

	committed := b.begin(t)
	if err := committed.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	wantErr(t, committed.Commit(b.ctx), ErrTxClosed)
	wantErr(t, committed.Rollback(b.ctx), ErrTxClosed)
	rolledBack := b.begin(t)
	if err := rolledBack.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	wantErr(t, rolledBack.Rollback(b.ctx), ErrTxClosed)
	wantErr(t, rolledBack.Commit(b.ctx), ErrTxClosed)
	for _, tx := range []*Tx{committed, rolledBack} {
		for name, err := range calls(tx) {
			if !errors.Is(err, ErrTxClosed) {
				t.Errorf("%s on an ended transaction: %v, want ErrTxClosed", name, err)
			}
		}
	}

	other, err := New(nil).Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(b.ctx)
	for what, tx := range map[string]*Tx{"another store's": other, "a nil": nil, "a zero": {}} {
		for name, err := range calls(tx) {
			var inv *idempotency.InvalidError
			if !errors.As(err, &inv) || inv.Field != "tx" {
				t.Errorf("%s with %s transaction: %v, want an invalid tx", name, what, err)
			}
		}
	}
	for _, err := range []error{(*Tx)(nil).Commit(b.ctx), (&Tx{}).Rollback(b.ctx)} {
		var inv *idempotency.InvalidError
		if !errors.As(err, &inv) || inv.Field != "tx" {
			t.Errorf("Commit or Rollback of a transaction not begun: %v, want an invalid tx", err)
		}
	}

	tx := b.begin(t)
	defer tx.Rollback(b.ctx)
	bad := p
	bad.LockTimeout = 0
	for name, tc := range map[string]struct {
		err   error
		field string
	}{
		"ClaimTx": {func() error { _, err := b.store.ClaimTx(b.ctx, tx, bad); return err }(), "LockTimeout"},
		"CompleteTx": {b.store.CompleteTx(b.ctx, tx, l, idempotency.Completion{Status: idempotency.StatusProcessing, Retention: time.Hour}),
			"Completion.Status"},
		"SupersedeTx": {func() error { _, err := b.store.SupersedeTx(b.ctx, tx, "", p.Key, c); return err }(), "scope"},
		"SupersedeTx retention": {func() error {
			_, err := b.store.SupersedeTx(b.ctx, tx, p.Scope, p.Key, idempotency.Completion{Status: idempotency.StatusFailed})
			return err
		}(), "Completion.Retention"},
		"RunTx": {func() error { _, err := b.store.RunTx(b.ctx, p, nil); return err }(), "fn"},
	} {
		var inv *idempotency.InvalidError
		if !errors.As(tc.err, &inv) || inv.Field != tc.field {
			t.Errorf("%s with a bad %s: %v", name, tc.field, tc.err)
		}
	}
	if _, err := b.store.Get(b.ctx, p.Scope, p.Key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("bad inputs left a record: %v", err)
	}
}

// A ctx that ends while a call waits for a transaction ends the call with
// ctx's error; a waiting transaction is aborted, its writes discarded.
func TestTxWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	b := txSetup(t, nil)
	p, other := params(t, "ctx"), params(t, "ctx-other")
	holder := b.begin(t)
	b.claimTx(t, holder, p, idempotency.ClaimAcquired)

	waiter := b.begin(t)
	b.claimTx(t, waiter, other, idempotency.ClaimAcquired)
	ctx, cancel := context.WithCancel(b.ctx)
	var ended atomic.Bool
	direct := race(&ended, func() (idempotency.Claim, error) { return b.store.Claim(ctx, p) })
	inTx := race(&ended, func() (idempotency.Claim, error) { return b.store.ClaimTx(ctx, waiter, p) })
	untilWaiting(t, b.store, 2, direct, inTx)
	cancel()
	for _, got := range []<-chan answer{direct, inTx} {
		if a := <-got; !errors.Is(a.err, context.Canceled) {
			t.Fatalf("a claim whose ctx ended while it waited: %s %v, want context.Canceled", a.claim.State, a.err)
		}
	}
	// The aborted transaction's claim of other is gone at once.
	b.claim(t, other, idempotency.ClaimAcquired)
	if _, err := b.store.ClaimTx(b.ctx, waiter, other); !errors.Is(err, ErrTxAborted) {
		t.Fatalf("ClaimTx on an aborted transaction: %v, want ErrTxAborted", err)
	}
	waiter.OnCommit(func() { t.Error("OnCommit of an aborted transaction ran") })
	wantErr(t, waiter.Commit(b.ctx), ErrTxAborted)
	wantErr(t, waiter.Rollback(b.ctx), ErrTxClosed)
	if err := holder.Commit(b.ctx); err != nil {
		t.Fatalf("the holder's commit: %v", err)
	}
}

// Two transactions each waiting for a key the other holds: the second
// wait fails with ErrDeadlock at once, aborting its transaction, and the
// first goes on.
func TestTxDeadlockIsDetected(t *testing.T) {
	t.Parallel()
	b := txSetup(t, nil)
	p1, p2 := params(t, "dl-1"), params(t, "dl-2")
	tx1, tx2 := b.begin(t), b.begin(t)
	b.claimTx(t, tx1, p1, idempotency.ClaimAcquired)
	b.claimTx(t, tx2, p2, idempotency.ClaimAcquired)
	var ended atomic.Bool
	got := race(&ended, func() (idempotency.Claim, error) { return b.store.ClaimTx(b.ctx, tx1, p2) })
	untilWaiting(t, b.store, 1, got)
	if _, err := b.store.ClaimTx(b.ctx, tx2, p1); !errors.Is(err, ErrDeadlock) {
		t.Fatalf("the claim closing the cycle: %v, want ErrDeadlock", err)
	}
	if a := <-got; a.err != nil || a.claim.State != idempotency.ClaimAcquired {
		t.Fatalf("the other transaction's claim: %s %v, want acquired once the deadlock was broken", a.claim.State, a.err)
	}
	if err := tx2.Rollback(b.ctx); err != nil {
		t.Fatalf("Rollback of the aborted transaction: %v", err)
	}
	if err := tx1.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.get(t, p1)
	b.get(t, p2)
}

// Leases reads the committed leases with the store's clock; absent and
// uncommitted records are missing.
func TestTxLeases(t *testing.T) {
	t.Parallel()
	b := txSetup(t, nil)
	live, released, finished, absent, open := params(t, "live"), params(t, "released"), params(t, "finished"), params(t, "absent"), params(t, "open")
	b.claim(t, live, idempotency.ClaimAcquired)
	if err := b.store.Release(b.ctx, b.claim(t, released, idempotency.ClaimAcquired).Lease); err != nil {
		t.Fatal(err)
	}
	b.complete(t, b.claim(t, finished, idempotency.ClaimAcquired).Lease, idempotency.StatusCompleted, idempotency.Response{Code: 200})
	tx := b.begin(t)
	defer tx.Rollback(b.ctx)
	b.claimTx(t, tx, open, idempotency.ClaimAcquired)
	ref := func(p idempotency.ClaimParams) idempotency.RecordRef {
		return idempotency.RecordRef{Scope: p.Scope, Key: p.Key}
	}
	ls, err := b.store.Leases(b.ctx, []idempotency.RecordRef{ref(live), ref(released), ref(finished), ref(absent), ref(open)})
	if err != nil {
		t.Fatal(err)
	}
	now := b.clock.Now()
	if len(ls) != 3 {
		t.Fatalf("Leases returned %d records, want 3", len(ls))
	}
	for p, want := range map[idempotency.ClaimParams]bool{live: true, released: false, finished: false} {
		l := ls[ref(p)]
		if l.Live() != want || !l.DatabaseNow.Equal(now) || l.Key != p.Key || !l.CreatedAt.Equal(now) {
			t.Errorf("%s: %+v, want live %v at %v", p.Key, l, want, now)
		}
	}
	if l := ls[ref(finished)]; l.LockedUntil != nil || l.Status != idempotency.StatusCompleted {
		t.Errorf("finished: %+v, want COMPLETED without a lease", l)
	}
}
