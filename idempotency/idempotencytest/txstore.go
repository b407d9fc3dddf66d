package idempotencytest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// A claim in a transaction is the transaction's: rolled back, it leaves
// no record and the key is new again; committed, the record is
// PROCESSING under the claim's lease, which the holder then completes.
func testClaimTx[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	r := req(t, scopeA, "claim-tx", "10")
	p := claimParams(r)
	tx := b.begin(t)
	b.claimTx(t, "first", tx, p, idempotency.ClaimAcquired)
	b.rollback(t, tx)
	b.wantNoRecord(t, r)

	tx = b.begin(t)
	c := b.claimTx(t, "after the rollback", tx, p, idempotency.ClaimAcquired)
	b.commit(t, tx)
	rec := b.wantRecord(t, r, idempotency.StatusProcessing, c.Lease.Version)
	if c.Lease.Scope != r.Scope || c.Lease.Key != r.Key || !rec.Fingerprint.Equal(r.Fingerprint) || !rec.LockedUntil.After(rec.CreatedAt) {
		t.Fatalf("committed claim: lease %+v, record %s", c.Lease, recordString(rec))
	}
	b.claim(t, "duplicate", p, idempotency.ClaimInProgress)
	if err := b.Store.Complete(b.ctx, c.Lease, completion(idempotency.StatusCompleted, okResponse())); err != nil {
		t.Fatalf("the committed claim's holder completes: %v", err)
	}
	replay := b.claim(t, "retry", p, idempotency.ClaimReplay)
	mustEqualResponse(t, *replay.Record.Response, okResponse())
}

// A claim of a key that an open transaction claimed waits for the
// transaction to end, then acts on what it committed: "in progress" after
// a commit of the claim, a replay after a commit of the claim and its
// outcome, and the key for itself after a rollback. It never answers
// while the transaction is open.
func testClaimWaitsForClaimTx[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	for _, end := range []string{"commit", "complete", "rollback"} {
		r := req(t, scopeA, "race-"+end, "10")
		p := claimParams(r)
		tx := b.begin(t)
		c := b.claimTx(t, end, tx, p, idempotency.ClaimAcquired)
		if end == "complete" {
			b.write(t, tx, end)
			if err := b.Store.CompleteTx(b.ctx, tx, c.Lease, completion(idempotency.StatusCompleted, okResponse())); err != nil {
				t.Fatal(err)
			}
		}
		var ended atomic.Bool
		got := b.raceClaim(t, tx, p, &ended)
		ended.Store(true)
		want := idempotency.ClaimInProgress
		switch end {
		case "rollback":
			b.rollback(t, tx)
			want = idempotency.ClaimAcquired
		case "complete":
			b.commit(t, tx)
			want = idempotency.ClaimReplay
		default:
			b.commit(t, tx)
		}
		res := <-got
		if !res.ended {
			t.Fatalf("%s: a claim of the key answered %v %v while the transaction that claimed it was open", end, res.claim.State, res.err)
		}
		if res.err != nil || res.claim.State != want {
			t.Fatalf("%s: the claim that waited: %v %v, want %v", end, res.claim.State, res.err, want)
		}
		if end == "complete" {
			mustEqualResponse(t, *res.claim.Record.Response, okResponse())
			b.wantWritten(t, end, 1)
		}
	}
}

// CompleteTx records the outcome with the transaction's writes: rolled
// back, neither is kept and the holder still holds its lease; committed,
// both are, once.
func testCompleteTx[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	r := req(t, scopeA, "complete-tx", "10")
	p := claimParams(r)
	c := b.claim(t, "holder", p, idempotency.ClaimAcquired)
	done := completion(idempotency.StatusCompleted, okResponse())

	tx := b.begin(t)
	b.write(t, tx, "rolled-back")
	if err := b.Store.CompleteTx(b.ctx, tx, c.Lease, done); err != nil {
		t.Fatal(err)
	}
	b.rollback(t, tx)
	b.wantWritten(t, "rolled-back", 0)
	b.wantRecord(t, r, idempotency.StatusProcessing, c.Lease.Version)
	b.claim(t, "duplicate after the rollback", p, idempotency.ClaimInProgress)

	tx = b.begin(t)
	b.write(t, tx, "committed")
	if err := b.Store.CompleteTx(b.ctx, tx, c.Lease, done); err != nil {
		t.Fatalf("completing again after a rollback: %v", err)
	}
	b.commit(t, tx)
	b.wantWritten(t, "committed", 1)
	replay := b.claim(t, "retry", p, idempotency.ClaimReplay)
	mustEqualResponse(t, *replay.Record.Response, okResponse())
	b.wantRecord(t, r, idempotency.StatusCompleted, c.Lease.Version)
}

