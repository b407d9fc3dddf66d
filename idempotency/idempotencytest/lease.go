package idempotencytest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// leaseChecks: a holder's lease. An orphaned record (its holder crashed)
// is reclaimed by exactly one of many retries; the old holder is fenced
// out of every write, also once its record was pruned and the key claimed
// anew; a heartbeat keeps a long action's lease; an action whose lease is
// lost is cancelled.
var leaseChecks = []check{
	{"OrphanReclaimOneWinner", testOrphanReclaim},
	{"OldHolderFenced", testFencing},
	{"HeartbeatKeepsLongAction", testHeartbeat},
	{"LostLeaseCancelsAction", testLostLease},
	{"StalledHolderFencedAfterPrune", testStalledAfterPrune},
}

func testOrphanReclaim(t *testing.T, h Harness) {
	b := setup(t, h, &idempotency.Config{LockTimeout: 2 * time.Second})
	r := req(t, scopeA, "orphan", "10")
	// A holder claims and "crashes": it never completes or releases.
	p := claimParams(r)
	p.LockTimeout, p.Retention = 2*time.Second, time.Hour
	first := b.claim(t, "first", p, idempotency.ClaimAcquired)
	if _, err := b.exec.Do(b.ctx, r, b.calls.action(okResponse())); !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("before the lock timeout: err = %v, want in progress", err)
	}
	b.Advance(t, 3*time.Second)
	const n = 32
	var reclaimed atomic.Int64
	storm(n, func() {
		res, err := b.exec.Do(b.ctx, r, b.calls.slowAction(20*time.Millisecond, okResponse()))
		if err != nil && !errors.Is(err, idempotency.ErrInProgress) {
			t.Errorf("Do: %v", err)
		}
		if err == nil && res.Reclaimed {
			reclaimed.Add(1)
		}
	})
	if b.calls.n.Load() != 1 || reclaimed.Load() != 1 {
		t.Fatalf("executions = %d, reclaims = %d; want exactly one of each", b.calls.n.Load(), reclaimed.Load())
	}
	rec, err := b.Store.Get(b.ctx, r.Scope, r.Key)
	if err != nil || rec.Status != idempotency.StatusCompleted || rec.LockVersion <= first.Lease.Version {
		t.Fatalf("after reclaim: %+v %v", rec, err)
	}
}

func testFencing(t *testing.T, h Harness) {
	b := setup(t, h, nil)
	r := req(t, scopeA, "fence", "10")
	p := claimParams(r)
	p.LockTimeout = time.Second
	holderA := b.claim(t, "A", p, idempotency.ClaimAcquired)
	b.Advance(t, 2*time.Second)
	holderB := b.claim(t, "B", p, idempotency.ClaimReclaimed)
	if holderB.Lease.Version == holderA.Lease.Version {
		t.Fatalf("B claim: %v %+v, the lock version did not change", holderB.State, holderB.Lease)
	}
	bResp := idempotency.Response{Code: 201, Body: []byte("B")}
	aResp := idempotency.Response{Code: 201, Body: []byte("A")}
	done := idempotency.Completion{Status: idempotency.StatusCompleted, Response: aResp, Retention: time.Hour}
	for name, err := range map[string]error{
		"heartbeat": b.Store.Heartbeat(b.ctx, holderA.Lease, time.Minute),
		"release":   b.Store.Release(b.ctx, holderA.Lease),
		"complete":  b.Store.Complete(b.ctx, holderA.Lease, done),
	} {
		if !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Fatalf("old holder's %s: err = %v, want ErrLeaseLost", name, err)
		}
	}
	rec, _ := b.Store.Get(b.ctx, r.Scope, r.Key)
	if rec.Status != idempotency.StatusProcessing || rec.LockVersion != holderB.Lease.Version {
		t.Fatalf("old holder changed the record: %+v", rec)
	}
	if err := b.Store.Complete(b.ctx, holderB.Lease, idempotency.Completion{Status: idempotency.StatusCompleted, Response: bResp, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := b.Store.Complete(b.ctx, holderA.Lease, done); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("old holder after B completed: %v", err)
	}
	replay := b.claim(t, "replay", p, idempotency.ClaimReplay)
	mustEqualResponse(t, *replay.Record.Response, bResp)
}

