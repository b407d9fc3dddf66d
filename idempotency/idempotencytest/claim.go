package idempotencytest

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// claimChecks: the first request executes, once, however many duplicates
// arrive at the same time; the others are replays or told it is in
// progress.
var claimChecks = []check{
	{"FirstExecutesAndIsStored", testFirstExecutes},
	{"ConcurrentDuplicatesOneExecution", testConcurrentDuplicates},
}

func testFirstExecutes(t *testing.T, h Harness) {
	b := setup(t, h, nil)
	r := req(t, scopeA, "k1", "49.99")
	res := b.mustDo(t, r, b.calls.action(okResponse()))
	if res.Replayed || res.Status != idempotency.StatusCompleted || b.calls.n.Load() != 1 {
		t.Fatalf("first request: replayed=%v status=%s executions=%d", res.Replayed, res.Status, b.calls.n.Load())
	}
	mustEqualResponse(t, res.Response, okResponse())
	rec, err := b.Store.Get(b.ctx, r.Scope, r.Key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != idempotency.StatusCompleted || rec.Response == nil {
		t.Fatalf("stored record: %+v", rec)
	}
	mustEqualResponse(t, *rec.Response, okResponse())
	if !rec.Fingerprint.Equal(r.Fingerprint) {
		t.Fatal("stored fingerprint differs")
	}
}

func testConcurrentDuplicates(t *testing.T, h Harness) {
	b := setup(t, h, nil)
	r := req(t, scopeA, "storm", "10")
	const n = 64
	var replays, inProgress, executed atomic.Int64
	storm(n, func() {
		res, err := b.exec.Do(b.ctx, r, b.calls.slowAction(50*time.Millisecond, okResponse()))
		switch {
		case errors.Is(err, idempotency.ErrInProgress):
			inProgress.Add(1)
		case err != nil:
			t.Errorf("Do: %v", err)
		case res.Replayed:
			replays.Add(1)
			mustEqualResponse(t, res.Response, okResponse())
		default:
			executed.Add(1)
		}
	})
	if b.calls.n.Load() != 1 || executed.Load() != 1 {
		t.Fatalf("executions = %d (executed answers %d), want exactly 1", b.calls.n.Load(), executed.Load())
	}
	if replays.Load()+inProgress.Load() != n-1 {
		t.Fatalf("replays %d + in progress %d != %d", replays.Load(), inProgress.Load(), n-1)
	}
	res, err := b.exec.Do(b.ctx, r, b.calls.action(okResponse()))
	if err != nil || !res.Replayed {
		t.Fatalf("after the storm: replayed=%v err=%v", res.Replayed, err)
	}
}