// A holder whose record was reclaimed cannot record its outcome, nor
// therefore commit its writes with one: CompleteTx answers ErrLeaseLost
// and the record stays the reclaimer's.
func testCompleteTxLostLease[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	r := req(t, scopeA, "complete-tx-lost", "10")
	p, stale, fresh := b.reclaimed(t, r)

	tx := b.begin(t)
	b.write(t, tx, "stale")
	err := b.Store.CompleteTx(b.ctx, tx, stale.Lease, completion(idempotency.StatusCompleted, idempotency.Response{Code: 201, Body: []byte("stale")}))
	if !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("the old holder's CompleteTx: %v, want ErrLeaseLost", err)
	}
	b.rollback(t, tx)
	b.wantWritten(t, "stale", 0)
	b.wantRecord(t, r, idempotency.StatusProcessing, fresh.Lease.Version)

	tx = b.begin(t)
	b.write(t, tx, "fresh")
	if err := b.Store.CompleteTx(b.ctx, tx, fresh.Lease, completion(idempotency.StatusCompleted, okResponse())); err != nil {
		t.Fatal(err)
	}
	b.commit(t, tx)
	b.wantWritten(t, "fresh", 1)
	replay := b.claim(t, "retry", p, idempotency.ClaimReplay)
	mustEqualResponse(t, *replay.Record.Response, okResponse())
}

// FenceTx lets the lease's holder commit its writes, and refuses a holder
// whose record was reclaimed or completed.
func testFenceTxLostLease[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	r := req(t, scopeA, "fence-tx", "10")
	p := shortLease(r)
	old := b.claim(t, "A", p, idempotency.ClaimAcquired)
	tx := b.begin(t)
	b.write(t, tx, "holder")
	if err := b.Store.FenceTx(b.ctx, tx, old.Lease); err != nil {
		t.Fatalf("the holder's fence: %v", err)
	}
	b.commit(t, tx)
	b.wantWritten(t, "holder", 1)

	b.Advance(t, 2*time.Second)
	fresh := b.claim(t, "B", p, idempotency.ClaimReclaimed)
	tx = b.begin(t)
	if err := b.Store.FenceTx(b.ctx, tx, old.Lease); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("the old holder's fence after a reclaim: %v, want ErrLeaseLost", err)
	}
	b.rollback(t, tx)
	tx = b.begin(t)
	if err := b.Store.FenceTx(b.ctx, tx, fresh.Lease); err != nil {
		t.Fatalf("the new holder's fence: %v", err)
	}
	b.commit(t, tx)

	if err := b.Store.Complete(b.ctx, fresh.Lease, completion(idempotency.StatusCompleted, okResponse())); err != nil {
		t.Fatal(err)
	}
	tx = b.begin(t)
	if err := b.Store.FenceTx(b.ctx, tx, fresh.Lease); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("a fence once the record was completed: %v, want ErrLeaseLost", err)
	}
	b.rollback(t, tx)
}

// A fence keeps the record its holder's until the fencing transaction
// ends: a retry that finds the lease ended reclaims the record only once
// the fencing transaction's commit has begun, never before.
func testFenceTxHolds[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	r := req(t, scopeA, "fence-tx-holds", "10")
	p := shortLease(r)
	holder := b.claim(t, "holder", p, idempotency.ClaimAcquired)
	b.Advance(t, 2*time.Second) // the lease ended; no retry yet

	tx := b.begin(t)
	b.write(t, tx, "fenced")
	if err := b.Store.FenceTx(b.ctx, tx, holder.Lease); err != nil {
		t.Fatalf("the holder's fence: %v", err)
	}
	var committing atomic.Bool
	got := b.raceClaim(t, tx, p, &committing)
	committing.Store(true)
	b.commit(t, tx)
	res := <-got
	if !res.ended {
		t.Fatalf("a retry answered %v %v while the holder's fencing transaction was open", res.claim.State, res.err)
	}
	if res.err != nil || res.claim.State != idempotency.ClaimReclaimed || res.claim.Lease.Version <= holder.Lease.Version {
		t.Fatalf("the retry after the fence's commit: %v %+v %v, want a reclaim", res.claim.State, res.claim.Lease, res.err)
	}
	b.wantWritten(t, "fenced", 1)
}

