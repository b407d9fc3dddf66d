package idempotencytest

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// TxHarness is one fresh, empty transaction-aware store for one check of
// [ExerciseTx], with a table of the caller's own in the store's database
// in which a check makes its writes inside the store's transactions.
type TxHarness[TTx idempotency.Tx] struct {
	Store idempotency.TxStore[TTx]
	// Advance makes d pass for every record of the store, as for
	// [Harness]. The checks never call it while one of their transactions
	// is open.
	Advance func(t testing.TB, d time.Duration)
	// ReplayCache runs every check's executor with an
	// [idempotency.ReplayCache], as for [Harness].
	ReplayCache bool
	// Write makes, inside tx, one write of the caller's own under name:
	// it must count in Written once tx commits, and never otherwise.
	// pgstore's tests insert a row into a table of the test's schema;
	// memstore's register a count with the transaction's OnCommit.
	Write func(ctx context.Context, tx TTx, name string) error
	// Written returns how many writes of name have been committed.
	Written func(t testing.TB, name string) int
	// Waiting, optional, reports whether a call of the store's is
	// waiting for tx to end (pgstore's tests ask pg_blocking_pids). The
	// checks of a call racing an open transaction poll it, so that the
	// call has reached the store before the transaction ends. Without it
	// they give the call a few of the store's round trips to arrive
	// instead, and may miss a call that should have waited but had not
	// arrived yet.
	Waiting func(t testing.TB, tx TTx) bool
}

// txCheck is one promise of the transactional calls, kept on a fresh
// harness.
type txCheck[TTx idempotency.Tx] struct {
	name string
	fn   func(t *testing.T, h TxHarness[TTx])
}

// ExerciseTx runs every check of the transactional calls of an
// [idempotency.TxStore] (ClaimTx, CompleteTx, FenceTx, SupersedeTx, RunTx,
// Leases) and of the [idempotency.TxExecutor] over it (DoTx, WithTx), each
// on a fresh harness, in parallel, as sub-tests named Tx/check. It runs
// beside [Exercise], which checks the store's plain calls.
func ExerciseTx[TTx idempotency.Tx](t *testing.T, newHarness func(t *testing.T) TxHarness[TTx]) {
	checks := []txCheck[TTx]{
		{"ClaimTxCommitsOrRollsBack", testClaimTx[TTx]},
		{"ClaimWaitsForOpenClaimTx", testClaimWaitsForClaimTx[TTx]},
		{"CompleteTxCommitsWithWrites", testCompleteTx[TTx]},
		{"CompleteTxLostLease", testCompleteTxLostLease[TTx]},
		{"FenceTxRefusesLostLease", testFenceTxLostLease[TTx]},
		{"FenceTxHoldsUntilTxEnds", testFenceTxHolds[TTx]},
		{"SupersedeTxReplacesOutcome", testSupersedeTx[TTx]},
		{"SupersedeTxFencesHolder", testSupersedeTxHolder[TTx]},
		{"SupersedeTxLeavesMissingAndExpired", testSupersedeTxMissing[TTx]},
		{"RunTxCommitsOrRollsBack", testRunTx[TTx]},
		{"DoTxConcurrentDuplicatesOneExecution", testDoTxConcurrent[TTx]},
		{"DoTxPermanentErrorStoredWithoutWrites", testDoTxPermanent[TTx]},
		{"DoTxTransientErrorLeavesNothing", testDoTxTransient[TTx]},
		{"DoTxPanicLeavesNothing", testDoTxPanic[TTx]},
		{"WithTxCommitsWritesWithOutcome", testWithTx[TTx]},
		{"WithTxTransientErrorReleases", testWithTxTransient[TTx]},
		{"WithTxPermanentErrorStoredWithoutWrites", testWithTxPermanent[TTx]},
		{"LeasesLiveEndedAndMissing", testLeases[TTx]},
		{"BadInputChangesNothing", testTxBadInput[TTx]},
	}
	t.Run("Tx", func(t *testing.T) {
		t.Parallel()
		for _, c := range checks {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.fn(t, newHarness(t))
			})
		}
	})
}

// txBundle is what every transactional check starts from: its fresh
// harness, a TxExecutor on the harness's store, a context that ends with
// the check, and the count of the check's executions.
type txBundle[TTx idempotency.Tx] struct {
	TxHarness[TTx]
	checkState
	exec *idempotency.TxExecutor[TTx]
}

// setupTx builds the bundle of one check; cfg configures the executor
// (nil: the defaults).
func setupTx[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx], cfg *idempotency.Config) *txBundle[TTx] {
	t.Helper()
	if h.Store == nil || h.Advance == nil || h.Write == nil || h.Written == nil {
		t.Fatal("idempotencytest: TxHarness needs Store, Advance, Write and Written")
	}
	ctx := checkContext(t)
	if h.ReplayCache {
		cfg, h.Advance = withReplayCache(cfg, h.Advance)
	}
	e, err := idempotency.NewTx(h.Store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() }) // its replay cache's listener
	return &txBundle[TTx]{TxHarness: h, checkState: checkState{ctx: ctx, store: h.Store, advance: h.Advance}, exec: e}
}

