package idempotencytest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// expiryChecks: past its retention a record is gone (a new request, never
// a stale replay) or, with ExpiredRefused, refused; Prune deletes expired
// records in batches and never a PROCESSING or unexpired one.
var expiryChecks = []check{
	{"ExpiredIsNew", testExpiredIsNew},
	{"ExpiredRefused", testExpiredRefused},
	{"PruneNeverRemovesProcessing", testPrune},
}

func testExpiredIsNew(t *testing.T, h Harness) {
	b := setup(t, h, &idempotency.Config{Retention: time.Hour})
	r := req(t, scopeA, "old", "10")
	b.mustDo(t, r, b.calls.action(idempotency.Response{Code: 201, Body: []byte("first")}))
	before, _ := b.Store.Get(b.ctx, r.Scope, r.Key)
	b.Advance(t, 2*time.Hour)
	// Even with other fields: an expired record is gone, not a mismatch.
	res, err := b.exec.Do(b.ctx, req(t, scopeA, "old", "11"), b.calls.action(idempotency.Response{Code: 201, Body: []byte("second")}))
	if err != nil || res.Replayed {
		t.Fatalf("after expiry: replayed=%v err=%v (stale data must never be replayed)", res.Replayed, err)
	}
	if b.calls.n.Load() != 2 || string(res.Response.Body) != "second" {
		t.Fatalf("executions = %d body = %q", b.calls.n.Load(), res.Response.Body)
	}
	after, _ := b.Store.Get(b.ctx, r.Scope, r.Key)
	if after.LockVersion <= before.LockVersion {
		t.Fatalf("lock version must grow across renewal: %d -> %d", before.LockVersion, after.LockVersion)
	}
}

func testExpiredRefused(t *testing.T, h Harness) {
	b := setup(t, h, &idempotency.Config{Retention: time.Hour, Expired: idempotency.ExpiredRefused})
	r := req(t, scopeA, "old", "10")
	b.mustDo(t, r, b.calls.action(okResponse()))
	b.Advance(t, 2*time.Hour)
	if _, err := b.exec.Do(b.ctx, r, b.calls.action(okResponse())); !errors.Is(err, idempotency.ErrExpired) {
		t.Fatalf("err = %v, want ErrExpired", err)
	}
	b.wantExecutions(t, 1)
}

func testPrune(t *testing.T, h Harness) {
	b := setup(t, h, &idempotency.Config{Retention: time.Hour})
	for i := 0; i < 25; i++ {
		b.mustDo(t, req(t, scopeA, fmt.Sprintf("done%d", i), "1"), b.calls.action(okResponse()))
	}
	stuck := req(t, scopeA, "stuck", "1")
	p := claimParams(stuck)
	p.Retention = time.Hour
	b.claim(t, "stuck", p, idempotency.ClaimAcquired)
	fresh := req(t, scopeA, "fresh", "1")
	b.Advance(t, 2*time.Hour)
	b.mustDo(t, fresh, b.calls.action(okResponse()))
	total := 0
	for {
		n, err := b.Store.Prune(b.ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if n > 10 {
			t.Fatalf("a batch of 10 deleted %d", n)
		}
		total += n
		if n == 0 {
			break
		}
	}
	if total != 25 {
		t.Fatalf("pruned %d, want 25", total)
	}
	if rec, err := b.Store.Get(b.ctx, stuck.Scope, stuck.Key); err != nil || rec.Status != idempotency.StatusProcessing {
		t.Fatalf("PROCESSING record pruned: %v", err)
	}
	if _, err := b.Store.Get(b.ctx, fresh.Scope, fresh.Key); err != nil {
		t.Fatalf("unexpired record pruned: %v", err)
	}
	if _, err := b.Store.Prune(b.ctx, 0); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("Prune(0): %v", err)
	}
}
