// Package idempotencytest is the conformance suite that every
// [idempotency.Store] must pass. Run it from a test of the implementation:
//
//	func TestConformance(t *testing.T) {
//		idempotencytest.Exercise(t, func(t *testing.T) idempotencytest.Harness {
//			return idempotencytest.Harness{Store: newStore(t), Advance: ...}
//		})
//	}
//
// Each check asserts the promise (one execution, replays byte for byte,
// refusals that change nothing, fencing), not the store's internals.
package idempotencytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// Harness is one fresh, empty store for one check.
type Harness struct {
	Store idempotency.Store
	// Advance makes d pass for every record of the store, as the store's
	// clock sees it: memstore moves its clock; pgstore shifts the records'
	// timestamps back by d (the database clock cannot be moved).
	Advance func(t testing.TB, d time.Duration)
}

// Exercise runs every check, each on a fresh harness, in parallel.
func Exercise(t *testing.T, newHarness func(t *testing.T) Harness) {
	checks := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"HappyPath", testHappyPath},
		{"ReplayDoesNotReExecute", testReplay},
		{"MismatchRefusedRecordUntouched", testMismatch},
		{"ConcurrentClaimsOneExecution", testConcurrent},
		{"OrphanReclaimOneWinner", testOrphanReclaim},
		{"OldHolderFenced", testFencing},
		{"HeartbeatKeepsLongActionsLease", testHeartbeat},
		{"LostLeaseCancelsAction", testLostLease},
		{"PermanentErrorStoredAndReplayed", testPermanent},
		{"TransientErrorReleasesLock", testTransient},
		{"PanicReleasesLock", testPanic},
		{"ContextCancelled", testContextCancel},
		{"ExpiredIsNew", testExpiredIsNew},
		{"ExpiredRefused", testExpiredRefused},
		{"PruneNeverRemovesProcessing", testPrune},
		{"StalledHolderFencedAfterPrune", testStalledAfterPrune},
		{"ScopesIsolated", testScopes},
		{"BadInputChangesNothing", testBadInput},
		{"AbandonLeavesNoRecord", testAbandon},
		{"ForeignKeyRefused", testForeign},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, newHarness(t))
		})
	}
}