// begin starts a transaction that is rolled back when the check ends, if
// the check left it open.
func (b *txBundle[TTx]) begin(t *testing.T) TTx {
	t.Helper()
	tx, err := b.Store.Begin(b.ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // an error: it had ended
	return tx
}

func (b *txBundle[TTx]) commit(t *testing.T, tx TTx) {
	t.Helper()
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func (b *txBundle[TTx]) rollback(t *testing.T, tx TTx) {
	t.Helper()
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatalf("rollback: %v", err)
	}
}

// write makes one write of name in tx and stops the check on an error.
func (b *txBundle[TTx]) write(t *testing.T, tx TTx, name string) {
	t.Helper()
	if err := b.Write(b.ctx, tx, name); err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
}

// wantWritten stops the check unless n writes of name were committed.
func (b *txBundle[TTx]) wantWritten(t *testing.T, name string, n int) {
	t.Helper()
	if got := b.Written(t, name); got != n {
		t.Fatalf("committed writes of %s = %d, want %d", name, got, n)
	}
}

// claimTx claims p in tx and stops the check unless the claim ends in
// want.
func (b *txBundle[TTx]) claimTx(t *testing.T, who string, tx TTx, p idempotency.ClaimParams, want idempotency.ClaimState) idempotency.Claim {
	t.Helper()
	c, err := b.Store.ClaimTx(b.ctx, tx, p)
	if err != nil || c.State != want {
		t.Fatalf("%s ClaimTx: %v %+v %v, want %v", who, c.State, c.Lease, err, want)
	}
	return c
}

// wantRecord stops the check unless the record of r is in status, under
// lock version version when it is not zero.
func (b *txBundle[TTx]) wantRecord(t *testing.T, r idempotency.Request, status idempotency.Status, version int64) idempotency.Record {
	t.Helper()
	rec, err := b.Store.Get(b.ctx, r.Scope, r.Key)
	if err != nil || rec.Status != status || (version != 0 && rec.LockVersion != version) {
		t.Fatalf("record: %s %v; want %s under lock version %d", recordString(rec), err, status, version)
	}
	return rec
}

// wantNoRecord stops the check unless the store has no record of r.
func (b *txBundle[TTx]) wantNoRecord(t *testing.T, r idempotency.Request) {
	t.Helper()
	if rec, err := b.Store.Get(b.ctx, r.Scope, r.Key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("record: %s %v, want none", recordString(rec), err)
	}
}

// letIn gives a goroutine that has just announced it is calling the
// store the time to reach it, by events rather than a fixed wait: the
// scheduler's turns and five calls of the store's own, made one after the
// other, while the goroutine's call, sent first, needs a round trip or
// two. A check that relies on it must stay right if the goroutine arrives
// later; it only finds fewer faults then.
func (b *txBundle[TTx]) letIn(t *testing.T) {
	t.Helper()
	for range 5 {
		runtime.Gosched()
		b.get(t)
	}
}

// warm makes calls of the store from four goroutines at once, so that a
// goroutine's call that follows finds a connection ready, as the check's
// own calls do: letIn then waits as long as a call takes to reach the
// store, not for a connection to be opened.
func (b *txBundle[TTx]) warm(t *testing.T) {
	t.Helper()
	errs := make(chan error, 4)
	storm(4, func() {
		_, err := b.Store.Get(b.ctx, scopeB, "letIn")
		errs <- err
	})
	for range 4 {
		if err := <-errs; err != nil && !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatal(err)
		}
	}
}

func (b *txBundle[TTx]) get(t *testing.T) {
	t.Helper()
	if _, err := b.Store.Get(b.ctx, scopeB, "letIn"); err != nil && !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatal(err)
	}
}

// raced is the answer of a call that raced an open transaction, with
// whether the transaction's end had begun when the answer came.
type raced struct {
	claim idempotency.Claim
	err   error
	ended bool
}

// raceClaim claims p in a goroutine while the check's transaction tx is
// open, and returns the channel of its answer once the claim is waiting
// for tx to end (see Waiting), or has answered; ended is set by the check
// right before it commits or rolls back tx.
func (b *txBundle[TTx]) raceClaim(t *testing.T, tx TTx, p idempotency.ClaimParams, ended *atomic.Bool) <-chan raced {
	t.Helper()
	b.warm(t)
	started := make(chan struct{})
	got := make(chan raced, 1)
	answered := make(chan struct{})
	go func() {
		close(started)
		c, err := b.Store.Claim(b.ctx, p)
		got <- raced{c, err, ended.Load()}
		close(answered)
	}()
	<-started
	if b.Waiting == nil {
		b.letIn(t)
		return got
	}
	for !b.Waiting(t, tx) { // polls the store's state
		select {
		case <-answered:
			return got
		case <-b.ctx.Done():
			t.Fatal("the racing claim neither waited for the open transaction nor answered")
		default:
			runtime.Gosched()
		}
	}
	return got
}

func completion(status idempotency.Status, resp idempotency.Response) idempotency.Completion {
	return idempotency.Completion{Status: status, Response: resp, Retention: time.Hour}
}