func testHeartbeat(t *testing.T, h Harness) {
	b := setup(t, h, &idempotency.Config{LockTimeout: 400 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond})
	r := req(t, scopeA, "long", "10")
	done := b.doInBackground(r, func(ctx context.Context) (idempotency.Response, error) {
		b.calls.n.Add(1)
		select { // four lock timeouts long
		case <-time.After(1600 * time.Millisecond):
		case <-ctx.Done():
			return idempotency.Response{}, context.Cause(ctx)
		}
		return okResponse(), nil
	})
	deadline := time.Now().Add(1400 * time.Millisecond)
	for time.Now().Before(deadline) {
		_, err := b.exec.Do(b.ctx, r, b.calls.action(okResponse()))
		if !errors.Is(err, idempotency.ErrInProgress) {
			t.Fatalf("during the long action: err = %v, want in progress (the lease must be kept alive)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Fatalf("long action: %v", err)
	}
	b.wantExecutions(t, 1)
}

func testLostLease(t *testing.T, h Harness) {
	b := setup(t, h, &idempotency.Config{LockTimeout: 2 * time.Second, HeartbeatInterval: 50 * time.Millisecond})
	r := req(t, scopeA, "lost", "10")
	done := b.doInBackground(r, func(ctx context.Context) (idempotency.Response, error) {
		<-ctx.Done() // runs until told its lease is gone
		return okResponse(), nil
	})
	p := claimParams(r)
	p.LockTimeout = 2 * time.Second
	var next idempotency.Claim
	// A heartbeat may land between Advance and Claim and renew the lease:
	// then time passes again.
	for i := 0; i < 10; i++ {
		b.Advance(t, 3*time.Second)
		var err error
		next, err = b.Store.Claim(b.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if next.State != idempotency.ClaimInProgress {
			break
		}
	}
	if next.State != idempotency.ClaimReclaimed {
		t.Fatalf("reclaim: %v", next.State)
	}
	select {
	case err := <-done:
		if !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Fatalf("old holder: err = %v, want ErrLeaseLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the old holder's action was not cancelled after losing its lease")
	}
	rec, _ := b.Store.Get(b.ctx, r.Scope, r.Key)
	if rec.Status != idempotency.StatusProcessing || rec.LockVersion != next.Lease.Version {
		t.Fatalf("old holder changed the record: %+v", rec)
	}
}

// A holder stalls past its lease; another reclaims and completes; the
// record expires and is pruned; the key is claimed anew. The stalled
// holder's old fencing token must not be valid for the new record.
func testStalledAfterPrune(t *testing.T, h Harness) {
	b := setup(t, h, nil)
	r := req(t, scopeA, "stalled", "10")
	p := claimParams(r)
	p.LockTimeout, p.Retention = time.Second, time.Hour
	stalled := b.claim(t, "A", p, idempotency.ClaimAcquired)
	b.Advance(t, 2*time.Second)
	reclaimer := b.claim(t, "B", p, idempotency.ClaimReclaimed)
	done := idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 201}, Retention: time.Hour}
	if err := b.Store.Complete(b.ctx, reclaimer.Lease, done); err != nil {
		t.Fatal(err)
	}
	b.Advance(t, 2*time.Hour)
	if n, err := b.Store.Prune(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	b.claim(t, "C", p, idempotency.ClaimAcquired)
	stale := idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 200, Body: []byte("stale")}, Retention: time.Hour}
	if err := b.Store.Complete(b.ctx, stalled.Lease, stale); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("stalled holder's complete on the new record: err = %v, want ErrLeaseLost", err)
	}
	rec, err := b.Store.Get(b.ctx, r.Scope, r.Key)
	if err != nil || rec.Status != idempotency.StatusProcessing {
		t.Fatalf("new record changed by the stalled holder: %+v %v", rec, err)
	}
}