const (
	scopeA = "usr_A1"
	scopeB = "usr_B2"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func key(t *testing.T, scope, intent string) string {
	t.Helper()
	k, err := idempotency.ComposeKey(scope, "createOrder", intent)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func fp(t *testing.T, amount string) idempotency.Fingerprint {
	t.Helper()
	f, err := idempotency.NewFingerprint().Decimal("amount", amount).String("currency", "EUR").Sum()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func req(t *testing.T, scope, intent, amount string) idempotency.Request {
	return idempotency.Request{Scope: scope, Key: key(t, scope, intent), Fingerprint: fp(t, amount)}
}

func executor(t *testing.T, h Harness, cfg *idempotency.Config) *idempotency.Executor {
	t.Helper()
	e, err := idempotency.New(h.Store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// counter is an action's side effect, counted.
type counter struct{ n atomic.Int64 }

func (c *counter) action(resp idempotency.Response) idempotency.Action {
	return func(ctx context.Context) (idempotency.Response, error) {
		c.n.Add(1)
		return resp, nil
	}
}

// A body that is not JSON and whose bytes would not survive a JSON
// round trip: replays must give it back byte for byte.
var oddBody = []byte("{\"b\": 2,  \"a\":1}\n\x00\xff not json")

func okResponse() idempotency.Response {
	return idempotency.Response{Code: 201, Header: http.Header{"Content-Type": {"text/plain"}, "X-Order": {"o_1"}}, Body: oddBody}
}

func mustEqualResponse(t *testing.T, got, want idempotency.Response) {
	t.Helper()
	if got.Code != want.Code || !bytes.Equal(got.Body, want.Body) || fmt.Sprint(got.Header) != fmt.Sprint(want.Header) {
		t.Fatalf("response differs:\n got  %d %v %q\n want %d %v %q", got.Code, got.Header, got.Body, want.Code, want.Header, want.Body)
	}
}

func testHappyPath(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, nil)
	var c counter
	r := req(t, scopeA, "k1", "49.99")
	res, err := e.Do(ctx, r, c.action(okResponse()))
	if err != nil {
		t.Fatal(err)
	}
	if res.Replayed || res.Status != idempotency.StatusCompleted || c.n.Load() != 1 {
		t.Fatalf("first request: replayed=%v status=%s executions=%d", res.Replayed, res.Status, c.n.Load())
	}
	mustEqualResponse(t, res.Response, okResponse())
	rec, err := h.Store.Get(ctx, r.Scope, r.Key)
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

func testReplay(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, nil)
	var c counter
	r := req(t, scopeA, "k1", "49.99")
	if _, err := e.Do(ctx, r, c.action(okResponse())); err != nil {
		t.Fatal(err)
	}
	// 49.990 is the same amount: same fingerprint, a replay.
	for i := 0; i < 3; i++ {
		res, err := e.Do(ctx, req(t, scopeA, "k1", "49.990"), c.action(idempotency.Response{Code: 500}))
		if err != nil {
			t.Fatal(err)
		}
		if !res.Replayed {
			t.Fatal("retry was not a replay")
		}
		mustEqualResponse(t, res.Response, okResponse())
	}
	if c.n.Load() != 1 {
		t.Fatalf("executions = %d, want 1", c.n.Load())
	}
}

func testMismatch(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, nil)
	var c counter
	r := req(t, scopeA, "k1", "49.99")
	if _, err := e.Do(ctx, r, c.action(okResponse())); err != nil {
		t.Fatal(err)
	}
	before, _ := h.Store.Get(ctx, r.Scope, r.Key)
	_, err := e.Do(ctx, req(t, scopeA, "k1", "50.00"), c.action(idempotency.Response{Code: 200}))
	if !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("err = %v, want ErrFingerprintMismatch", err)
	}
	if bytes.Contains([]byte(err.Error()), []byte(r.Fingerprint)) {
		t.Fatal("mismatch error reveals the stored fingerprint")
	}
	after, _ := h.Store.Get(ctx, r.Scope, r.Key)
	if recordString(before) != recordString(after) {
		t.Fatalf("record changed by a refused request:\n before %s\n after  %s", recordString(before), recordString(after))
	}
	if c.n.Load() != 1 {
		t.Fatalf("executions = %d, want 1", c.n.Load())
	}
	// Also refused while the first is still in progress.
	r2 := req(t, scopeA, "k2", "1")
	l, err := h.Store.Claim(ctx, claimParams(r2))
	if err != nil || l.State != idempotency.ClaimAcquired {
		t.Fatalf("claim: %v %v", l.State, err)
	}
	if _, err := e.Do(ctx, req(t, scopeA, "k2", "2"), c.action(okResponse())); !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("in-progress mismatch: err = %v", err)
	}
}

func recordString(r idempotency.Record) string {
	resp := "<nil>"
	if r.Response != nil {
		resp = fmt.Sprintf("%d %v %q", r.Response.Code, r.Response.Header, r.Response.Body)
	}
	r.Response = nil
	return fmt.Sprintf("%+v response=%s", r, resp)
}

func claimParams(r idempotency.Request) idempotency.ClaimParams {
	return idempotency.ClaimParams{Scope: r.Scope, Key: r.Key, Fingerprint: r.Fingerprint,
		LockTimeout: 30 * time.Second, Retention: 24 * time.Hour}
}

func testConcurrent(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, nil)
	var c counter
	r := req(t, scopeA, "storm", "10")
	const n = 64
	var wg sync.WaitGroup
	var replays, inProgress, executed atomic.Int64
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := e.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) {
				c.n.Add(1)
				time.Sleep(50 * time.Millisecond)
				return okResponse(), nil
			})
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
		}()
	}
	close(start)
	wg.Wait()
	if c.n.Load() != 1 || executed.Load() != 1 {
		t.Fatalf("executions = %d (executed answers %d), want exactly 1", c.n.Load(), executed.Load())
	}
	if replays.Load()+inProgress.Load() != n-1 {
		t.Fatalf("replays %d + in progress %d != %d", replays.Load(), inProgress.Load(), n-1)
	}
	res, err := e.Do(ctx, r, c.action(okResponse()))
	if err != nil || !res.Replayed {
		t.Fatalf("after the storm: replayed=%v err=%v", res.Replayed, err)
	}
}

