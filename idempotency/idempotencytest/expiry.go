package idempotencytest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// expiryChecks: past its retention a record is gone (a new request, never
// a stale replay) or, with ExpiredRefused, refused, and still refused after
// a prune (a tombstone without the response) until its refusal horizon has
// passed; Prune deletes expired records in batches and never a PROCESSING
// or unexpired one.
var expiryChecks = []check{
	{"ExpiredIsNew", testExpiredIsNew},
	{"ExpiredRefused", testExpiredRefused},
	{"RefusedAfterPrune", testRefusedAfterPrune},
	{"TombstonePrunedAfterHorizon", testTombstonePrunedAfterHorizon},
	{"TombstoneRenewedUnderExpiredIsNew", testTombstoneRenewed},
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

// prune runs one pass of a Pruner with small batches over the store, and
// stops the check unless it took want records (deleted or reduced to
// tombstones).
func (b *bundle) prune(t *testing.T, want int) {
	t.Helper()
	p, err := idempotency.NewPruner(b.Store, &idempotency.PrunerConfig{BatchSize: 2, Pause: -1})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := p.RunOnce(b.ctx)
	if err != nil || rep.Deleted != want || !rep.Drained {
		t.Fatalf("prune pass: %+v, %v; want %d record(s) taken and the backlog drained", rep, err, want)
	}
}

// wantTombstone stops the check unless r's record is a tombstone of was:
// the same scope, key, fingerprint, status, lock version and expiry,
// refusing until horizon past that expiry, and nothing of the response.
func (b *bundle) wantTombstone(t *testing.T, r idempotency.Request, was idempotency.Record, horizon time.Duration) {
	t.Helper()
	got, err := b.Store.Get(b.ctx, r.Scope, r.Key)
	if err != nil {
		t.Fatalf("the tombstone is gone: %v", err)
	}
	if got.Response != nil {
		t.Fatalf("the pruned record still holds its response: %s", recordString(got))
	}
	if !got.Fingerprint.Equal(was.Fingerprint) || got.Status != was.Status || got.LockVersion != was.LockVersion {
		t.Fatalf("tombstone %s\n of record %s", recordString(got), recordString(was))
	}
	// The harness moves every timestamp together: compare the horizon,
	// not the instants.
	if d := got.RefuseUntil.Sub(got.ExpiresAt); d != horizon {
		t.Fatalf("tombstone refuses until %s past its expiry, want %s: %s", d, horizon, recordString(got))
	}
}

// A record written under ExpiredRefused keeps refusing its key after the
// pruner has taken it: the same request and any other with its key get
// ErrExpired and never run, and the response is gone from the store.
func testRefusedAfterPrune(t *testing.T, h Harness) {
	b := setup(t, h, &idempotency.Config{Retention: time.Hour, Expired: idempotency.ExpiredRefused})
	r := req(t, scopeA, "refused", "10")
	other := req(t, scopeA, "other", "10") // ExpiredIsNew's: pruned as before
	b.mustDo(t, r, b.calls.action(okResponse()))
	isNew, err := idempotency.New(b.Store, &idempotency.Config{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := isNew.Do(b.ctx, other, b.calls.action(okResponse())); err != nil {
		t.Fatal(err)
	}
	was, err := b.Store.Get(b.ctx, r.Scope, r.Key)
	if err != nil {
		t.Fatal(err)
	}
	b.Advance(t, 2*time.Hour)
	b.prune(t, 2)
	for _, again := range []idempotency.Request{r, req(t, scopeA, "refused", "11")} {
		if res, err := b.exec.Do(b.ctx, again, b.calls.action(okResponse())); !errors.Is(err, idempotency.ErrExpired) {
			t.Fatalf("after the prune: replayed=%v err=%v, want ErrExpired", res.Replayed, err)
		}
	}
	b.wantExecutions(t, 2)
	b.wantTombstone(t, r, was, idempotency.DefaultRefusalHorizon)
	if _, err := b.Store.Get(b.ctx, other.Scope, other.Key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("a record written under ExpiredIsNew must be deleted when pruned: %v", err)
	}
	// The tombstone is not taken again before its horizon: a pass finds
	// nothing to do.
	b.prune(t, 0)
	b.wantTombstone(t, r, was, idempotency.DefaultRefusalHorizon)
}

// Once its refusal horizon has passed, the pruner deletes the tombstone,
// and the key is forgotten: a request with it is new and runs.
func testTombstonePrunedAfterHorizon(t *testing.T, h Harness) {
	const horizon = 24 * time.Hour
	cfg := &idempotency.Config{Retention: time.Hour, Expired: idempotency.ExpiredRefused, RefusalHorizon: horizon}
	b := setup(t, h, cfg)
	r := req(t, scopeA, "horizon", "10")
	b.mustDo(t, r, b.calls.action(okResponse()))
	was, err := b.Store.Get(b.ctx, r.Scope, r.Key)
	if err != nil {
		t.Fatal(err)
	}
	b.Advance(t, 2*time.Hour)
	b.prune(t, 1)
	b.Advance(t, horizon-2*time.Hour) // an hour before the horizon ends
	b.prune(t, 0)
	if _, err := b.exec.Do(b.ctx, r, b.calls.action(okResponse())); !errors.Is(err, idempotency.ErrExpired) {
		t.Fatalf("within the horizon: err = %v, want ErrExpired", err)
	}
	b.wantTombstone(t, r, was, horizon)
	b.Advance(t, 2*time.Hour)
	b.prune(t, 1)
	if rec, err := b.Store.Get(b.ctx, r.Scope, r.Key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("past the horizon the tombstone must be deleted: %s, %v", recordString(rec), err)
	}
	res := b.mustDo(t, r, b.calls.action(idempotency.Response{Code: 201, Body: []byte("anew")}))
	if res.Replayed || string(res.Response.Body) != "anew" {
		t.Fatalf("past the horizon the request is new: replayed=%v body=%q", res.Replayed, res.Response.Body)
	}
	b.wantExecutions(t, 2)
	if res := b.mustDo(t, r, b.calls.action(okResponse())); !res.Replayed {
		t.Fatal("the new record must replay")
	}
	b.wantExecutions(t, 2)
}

// Under ExpiredIsNew (a configuration that changed since the record was
// written), a tombstone is renewed as an expired record is: the request
// runs, the lock version grows, and the new record, written under
// ExpiredIsNew, is deleted when it is pruned.
func testTombstoneRenewed(t *testing.T, h Harness) {
	b := setup(t, h, &idempotency.Config{Retention: time.Hour, Expired: idempotency.ExpiredRefused})
	r := req(t, scopeA, "renewed", "10")
	b.mustDo(t, r, b.calls.action(okResponse()))
	b.Advance(t, 2*time.Hour)
	b.prune(t, 1)
	tomb, err := b.Store.Get(b.ctx, r.Scope, r.Key)
	if err != nil || tomb.RefuseUntil.IsZero() {
		t.Fatalf("no tombstone: %s, %v", recordString(tomb), err)
	}
	isNew, err := idempotency.New(b.Store, &idempotency.Config{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	res, err := isNew.Do(b.ctx, req(t, scopeA, "renewed", "11"), b.calls.action(idempotency.Response{Code: 201, Body: []byte("renewed")}))
	if err != nil || res.Replayed || string(res.Response.Body) != "renewed" {
		t.Fatalf("renewal: replayed=%v body=%q err=%v", res.Replayed, res.Response.Body, err)
	}
	b.wantExecutions(t, 2)
	rec, err := b.Store.Get(b.ctx, r.Scope, r.Key)
	if err != nil || rec.LockVersion <= tomb.LockVersion || !rec.RefuseUntil.IsZero() || rec.Response == nil {
		t.Fatalf("renewed record %s (%v), tombstone at lock version %d", recordString(rec), err, tomb.LockVersion)
	}
	b.Advance(t, 2*time.Hour)
	b.prune(t, 1)
	if _, err := b.Store.Get(b.ctx, r.Scope, r.Key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("a record renewed under ExpiredIsNew must be deleted when pruned: %v", err)
	}
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