// SupersedeTx replaces a finished record's outcome when its transaction
// commits, and not when it rolls back.
func testSupersedeTx[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	r := req(t, scopeA, "supersede", "10")
	p := claimParams(r)
	c := b.claim(t, "holder", p, idempotency.ClaimAcquired)
	if err := b.Store.Complete(b.ctx, c.Lease, completion(idempotency.StatusCompleted, okResponse())); err != nil {
		t.Fatal(err)
	}
	overturned := idempotency.Response{Code: 402, Body: []byte(`{"error":"charge reversed"}`)}

	tx := b.begin(t)
	if ok, err := b.Store.SupersedeTx(b.ctx, tx, r.Scope, r.Key, completion(idempotency.StatusFailed, overturned)); !ok || err != nil {
		t.Fatalf("supersede: %v %v", ok, err)
	}
	b.rollback(t, tx)
	replay := b.claim(t, "after the rollback", p, idempotency.ClaimReplay)
	if replay.Record.Status != idempotency.StatusCompleted {
		t.Fatalf("a rolled-back supersede changed the record: %s", recordString(replay.Record))
	}
	mustEqualResponse(t, *replay.Record.Response, okResponse())

	tx = b.begin(t)
	if ok, err := b.Store.SupersedeTx(b.ctx, tx, r.Scope, r.Key, completion(idempotency.StatusFailed, overturned)); !ok || err != nil {
		t.Fatalf("supersede: %v %v", ok, err)
	}
	b.commit(t, tx)
	replay = b.claim(t, "after the commit", p, idempotency.ClaimReplay)
	if replay.Record.Status != idempotency.StatusFailed {
		t.Fatalf("the superseded record: %s, want FAILED", recordString(replay.Record))
	}
	mustEqualResponse(t, *replay.Record.Response, overturned)
}

// Superseding a record in progress takes the record from its holder: its
// outcome and heartbeats are refused, and retries replay the superseding
// outcome.
func testSupersedeTxHolder[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	r := req(t, scopeA, "supersede-held", "10")
	p := claimParams(r)
	holder := b.claim(t, "holder", p, idempotency.ClaimAcquired)
	overturned := idempotency.Response{Code: 409, Body: []byte("settled elsewhere")}
	tx := b.begin(t)
	if ok, err := b.Store.SupersedeTx(b.ctx, tx, r.Scope, r.Key, completion(idempotency.StatusCompleted, overturned)); !ok || err != nil {
		t.Fatalf("supersede of a record in progress: %v %v", ok, err)
	}
	b.commit(t, tx)
	if err := b.Store.Complete(b.ctx, holder.Lease, completion(idempotency.StatusCompleted, okResponse())); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("the holder's Complete after a supersede: %v, want ErrLeaseLost", err)
	}
	if err := b.Store.Heartbeat(b.ctx, holder.Lease, time.Minute); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("the holder's Heartbeat after a supersede: %v, want ErrLeaseLost", err)
	}
	replay := b.claim(t, "retry", p, idempotency.ClaimReplay)
	mustEqualResponse(t, *replay.Record.Response, overturned)
}

// SupersedeTx reports false, changing nothing, for a key without a record
// and for an expired record, which it does not revive.
func testSupersedeTxMissing[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	missing := req(t, scopeA, "supersede-missing", "10")
	expired := req(t, scopeA, "supersede-expired", "10")
	p := claimParams(expired)
	p.Retention = time.Hour
	c := b.claim(t, "holder", p, idempotency.ClaimAcquired)
	if err := b.Store.Complete(b.ctx, c.Lease, completion(idempotency.StatusCompleted, okResponse())); err != nil {
		t.Fatal(err)
	}
	b.Advance(t, 2*time.Hour)
	overturned := completion(idempotency.StatusFailed, idempotency.Response{Code: 402, Body: []byte("overturned")})
	tx := b.begin(t)
	for name, r := range map[string]idempotency.Request{"missing": missing, "expired": expired} {
		if ok, err := b.Store.SupersedeTx(b.ctx, tx, r.Scope, r.Key, overturned); ok || err != nil {
			t.Fatalf("supersede of a %s record: %v %v, want false", name, ok, err)
		}
	}
	b.commit(t, tx)
	b.wantNoRecord(t, missing)
	// Not revived: the expired record is new to a claim, never replayed.
	b.claim(t, "after the supersede", p, idempotency.ClaimAcquired)
}

