package idempotencytest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// leaseChecks: a holder's lease. An orphaned record (its holder crashed)
// is reclaimed by exactly one of many retries; the old holder is fenced
// out of every write, also once its record was pruned and the key claimed
// anew; heartbeats keep a long action's lease, also while a slow store
// records its outcome; an action whose lease is lost is cancelled, and
// so is one whose heartbeats fail, before another holder can reclaim the
// key.
var leaseChecks = []check{
	{"OrphanReclaimOneWinner", testOrphanReclaim},
	{"OldHolderFenced", testFencing},
	{"HeartbeatKeepsLongAction", testHeartbeat},
	{"LostLeaseCancelsAction", testLostLease},
	{"StalledHolderFencedAfterPrune", testStalledAfterPrune},
	{"FailingHeartbeatsStopHolder", testFailingHeartbeats},
	{"SlowCompletionKeepsLease", testSlowCompletion},
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
	p, holderA, holderB := b.reclaimed(t, r)
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

// A heartbeat keeps the lease of an action longer than the lease: a
// duplicate that comes once the lease would have run out without them is
// told "in progress".
func testHeartbeat(t *testing.T, h Harness) {
	cfg := &idempotency.Config{LockTimeout: 1500 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond}
	hb := newHeartbeats(h.Store)
	h.Store = hb
	b := setup(t, h, cfg)
	r := req(t, scopeA, "long", "10")
	res, err := b.exec.Do(b.ctx, r, func(ctx context.Context) (idempotency.Response, error) {
		b.calls.n.Add(1)
		n := hb.waitSpan(ctx, cfg.LockTimeout, cfg.HeartbeatInterval)
		if _, err := b.exec.Do(b.ctx, r, b.calls.action(okResponse())); !errors.Is(err, idempotency.ErrInProgress) {
			t.Errorf("duplicate %d heartbeats into an action longer than its lease: %v, want in progress (the lease must be kept alive)", n, err)
		}
		if err := idempotency.CheckLease(ctx); err != nil {
			t.Errorf("CheckLease of a healthy holder %d heartbeats into its action: %v", n, err)
		}
		return okResponse(), nil
	})
	if err != nil || res.Status != idempotency.StatusCompleted {
		t.Fatalf("long action: %+v %v", res, err)
	}
	b.wantExecutions(t, 1)
}

func testLostLease(t *testing.T, h Harness) {
	b := setup(t, h, &idempotency.Config{LockTimeout: 2 * time.Second, HeartbeatInterval: 50 * time.Millisecond})
	r := req(t, scopeA, "lost", "10")
	done := b.doInBackground(t, r, func(ctx context.Context) (idempotency.Response, error) {
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

var errUnreachable = errors.New("dial tcp: connect: no route to host")

// cutOff is the store as seen from a node that lost its way to it just
// after the claim: every heartbeat fails with a transport error.
type cutOff struct{ idempotency.Store }

func (cutOff) Heartbeat(context.Context, idempotency.Lease, time.Duration) error {
	return errUnreachable
}

// inProgressRetry runs r on exec as a client told "in progress" does,
// again after the Retry-After it was given, until an answer is not "in
// progress" or stop is closed.
func inProgressRetry(ctx context.Context, exec *idempotency.Executor, r idempotency.Request, action idempotency.Action, stop <-chan struct{}) (idempotency.Result, error) {
	for {
		res, err := exec.Do(ctx, r, action)
		var ip *idempotency.InProgressError
		if !errors.As(err, &ip) {
			return res, err
		}
		select {
		case <-stop:
			return res, err
		case <-ctx.Done():
			return res, err
		case <-time.After(min(ip.RetryAfter, 50*time.Millisecond)):
		}
	}
}

// A holder whose heartbeats fail is cancelled (the cause matches
// ErrLeaseLost) and refused new external calls before its lease can end
// in the store, so the instance that then reclaims the key never runs
// beside it; its outcome, should it return one anyway, is not recorded.
//
// The holder stops LockTimeout minus LeaseMargin after its claim was sent
// (1s); the store's lease ends LockTimeout after it received the claim
// (3s at the earliest): the two seconds of difference are for the
// holder's cancellation timer to fire on a loaded machine.
func testFailingHeartbeats(t *testing.T, h Harness) {
	cfg := &idempotency.Config{LockTimeout: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond, LeaseMargin: 2 * time.Second}
	store := h.Store
	h.Store = cutOff{store}
	b := setup(t, h, cfg)
	second, err := idempotency.New(store, cfg) // another instance, which reaches the store
	if err != nil {
		t.Fatal(err)
	}
	r := req(t, scopeA, "cut-off", "10")
	type stopped struct {
		cause, check error
	}
	firstStopped := make(chan stopped, 1)
	secondDone := make(chan struct{})
	ctxs := make(chan context.Context, 1)
	firstDone := b.doInBackground(t, r, func(ctx context.Context) (idempotency.Response, error) {
		ctxs <- ctx
		b.calls.n.Add(1)
		<-ctx.Done()
		firstStopped <- stopped{context.Cause(ctx), idempotency.CheckLease(ctx)}
		// A stale holder that ignores its cancellation and returns an
		// outcome once the other instance recorded its own.
		<-secondDone
		return idempotency.Response{Code: 201, Body: []byte("stale")}, nil
	})
	firstCtx := <-ctxs

	var firstRunning bool
	res, err := inProgressRetry(b.ctx, second, r, func(context.Context) (idempotency.Response, error) {
		b.calls.n.Add(1)
		firstRunning = firstCtx.Err() == nil
		return idempotency.Response{Code: 201, Body: []byte("second")}, nil
	}, nil)
	close(secondDone)
	if err != nil || !res.Reclaimed {
		t.Fatalf("second instance: %+v %v, want a reclaim once the first holder's lease ended", res, err)
	}
	if firstRunning {
		t.Fatal("the second instance ran the action while the first holder, whose heartbeats failed, was still running it")
	}
	st := <-firstStopped
	if !errors.Is(st.cause, idempotency.ErrLeaseLost) {
		t.Fatalf("first holder cancelled with cause %v, want one matching ErrLeaseLost", st.cause)
	}
	if !errors.Is(st.check, idempotency.ErrLeaseLost) {
		t.Fatalf("CheckLease of the cancelled holder: %v, want ErrLeaseLost", st.check)
	}
	if err := <-firstDone; !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("first holder's Do: %v, want ErrLeaseLost (its outcome must not be recorded)", err)
	}
	rec, err := store.Get(b.ctx, r.Scope, r.Key)
	if err != nil || rec.Status != idempotency.StatusCompleted || rec.Response == nil || string(rec.Response.Body) != "second" {
		t.Fatalf("record: %s %v, want the second instance's outcome", recordString(rec), err)
	}
	b.wantExecutions(t, 2)
}

// heartbeats is a store that reports the heartbeats it confirmed.
type heartbeats struct {
	idempotency.Store
	beats chan struct{} // one per confirmed heartbeat
}

func newHeartbeats(s idempotency.Store) *heartbeats {
	return &heartbeats{Store: s, beats: make(chan struct{}, 64)}
}

func (s *heartbeats) Heartbeat(ctx context.Context, l idempotency.Lease, d time.Duration) error {
	err := s.Store.Heartbeat(ctx, l, d)
	if err == nil {
		select {
		case s.beats <- struct{}{}:
		default:
		}
	}
	return err
}

// waitSpan waits until the heartbeats confirmed from now on span more
// than lease, so that without them the lease would have run out, or
// until none came for twice lease, or ctx ends. It returns how many came.
func (s *heartbeats) waitSpan(ctx context.Context, lease, interval time.Duration) int {
	for drained := false; !drained; { // only heartbeats from now on count
		select {
		case <-s.beats:
		default:
			drained = true
		}
	}
	// Heartbeats go out at least one interval apart: this many span more
	// than the lease, even counting one sent before the wait began.
	need := int(lease/interval) + 3
	silence := time.NewTimer(2 * lease)
	defer silence.Stop()
	seen := 0
	for seen < need {
		select {
		case <-s.beats:
			seen++
			silence.Reset(2 * lease)
		case <-silence.C: // no heartbeats: the lease has run out
			return seen
		case <-ctx.Done():
			return seen
		}
	}
	return seen
}

// slowCompletion holds the first Complete until the heartbeats confirmed
// meanwhile span more than the lease (see waitSpan); then, before
// recording, it lets a duplicate try the key once.
type slowCompletion struct {
	*heartbeats
	lease, interval time.Duration
	duplicate       func()
	completing      chan struct{}
	once            sync.Once
	seen            int // heartbeats confirmed while the first Complete waited
}

func (s *slowCompletion) Complete(ctx context.Context, l idempotency.Lease, c idempotency.Completion) error {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.completing)
		s.seen = s.waitSpan(ctx, s.lease, s.interval)
		s.duplicate()
	}
	return s.Store.Complete(ctx, l, c)
}

// Recording an outcome may take longer than the lease (FinishTimeout is
// 10s by default): the heartbeats go on until it is recorded, so a
// duplicate that comes once the lease would have run out without them is
// told "in progress" and no other holder runs the action; the duplicate
// then replays the outcome.
func testSlowCompletion(t *testing.T, h Harness) {
	cfg := &idempotency.Config{LockTimeout: 1500 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond}
	store := h.Store
	slow := &slowCompletion{heartbeats: newHeartbeats(store), lease: cfg.LockTimeout, interval: cfg.HeartbeatInterval,
		completing: make(chan struct{})}
	h.Store = slow
	b := setup(t, h, cfg)
	second, err := idempotency.New(store, cfg) // another instance
	if err != nil {
		t.Fatal(err)
	}
	r := req(t, scopeA, "slow-completion", "10")
	var during error
	slow.duplicate = func() {
		_, during = second.Do(b.ctx, r, func(context.Context) (idempotency.Response, error) {
			b.calls.n.Add(1)
			return idempotency.Response{Code: 201, Body: []byte("second")}, nil
		})
	}
	firstDone := b.doInBackground(t, r, b.calls.action(idempotency.Response{Code: 201, Body: []byte("first")}))
	<-slow.completing
	firstErr := <-firstDone
	if !errors.Is(during, idempotency.ErrInProgress) || b.calls.n.Load() != 1 {
		t.Fatalf("duplicate while the first holder recorded its outcome, %d heartbeats into it: %v, %d executions; "+
			"want in progress and 1 (the lease must be kept until the outcome is recorded)", slow.seen, during, b.calls.n.Load())
	}
	if firstErr != nil {
		t.Fatalf("first holder: %v", firstErr)
	}
	if res, err := second.Do(b.ctx, r, b.calls.action(okResponse())); err != nil || !res.Replayed || string(res.Response.Body) != "first" {
		t.Fatalf("duplicate after the recording: %+v %v, want a replay of the first outcome", res, err)
	}
	b.wantExecutions(t, 1)
}