func testOrphanReclaim(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, &idempotency.Config{LockTimeout: 2 * time.Second})
	r := req(t, scopeA, "orphan", "10")
	// A holder claims and "crashes": it never completes or releases.
	first, err := h.Store.Claim(ctx, idempotency.ClaimParams{Scope: r.Scope, Key: r.Key, Fingerprint: r.Fingerprint,
		LockTimeout: 2 * time.Second, Retention: time.Hour})
	if err != nil || first.State != idempotency.ClaimAcquired {
		t.Fatalf("claim: %v %v", first.State, err)
	}
	var c counter
	if _, err := e.Do(ctx, r, c.action(okResponse())); !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("before the lock timeout: err = %v, want in progress", err)
	}
	h.Advance(t, 3*time.Second)
	const n = 32
	var wg sync.WaitGroup
	var reclaimed atomic.Int64
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := e.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) {
				c.n.Add(1)
				time.Sleep(20 * time.Millisecond)
				return okResponse(), nil
			})
			if err != nil && !errors.Is(err, idempotency.ErrInProgress) {
				t.Errorf("Do: %v", err)
			}
			if err == nil && res.Reclaimed {
				reclaimed.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if c.n.Load() != 1 || reclaimed.Load() != 1 {
		t.Fatalf("executions = %d, reclaims = %d; want exactly one of each", c.n.Load(), reclaimed.Load())
	}
	rec, err := h.Store.Get(ctx, r.Scope, r.Key)
	if err != nil || rec.Status != idempotency.StatusCompleted || rec.LockVersion <= first.Lease.Version {
		t.Fatalf("after reclaim: %+v %v", rec, err)
	}
}

func testFencing(t *testing.T, h Harness) {
	ctx := ctxT(t)
	r := req(t, scopeA, "fence", "10")
	p := claimParams(r)
	p.LockTimeout = time.Second
	a, err := h.Store.Claim(ctx, p)
	if err != nil || a.State != idempotency.ClaimAcquired {
		t.Fatalf("A claim: %v %v", a.State, err)
	}
	h.Advance(t, 2*time.Second)
	b, err := h.Store.Claim(ctx, p)
	if err != nil || b.State != idempotency.ClaimReclaimed || b.Lease.Version == a.Lease.Version {
		t.Fatalf("B claim: %v %+v %v", b.State, b.Lease, err)
	}
	bResp := idempotency.Response{Code: 201, Body: []byte("B")}
	aResp := idempotency.Response{Code: 201, Body: []byte("A")}
	done := idempotency.Completion{Status: idempotency.StatusCompleted, Response: aResp, Retention: time.Hour}
	for name, err := range map[string]error{
		"heartbeat": h.Store.Heartbeat(ctx, a.Lease, time.Minute),
		"release":   h.Store.Release(ctx, a.Lease),
		"complete":  h.Store.Complete(ctx, a.Lease, done),
	} {
		if !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Fatalf("old holder's %s: err = %v, want ErrLeaseLost", name, err)
		}
	}
	rec, _ := h.Store.Get(ctx, r.Scope, r.Key)
	if rec.Status != idempotency.StatusProcessing || rec.LockVersion != b.Lease.Version {
		t.Fatalf("old holder changed the record: %+v", rec)
	}
	if err := h.Store.Complete(ctx, b.Lease, idempotency.Completion{Status: idempotency.StatusCompleted, Response: bResp, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Complete(ctx, a.Lease, done); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("old holder after B completed: %v", err)
	}
	c, err := h.Store.Claim(ctx, p)
	if err != nil || c.State != idempotency.ClaimReplay {
		t.Fatalf("replay: %v %v", c.State, err)
	}
	mustEqualResponse(t, *c.Record.Response, bResp)
}