// Leases tells a live lease from an ended one for the named records that
// exist, each under its own scope, and leaves out the others.
func testLeases[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	const shared = "usr_A1_createOrder_leases"
	claimFor := func(scope, key string, lock time.Duration) idempotency.Lease {
		p := idempotency.ClaimParams{Scope: scope, Key: key, Fingerprint: fp(t, "1"), LockTimeout: lock, Retention: 24 * time.Hour}
		return b.claim(t, scope+" "+key, p, idempotency.ClaimAcquired).Lease
	}
	live := claimFor(scopeA, key(t, scopeA, "live"), time.Hour)
	ended := claimFor(scopeA, key(t, scopeA, "ended"), time.Second)
	done := claimFor(scopeA, key(t, scopeA, "done"), time.Hour)
	if err := b.Store.Complete(b.ctx, done, completion(idempotency.StatusCompleted, okResponse())); err != nil {
		t.Fatal(err)
	}
	sharedA := claimFor(scopeA, shared, time.Hour)
	sharedB := claimFor(scopeB, shared, time.Second)
	b.Advance(t, 2*time.Second)

	ref := func(l idempotency.Lease) idempotency.RecordRef {
		return idempotency.RecordRef{Scope: l.Scope, Key: l.Key}
	}
	missing := idempotency.RecordRef{Scope: scopeA, Key: key(t, scopeA, "missing")}
	otherScope := idempotency.RecordRef{Scope: scopeB, Key: live.Key}
	got, err := b.Store.Leases(b.ctx, []idempotency.RecordRef{ref(live), ref(ended), ref(done), missing, otherScope, ref(sharedA), ref(sharedB)})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name   string
		lease  idempotency.Lease
		status idempotency.Status
		live   bool
	}{
		{"live", live, idempotency.StatusProcessing, true},
		{"ended", ended, idempotency.StatusProcessing, false},
		{"done", done, idempotency.StatusCompleted, false},
		{"shared in scope A", sharedA, idempotency.StatusProcessing, true},
		{"shared in scope B", sharedB, idempotency.StatusProcessing, false},
	}
	for _, w := range want {
		s, ok := got[ref(w.lease)]
		if !ok || s.Scope != w.lease.Scope || s.Key != w.lease.Key || s.Status != w.status ||
			s.LockVersion != w.lease.Version || s.Live() != w.live || s.DatabaseNow.IsZero() || s.CreatedAt.IsZero() {
			t.Fatalf("%s: %+v (present %v), want %s, live %v, lock version %d", w.name, s, ok, w.status, w.live, w.lease.Version)
		}
		if w.status == idempotency.StatusProcessing && s.LockedUntil == nil {
			t.Fatalf("%s: a record in progress without the end of its lease: %+v", w.name, s)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("leases of %d records, want %d (a missing record, or another scope's, is absent): %+v", len(got), len(want), got)
	}
	if got, err := b.Store.Leases(b.ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("no records named: %+v %v", got, err)
	}
}

// Every transactional call refuses a bad scope, key, claim or completion
// with an *idempotency.InvalidError naming the field, and changes nothing,
// even when its transaction commits.
func testTxBadInput[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	good := req(t, scopeA, "good", "1")
	wantInvalid := func(what, field string, err error) {
		t.Helper()
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != field {
			t.Fatalf("%s: err = %v, want an InvalidError naming %q", what, err, field)
		}
	}
	bad := map[string]func(p *idempotency.ClaimParams){
		"scope":          func(p *idempotency.ClaimParams) { p.Scope = "usr A" },
		"key":            func(p *idempotency.ClaimParams) { p.Key = "bad key\n" },
		"fingerprint":    func(p *idempotency.ClaimParams) { p.Fingerprint = "abc" },
		"LockTimeout":    func(p *idempotency.ClaimParams) { p.LockTimeout = 0 },
		"Retention":      func(p *idempotency.ClaimParams) { p.Retention = p.LockTimeout },
		"Expired":        func(p *idempotency.ClaimParams) { p.Expired = 7 },
		"RefusalHorizon": func(p *idempotency.ClaimParams) { p.RefusalHorizon = time.Hour },
	}
	for field, spoil := range bad {
		p := claimParams(good)
		spoil(&p)
		tx := b.begin(t)
		_, err := b.Store.ClaimTx(b.ctx, tx, p)
		wantInvalid("ClaimTx with a bad "+field, field, err)
		b.commit(t, tx)
		ran := false
		_, err = b.Store.RunTx(b.ctx, p, func(ctx context.Context, tx TTx, l idempotency.Lease) (idempotency.Completion, error) {
			ran = true
			return completion(idempotency.StatusCompleted, okResponse()), b.Write(ctx, tx, "bad "+field)
		})
		wantInvalid("RunTx with a bad "+field, field, err)
		if ran {
			t.Fatalf("RunTx with a bad %s ran its function", field)
		}
		b.wantWritten(t, "bad "+field, 0)
	}
	b.wantNoRecord(t, good)

	// A held record and a finished one, which bad completions must leave
	// as they are.
	held := b.claim(t, "holder", claimParams(good), idempotency.ClaimAcquired)
	finished := req(t, scopeA, "finished", "1")
	c := b.claim(t, "finished", claimParams(finished), idempotency.ClaimAcquired)
	if err := b.Store.Complete(b.ctx, c.Lease, completion(idempotency.StatusCompleted, okResponse())); err != nil {
		t.Fatal(err)
	}
	badCompletions := map[string]idempotency.Completion{
		"Completion.Status":    {Status: idempotency.StatusProcessing, Response: okResponse(), Retention: time.Hour},
		"Completion.Retention": {Status: idempotency.StatusCompleted, Response: okResponse()},
	}
	for field, done := range badCompletions {
		tx := b.begin(t)
		wantInvalid("CompleteTx with a bad "+field, field, b.Store.CompleteTx(b.ctx, tx, held.Lease, done))
		_, err := b.Store.SupersedeTx(b.ctx, tx, finished.Scope, finished.Key, done)
		wantInvalid("SupersedeTx with a bad "+field, field, err)
		b.commit(t, tx)
	}
	tx := b.begin(t)
	for field, ref := range map[string]idempotency.RecordRef{"scope": {Scope: "", Key: finished.Key}, "key": {Scope: scopeA, Key: "bad key\n"}} {
		_, err := b.Store.SupersedeTx(b.ctx, tx, ref.Scope, ref.Key, completion(idempotency.StatusFailed, okResponse()))
		wantInvalid("SupersedeTx with a bad "+field, field, err)
	}
	// A lease no claim gave holds no record: refused, whichever way.
	var ie *idempotency.InvalidError
	if err := b.Store.FenceTx(b.ctx, tx, idempotency.Lease{Scope: "usr A", Key: "bad key\n", Version: 1}); !errors.Is(err, idempotency.ErrLeaseLost) && !errors.As(err, &ie) {
		t.Fatalf("FenceTx of a bad lease: %v, want ErrLeaseLost or an InvalidError", err)
	}
	b.rollback(t, tx)
	b.wantRecord(t, good, idempotency.StatusProcessing, held.Lease.Version)
	replay := b.claim(t, "finished", claimParams(finished), idempotency.ClaimReplay)
	mustEqualResponse(t, *replay.Record.Response, okResponse())
	if replay.Record.Status != idempotency.StatusCompleted {
		t.Fatalf("a refused supersede changed the record: %s", recordString(replay.Record))
	}

	// A bad name is no record's: absent from Leases, or refused.
	badRef := idempotency.RecordRef{Scope: "usr A", Key: good.Key}
	got, err := b.Store.Leases(b.ctx, []idempotency.RecordRef{badRef})
	if err != nil && !errors.As(err, &ie) || len(got) != 0 {
		t.Fatalf("Leases of a bad name: %+v %v, want nothing or an InvalidError", got, err)
	}

	// The executor's transactional calls refuse a bad request first.
	r := idempotency.Request{Scope: scopeA, Key: "bad key\n", Fingerprint: good.Fingerprint}
	_, err = b.exec.DoTx(b.ctx, r, func(ctx context.Context, tx TTx) (idempotency.Response, error) {
		b.calls.n.Add(1)
		return okResponse(), nil
	})
	wantInvalid("DoTx with a bad key", "key", err)
	_, err = b.exec.WithTx().Do(b.ctx, r, b.calls.action(okResponse()))
	wantInvalid("WithTx with a bad key", "key", err)
	if b.calls.n.Load() != 0 {
		t.Fatal("a bad request ran its action")
	}
}