func testHeartbeat(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, &idempotency.Config{LockTimeout: 400 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond})
	r := req(t, scopeA, "long", "10")
	var c counter
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := e.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) {
			c.n.Add(1)
			close(started)
			select { // four lock timeouts long
			case <-time.After(1600 * time.Millisecond):
			case <-ctx.Done():
				return idempotency.Response{}, context.Cause(ctx)
			}
			return okResponse(), nil
		})
		done <- err
	}()
	<-started
	deadline := time.Now().Add(1400 * time.Millisecond)
	for time.Now().Before(deadline) {
		_, err := e.Do(ctx, r, c.action(okResponse()))
		if !errors.Is(err, idempotency.ErrInProgress) {
			t.Fatalf("during the long action: err = %v, want in progress (the lease must be kept alive)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Fatalf("long action: %v", err)
	}
	if c.n.Load() != 1 {
		t.Fatalf("executions = %d", c.n.Load())
	}
}

func testLostLease(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, &idempotency.Config{LockTimeout: 2 * time.Second, HeartbeatInterval: 50 * time.Millisecond})
	r := req(t, scopeA, "lost", "10")
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := e.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) {
			close(started)
			<-ctx.Done() // runs until told its lease is gone
			return okResponse(), nil
		})
		done <- err
	}()
	<-started
	p := claimParams(r)
	p.LockTimeout = 2 * time.Second
	var b idempotency.Claim
	// A heartbeat may land between Advance and Claim and renew the lease:
	// then time passes again.
	for i := 0; i < 10; i++ {
		h.Advance(t, 3*time.Second)
		var err error
		b, err = h.Store.Claim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if b.State != idempotency.ClaimInProgress {
			break
		}
	}
	if b.State != idempotency.ClaimReclaimed {
		t.Fatalf("reclaim: %v", b.State)
	}
	select {
	case err := <-done:
		if !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Fatalf("old holder: err = %v, want ErrLeaseLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the old holder's action was not cancelled after losing its lease")
	}
	rec, _ := h.Store.Get(ctx, r.Scope, r.Key)
	if rec.Status != idempotency.StatusProcessing || rec.LockVersion != b.Lease.Version {
		t.Fatalf("old holder changed the record: %+v", rec)
	}
}

var errDeclined = errors.New("card declined")

func testPermanent(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, nil)
	r := req(t, scopeA, "declined", "10")
	declined := idempotency.Response{Code: 402, Body: []byte(`{"error":"declined"}`)}
	var c counter
	action := func(ctx context.Context) (idempotency.Response, error) {
		c.n.Add(1)
		return idempotency.Response{}, idempotency.Permanent(errDeclined, declined)
	}
	_, err := e.Do(ctx, r, action)
	var fe *idempotency.FailedError
	if !errors.As(err, &fe) || !errors.Is(err, errDeclined) || fe.Replayed {
		t.Fatalf("first: err = %v", err)
	}
	for i := 0; i < 2; i++ {
		res, err := e.Do(ctx, r, action)
		if !errors.As(err, &fe) || !fe.Replayed || !errors.Is(err, idempotency.ErrFailed) {
			t.Fatalf("retry: err = %v", err)
		}
		if !res.Replayed || res.Status != idempotency.StatusFailed {
			t.Fatalf("retry result: %+v", res)
		}
		mustEqualResponse(t, fe.Response, declined)
	}
	if c.n.Load() != 1 {
		t.Fatalf("executions = %d, want 1", c.n.Load())
	}
}

func testTransient(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, nil)
	r := req(t, scopeA, "flaky", "10")
	errTimeout := errors.New("upstream timeout")
	var c counter
	_, err := e.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) {
		c.n.Add(1)
		return idempotency.Response{}, errTimeout
	})
	if !errors.Is(err, errTimeout) {
		t.Fatalf("err = %v", err)
	}
	rec, err := h.Store.Get(ctx, r.Scope, r.Key)
	if err != nil || rec.Status != idempotency.StatusProcessing {
		t.Fatalf("after a transient error the record must be kept PROCESSING: %+v %v", rec, err)
	}
	// The lock is released: a retry runs at once, without waiting for the
	// lock timeout.
	res, err := e.Do(ctx, r, c.action(okResponse()))
	if err != nil || res.Replayed {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if c.n.Load() != 2 {
		t.Fatalf("executions = %d, want 2", c.n.Load())
	}
}

func testPanic(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, nil)
	r := req(t, scopeA, "panics", "10")
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic was swallowed")
			}
		}()
		_, _ = e.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) { panic("boom") })
	}()
	var c counter
	if _, err := e.Do(ctx, r, c.action(okResponse())); err != nil || c.n.Load() != 1 {
		t.Fatalf("retry after panic: err = %v, executions = %d", err, c.n.Load())
	}
}

func testContextCancel(t *testing.T, h Harness) {
	e := executor(t, h, nil)
	r := req(t, scopeA, "cancel", "10")
	ctx, cancel := context.WithCancel(ctxT(t))
	started := make(chan struct{})
	go func() { <-started; cancel() }()
	_, err := e.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) {
		close(started)
		<-ctx.Done()
		return idempotency.Response{}, ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	// The lease was released despite the cancelled context.
	var c counter
	if _, err := e.Do(ctxT(t), r, c.action(okResponse())); err != nil || c.n.Load() != 1 {
		t.Fatalf("retry: err = %v, executions = %d", err, c.n.Load())
	}
	// A context cancelled before the call does nothing.
	dead, cancel2 := context.WithCancel(context.Background())
	cancel2()
	r2 := req(t, scopeA, "dead", "10")
	if _, err := e.Do(dead, r2, c.action(okResponse())); !errors.Is(err, context.Canceled) {
		t.Fatalf("dead context: %v", err)
	}
	if _, err := h.Store.Get(ctxT(t), r2.Scope, r2.Key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("dead context left a record: %v", err)
	}
}

func testExpiredIsNew(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, &idempotency.Config{Retention: time.Hour})
	r := req(t, scopeA, "old", "10")
	var c counter
	if _, err := e.Do(ctx, r, c.action(idempotency.Response{Code: 201, Body: []byte("first")})); err != nil {
		t.Fatal(err)
	}
	before, _ := h.Store.Get(ctx, r.Scope, r.Key)
	h.Advance(t, 2*time.Hour)
	// Even with other fields: an expired record is gone, not a mismatch.
	res, err := e.Do(ctx, req(t, scopeA, "old", "11"), c.action(idempotency.Response{Code: 201, Body: []byte("second")}))
	if err != nil || res.Replayed {
		t.Fatalf("after expiry: replayed=%v err=%v (stale data must never be replayed)", res.Replayed, err)
	}
	if c.n.Load() != 2 || string(res.Response.Body) != "second" {
		t.Fatalf("executions = %d body = %q", c.n.Load(), res.Response.Body)
	}
	after, _ := h.Store.Get(ctx, r.Scope, r.Key)
	if after.LockVersion <= before.LockVersion {
		t.Fatalf("lock version must grow across renewal: %d -> %d", before.LockVersion, after.LockVersion)
	}
}

func testExpiredRefused(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, &idempotency.Config{Retention: time.Hour, Expired: idempotency.ExpiredRefused})
	r := req(t, scopeA, "old", "10")
	var c counter
	if _, err := e.Do(ctx, r, c.action(okResponse())); err != nil {
		t.Fatal(err)
	}
	h.Advance(t, 2*time.Hour)
	if _, err := e.Do(ctx, r, c.action(okResponse())); !errors.Is(err, idempotency.ErrExpired) {
		t.Fatalf("err = %v, want ErrExpired", err)
	}
	if c.n.Load() != 1 {
		t.Fatalf("executions = %d", c.n.Load())
	}
}

func testPrune(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, &idempotency.Config{Retention: time.Hour})
	var c counter
	for i := 0; i < 25; i++ {
		if _, err := e.Do(ctx, req(t, scopeA, fmt.Sprintf("done%d", i), "1"), c.action(okResponse())); err != nil {
			t.Fatal(err)
		}
	}
	stuck := req(t, scopeA, "stuck", "1")
	p := claimParams(stuck)
	p.Retention = time.Hour
	if cl, err := h.Store.Claim(ctx, p); err != nil || cl.State != idempotency.ClaimAcquired {
		t.Fatalf("claim: %v", err)
	}
	fresh := req(t, scopeA, "fresh", "1")
	h.Advance(t, 2*time.Hour)
	if _, err := e.Do(ctx, fresh, c.action(okResponse())); err != nil {
		t.Fatal(err)
	}
	total := 0
	for {
		n, err := h.Store.Prune(ctx, 10)
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
	if rec, err := h.Store.Get(ctx, stuck.Scope, stuck.Key); err != nil || rec.Status != idempotency.StatusProcessing {
		t.Fatalf("PROCESSING record pruned: %v", err)
	}
	if _, err := h.Store.Get(ctx, fresh.Scope, fresh.Key); err != nil {
		t.Fatalf("unexpired record pruned: %v", err)
	}
	if _, err := h.Store.Prune(ctx, 0); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("Prune(0): %v", err)
	}
}

// A holder stalls past its lease; another reclaims and completes; the
// record expires and is pruned; the key is claimed anew. The stalled
// holder's old fencing token must not be valid for the new record.
func testStalledAfterPrune(t *testing.T, h Harness) {
	ctx := ctxT(t)
	r := req(t, scopeA, "stalled", "10")
	p := claimParams(r)
	p.LockTimeout, p.Retention = time.Second, time.Hour
	a, err := h.Store.Claim(ctx, p)
	if err != nil || a.State != idempotency.ClaimAcquired {
		t.Fatalf("A: %v %v", a.State, err)
	}
	h.Advance(t, 2*time.Second)
	b, err := h.Store.Claim(ctx, p)
	if err != nil || b.State != idempotency.ClaimReclaimed {
		t.Fatalf("B: %v %v", b.State, err)
	}
	done := idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 201}, Retention: time.Hour}
	if err := h.Store.Complete(ctx, b.Lease, done); err != nil {
		t.Fatal(err)
	}
	h.Advance(t, 2*time.Hour)
	if n, err := h.Store.Prune(ctx, 100); err != nil || n != 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	c, err := h.Store.Claim(ctx, p)
	if err != nil || c.State != idempotency.ClaimAcquired {
		t.Fatalf("C: %v %v", c.State, err)
	}
	stale := idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 200, Body: []byte("stale")}, Retention: time.Hour}
	if err := h.Store.Complete(ctx, a.Lease, stale); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("stalled holder's complete on the new record: err = %v, want ErrLeaseLost", err)
	}
	rec, err := h.Store.Get(ctx, r.Scope, r.Key)
	if err != nil || rec.Status != idempotency.StatusProcessing {
		t.Fatalf("new record changed by the stalled holder: %+v %v", rec, err)
	}
}

func testScopes(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, nil)
	// The same key string under two scopes: two records, two executions,
	// and each scope replays only its own response.
	const k = "usr_A1_createOrder_shared"
	var c counter
	ra := idempotency.Request{Scope: scopeA, Key: k, Fingerprint: fp(t, "1")}
	rb := idempotency.Request{Scope: scopeB, Key: k, Fingerprint: fp(t, "2")}
	if _, err := e.Do(ctx, ra, c.action(idempotency.Response{Code: 201, Body: []byte("A")})); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store.Get(ctx, scopeB, k); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("scope B sees scope A's record: %v", err)
	}
	res, err := e.Do(ctx, rb, c.action(idempotency.Response{Code: 201, Body: []byte("B")}))
	if err != nil || res.Replayed || string(res.Response.Body) != "B" {
		t.Fatalf("scope B: %+v %v", res, err)
	}
	res, err = e.Do(ctx, ra, c.action(okResponse()))
	if err != nil || !res.Replayed || string(res.Response.Body) != "A" {
		t.Fatalf("scope A replay: %+v %v", res, err)
	}
	if c.n.Load() != 2 {
		t.Fatalf("executions = %d, want 2", c.n.Load())
	}
}

func testBadInput(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, nil)
	good := req(t, scopeA, "good", "1")
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'k'
	}
	cases := map[string]idempotency.Request{
		"scope":       {Scope: "", Key: good.Key, Fingerprint: good.Fingerprint},
		"scope ":      {Scope: "usr A", Key: good.Key, Fingerprint: good.Fingerprint},
		"key":         {Scope: scopeA, Key: "", Fingerprint: good.Fingerprint},
		"key ":        {Scope: scopeA, Key: string(long), Fingerprint: good.Fingerprint},
		"key  ":       {Scope: scopeA, Key: "bad key\n", Fingerprint: good.Fingerprint},
		"fingerprint": {Scope: scopeA, Key: good.Key, Fingerprint: "abc"},
	}
	var c counter
	for want, r := range cases {
		_, err := e.Do(ctx, r, c.action(okResponse()))
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != trim(want) {
			t.Fatalf("%q: err = %v, want an InvalidError naming %q", want, err, trim(want))
		}
		if _, err := h.Store.Get(ctx, r.Scope, r.Key); !errors.Is(err, idempotency.ErrNotFound) && !errors.Is(err, idempotency.ErrInvalid) && err != nil {
			t.Fatalf("%q: Get: %v", want, err)
		} else if err == nil {
			t.Fatalf("%q: bad input stored a record", want)
		}
	}
	if c.n.Load() != 0 {
		t.Fatal("bad input ran the action")
	}
	for field, cfg := range map[string]idempotency.Config{
		"Config.Retention":         {LockTimeout: time.Hour, Retention: time.Minute},
		"Config.HeartbeatInterval": {LockTimeout: time.Second, HeartbeatInterval: 2 * time.Second},
		"Config.LockTimeout":       {LockTimeout: -time.Second},
	} {
		_, err := idempotency.New(h.Store, &cfg)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != field {
			t.Fatalf("config %s: err = %v", field, err)
		}
	}
}

// A claim taken back (idempotency.Abandon, e.g. a rate limit) leaves no
// record with a store that can delete claims, and never blocks a retry.
func testAbandon(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, nil)
	r := req(t, scopeA, "abandoned", "10")
	refused := errors.New("too many")
	if _, err := e.Do(ctx, r, func(context.Context) (idempotency.Response, error) {
		return idempotency.Response{}, idempotency.Abandon(refused)
	}); !errors.Is(err, refused) {
		t.Fatalf("err = %v", err)
	}
	_, err := h.Store.Get(ctx, r.Scope, r.Key)
	if _, ok := h.Store.(idempotency.Abandoner); ok && !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("abandoned claim left a record: %v", err)
	}
	var c counter
	if res, err := e.Do(ctx, r, c.action(okResponse())); err != nil || res.Replayed || c.n.Load() != 1 {
		t.Fatalf("retry after abandon: %+v %v", res, err)
	}
	// Only the holder can abandon.
	if ab, ok := h.Store.(idempotency.Abandoner); ok {
		if err := ab.Abandon(ctx, idempotency.Lease{Scope: r.Scope, Key: r.Key, Version: -5}); !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Fatalf("abandon by a stranger: %v", err)
		}
	}
}

// With RefuseForeign, a key that exists only under another scope is
// refused and nothing is stored; without it, scopes never see each other.
func testForeign(t *testing.T, h Harness) {
	ctx := ctxT(t)
	e := executor(t, h, &idempotency.Config{Retention: time.Hour})
	const k = "createOrder_client-key-1"
	var c counter
	a := idempotency.Request{Scope: scopeA, Key: k, Fingerprint: fp(t, "1"), RefuseForeign: true}
	if _, err := e.Do(ctx, a, c.action(idempotency.Response{Code: 201, Body: []byte("A's order")})); err != nil {
		t.Fatal(err)
	}
	b := idempotency.Request{Scope: scopeB, Key: k, Fingerprint: fp(t, "1"), RefuseForeign: true}
	res, err := e.Do(ctx, b, c.action(okResponse()))
	if !errors.Is(err, idempotency.ErrForeignKey) || bytes.Contains([]byte(err.Error()), []byte("A's order")) || res.Response.Body != nil {
		t.Fatalf("foreign key: %+v %v", res, err)
	}
	if _, err := h.Store.Get(ctx, scopeB, k); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("a refused foreign key stored a record: %v", err)
	}
	// A's own retries still replay.
	if res, err := e.Do(ctx, a, c.action(okResponse())); err != nil || !res.Replayed {
		t.Fatalf("A's retry: %+v %v", res, err)
	}
	// Without RefuseForeign, B's record is its own.
	b.RefuseForeign = false
	if res, err := e.Do(ctx, b, c.action(okResponse())); err != nil || res.Replayed {
		t.Fatalf("B without RefuseForeign: %+v %v", res, err)
	}
	if c.n.Load() != 2 {
		t.Fatalf("executions = %d, want 2", c.n.Load())
	}
	// Once A's record expired, the key is nobody's.
	h.Advance(t, 2*time.Hour)
	cReq := idempotency.Request{Scope: "usr_C3", Key: k, Fingerprint: fp(t, "1"), RefuseForeign: true}
	if _, err := e.Do(ctx, cReq, c.action(okResponse())); err != nil {
		t.Fatalf("after the other scopes' records expired: %v", err)
	}
}

func trim(s string) string {
	for len(s) > 0 && s[len(s)-1] == ' ' {
		s = s[:len(s)-1]
	}
	return s
}
