package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/memstore"
)

// The tests of this file run in a synctest bubble: the executor's timers,
// the memstore's clock (time.Now) and the clients' waits share one fake
// clock that moves only when every goroutine is blocked, so each lease
// deadline, heartbeat and reclaim happens at its exact instant whatever
// the machine's load.

var errUnreachable = errors.New("dial tcp 10.0.0.5:5432: connect: no route to host")

// faultyStore fails or slows some of its inner store's calls.
type faultyStore struct {
	idempotency.Store
	// heartbeat, when set, answers Heartbeat instead of the store; its
	// argument counts the heartbeats, from 1.
	heartbeat func(ctx context.Context, n int64) error
	// complete, when set, runs before each Complete reaches the store.
	complete   func(ctx context.Context)
	heartbeats atomic.Int64
}

func (s *faultyStore) Heartbeat(ctx context.Context, l idempotency.Lease, d time.Duration) error {
	n := s.heartbeats.Add(1)
	if s.heartbeat != nil {
		if err := s.heartbeat(ctx, n); err != nil {
			return err
		}
	}
	return s.Store.Heartbeat(ctx, l, d)
}

func (s *faultyStore) Complete(ctx context.Context, l idempotency.Lease, c idempotency.Completion) error {
	if s.complete != nil {
		s.complete(ctx)
	}
	return s.Store.Complete(ctx, l, c)
}

func leaseReq(t *testing.T) idempotency.Request {
	t.Helper()
	key, err := idempotency.ComposeKey("usr_1", "charge", "4f0c1d9e-52a8-4b8e-9d7c-3b6a2e1f0a77")
	if err != nil {
		t.Fatal(err)
	}
	fp, err := idempotency.NewFingerprint().Decimal("amount", "10.00").String("currency", "EUR").Sum()
	if err != nil {
		t.Fatal(err)
	}
	return idempotency.Request{Scope: "usr_1", Key: key, Fingerprint: fp}
}

// running counts the executions of one key that are under way, and keeps
// the most seen at once.
type running struct{ now, most atomic.Int64 }

func (r *running) enter() {
	n := r.now.Add(1)
	for {
		m := r.most.Load()
		if n <= m || r.most.CompareAndSwap(m, n) {
			return
		}
	}
}

func (r *running) leave() { r.now.Add(-1) }

// doUntilRun retries req on exec, as a client told "in progress" does
// (after the Retry-After it was given), until its action runs or the key
// replays.
func doUntilRun(t *testing.T, exec *idempotency.Executor, req idempotency.Request, action idempotency.Action) (idempotency.Result, error) {
	t.Helper()
	for {
		res, err := exec.Do(context.Background(), req, action)
		var ip *idempotency.InProgressError
		if !errors.As(err, &ip) {
			return res, err
		}
		time.Sleep(ip.RetryAfter)
	}
}

// Finding 1 of issue 24: a holder whose heartbeats fail (the database
// unreachable from its node, its pool exhausted) kept running past its
// lease, and the instance that reclaimed the key ran the action at the
// same time. It is now cancelled, with a cause that is ErrLeaseLost,
// before its lease can end in the store.
func TestFailingHeartbeatsStopTheHolderBeforeAnotherReclaims(t *testing.T) {
	t.Parallel()
	for name, fail := range map[string]func(ctx context.Context, n int64) error{
		"transport error": func(context.Context, int64) error { return errUnreachable },
		"no answer until the call's deadline": func(ctx context.Context, _ int64) error {
			<-ctx.Done()
			return ctx.Err()
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				store := &faultyStore{Store: memstore.New(nil), heartbeat: fail}
				cfg := &idempotency.Config{LockTimeout: 30 * time.Second}
				first, err := idempotency.New(store, cfg)
				if err != nil {
					t.Fatal(err)
				}
				second, err := idempotency.New(store, cfg)
				if err != nil {
					t.Fatal(err)
				}
				r := leaseReq(t)
				var execs running
				firstCtx := make(chan context.Context, 1)
				firstEnded := make(chan struct{}) // closed once the second holder is done
				firstDone := make(chan error, 1)
				go func() {
					_, err := first.Do(context.Background(), r, func(ctx context.Context) (idempotency.Response, error) {
						execs.enter()
						defer execs.leave()
						firstCtx <- ctx
						select {
						case <-ctx.Done():
							return idempotency.Response{}, context.Cause(ctx)
						case <-firstEnded:
							return idempotency.Response{Code: 200, Body: []byte("first")}, nil
						}
					})
					firstDone <- err
				}()
				fctx := <-firstCtx

				var firstStoppedBeforeSecond bool
				var firstCheck error
				res, err := doUntilRun(t, second, r, func(ctx context.Context) (idempotency.Response, error) {
					execs.enter()
					defer execs.leave()
					firstStoppedBeforeSecond = fctx.Err() != nil
					firstCheck = idempotency.CheckLease(fctx)
					return idempotency.Response{Code: 200, Body: []byte("second")}, nil
				})
				close(firstEnded)
				ferr := <-firstDone
				if err != nil || res.Replayed || !res.Reclaimed {
					t.Fatalf("second holder: %+v %v, want a reclaim that runs the action", res, err)
				}
				if most := execs.most.Load(); most != 1 || !firstStoppedBeforeSecond {
					t.Fatalf("%d executions at once (first holder stopped before the second started: %v), want 1",
						most, firstStoppedBeforeSecond)
				}
				var expired *idempotency.LeaseExpiredError
				if cause := context.Cause(fctx); !errors.Is(cause, idempotency.ErrLeaseLost) || !errors.As(cause, &expired) {
					t.Fatalf("first holder's cancellation cause = %v, want a *LeaseExpiredError (ErrLeaseLost)", cause)
				}
				if !errors.Is(firstCheck, idempotency.ErrLeaseLost) {
					t.Fatalf("CheckLease of the first holder once the second ran: %v, want ErrLeaseLost", firstCheck)
				}
				if !errors.Is(ferr, idempotency.ErrLeaseLost) {
					t.Fatalf("first holder's Do: %v, want ErrLeaseLost", ferr)
				}
				rec, err := store.Get(context.Background(), r.Scope, r.Key)
				if err != nil || rec.Status != idempotency.StatusCompleted || string(rec.Response.Body) != "second" {
					t.Fatalf("record: %+v %v, want the second holder's outcome", rec, err)
				}
			})
		})
	}
}

// A heartbeat that fails now and then does not stop a healthy action: a
// failed one is retried before the holder stops trusting its lease.
func TestPassingHeartbeatFailuresKeepTheAction(t *testing.T) {
	t.Parallel()
	for name, fails := range map[string]func(n int64) bool{
		"every other":    func(n int64) bool { return n%2 == 1 },
		"two in a row":   func(n int64) bool { return n%4 == 1 || n%4 == 2 },
		"first, then ok": func(n int64) bool { return n == 1 },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				store := &faultyStore{Store: memstore.New(nil), heartbeat: func(_ context.Context, n int64) error {
					if fails(n) {
						return errUnreachable
					}
					return nil
				}}
				exec, err := idempotency.New(store, nil) // the defaults: 30s lease, heartbeat every 10s, 3s margin
				if err != nil {
					t.Fatal(err)
				}
				other, err := idempotency.New(memstoreView{store}, nil)
				if err != nil {
					t.Fatal(err)
				}
				r := leaseReq(t)
				res, err := exec.Do(context.Background(), r, func(ctx context.Context) (idempotency.Response, error) {
					for range 20 { // ten leases long, a duplicate every half lease
						select {
						case <-ctx.Done():
							return idempotency.Response{}, context.Cause(ctx)
						case <-time.After(15 * time.Second):
						}
						if err := idempotency.CheckLease(ctx); err != nil {
							return idempotency.Response{}, err
						}
						if _, err := other.Do(context.Background(), r, func(context.Context) (idempotency.Response, error) {
							t.Error("a duplicate ran while the first holder was healthy")
							return idempotency.Response{}, nil
						}); !errors.Is(err, idempotency.ErrInProgress) {
							t.Errorf("duplicate: %v, want ErrInProgress", err)
						}
					}
					return idempotency.Response{Code: 200}, nil
				})
				if err != nil || res.Status != idempotency.StatusCompleted {
					t.Fatalf("long action with passing heartbeat failures: %+v %v", res, err)
				}
				if store.heartbeats.Load() < 20 {
					t.Fatalf("%d heartbeats over ten leases", store.heartbeats.Load())
				}
			})
		})
	}
}

// memstoreView is the faulty store's inner store, reached by another
// instance whose own heartbeats work.
type memstoreView struct{ s *faultyStore }

func (v memstoreView) Claim(ctx context.Context, p idempotency.ClaimParams) (idempotency.Claim, error) {
	return v.s.Store.Claim(ctx, p)
}
func (v memstoreView) Complete(ctx context.Context, l idempotency.Lease, c idempotency.Completion) error {
	return v.s.Store.Complete(ctx, l, c)
}
func (v memstoreView) Release(ctx context.Context, l idempotency.Lease) error {
	return v.s.Store.Release(ctx, l)
}
func (v memstoreView) Heartbeat(ctx context.Context, l idempotency.Lease, d time.Duration) error {
	return v.s.Store.Heartbeat(ctx, l, d)
}
func (v memstoreView) Get(ctx context.Context, scope, key string) (idempotency.Record, error) {
	return v.s.Store.Get(ctx, scope, key)
}
func (v memstoreView) Prune(ctx context.Context, limit int) (int, error) {
	return v.s.Store.Prune(ctx, limit)
}

// Finding 2 of issue 24: heartbeats stopped before the outcome was
// recorded, which may take up to FinishTimeout (10s by default), longer
// than the lease. A recording slower than the lease now keeps it: no
// second holder runs meanwhile, and the duplicate replays the outcome.
func TestSlowRecordingKeepsTheLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &faultyStore{Store: memstore.New(nil)}
		store.complete = func(ctx context.Context) {
			select { // three leases long, within FinishTimeout
			case <-time.After(9 * time.Second):
			case <-ctx.Done():
			}
		}
		cfg := &idempotency.Config{LockTimeout: 3 * time.Second}
		first, err := idempotency.New(store, cfg)
		if err != nil {
			t.Fatal(err)
		}
		second, err := idempotency.New(memstoreView{store}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := leaseReq(t)
		started := make(chan struct{})
		firstDone := make(chan error, 1)
		go func() {
			_, err := first.Do(context.Background(), r, func(context.Context) (idempotency.Response, error) {
				close(started)
				return idempotency.Response{Code: 201, Body: []byte("first")}, nil
			})
			firstDone <- err
		}()
		<-started
		res, err := doUntilRun(t, second, r, func(context.Context) (idempotency.Response, error) {
			return idempotency.Response{Code: 201, Body: []byte("second")}, nil
		})
		ferr := <-firstDone
		if err != nil || !res.Replayed || string(res.Response.Body) != "first" {
			t.Fatalf("duplicate during a slow recording: %+v %v, want a replay of the first outcome (a second holder ran)", res, err)
		}
		if ferr != nil {
			t.Fatalf("first holder: %v", ferr)
		}
		if store.heartbeats.Load() < 3 {
			t.Fatalf("%d heartbeats during a recording three leases long", store.heartbeats.Load())
		}
	})
}

func TestLeaseMarginConfig(t *testing.T) {
	t.Parallel()
	store := memstore.New(nil)
	exec, err := idempotency.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := exec.Config(); c.LeaseMargin != 3*time.Second || c.HeartbeatInterval != 10*time.Second {
		t.Fatalf("defaults: margin %s, interval %s; want 3s and 10s", c.LeaseMargin, c.HeartbeatInterval)
	}
	// Recording may take longer than the lease: the heartbeats cover it.
	if _, err := idempotency.New(store, &idempotency.Config{LockTimeout: time.Second, FinishTimeout: time.Minute}); err != nil {
		t.Fatalf("FinishTimeout longer than LockTimeout: %v", err)
	}
	for name, tc := range map[string]struct {
		cfg   idempotency.Config
		field string
		names []string
	}{
		"negative margin": {idempotency.Config{LeaseMargin: -time.Second}, "Config.LeaseMargin", nil},
		"margin too wide": {idempotency.Config{LockTimeout: 30 * time.Second, LeaseMargin: 25 * time.Second},
			"Config.LeaseMargin", []string{"HeartbeatInterval (10s)", "LeaseMargin (25s)", "LockTimeout (30s)"}},
		"interval too long for the default margin": {idempotency.Config{LockTimeout: time.Second, HeartbeatInterval: 950 * time.Millisecond},
			"Config.HeartbeatInterval", []string{"HeartbeatInterval (950ms)", "LeaseMargin (100ms)", "LockTimeout (1s)"}},
	} {
		_, err := idempotency.New(store, &tc.cfg)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Fatalf("%s: err = %v, want an InvalidError naming %s", name, err, tc.field)
		}
		for _, want := range tc.names {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: %q does not say %q", name, err, want)
			}
		}
	}
}

// CheckLease: nil outside an action and while the lease is trusted; an
// error matching ErrLeaseLost for work the action left behind once it
// returned.
func TestCheckLease(t *testing.T) {
	t.Parallel()
	if err := idempotency.CheckLease(context.Background()); err != nil {
		t.Fatalf("outside an action: %v", err)
	}
	exec, err := idempotency.New(memstore.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	var inside error
	var actx context.Context
	if _, err := exec.Do(context.Background(), leaseReq(t), func(ctx context.Context) (idempotency.Response, error) {
		inside, actx = idempotency.CheckLease(ctx), ctx
		return idempotency.Response{Code: 200}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if inside != nil {
		t.Fatalf("inside a healthy action: %v", inside)
	}
	if err := idempotency.CheckLease(actx); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("after the action returned: %v, want ErrLeaseLost", err)
	}
}

// closingStore notes when each lease is given back (released) and counts
// the heartbeats that start after that: none may, or a heartbeat could
// take a released key back for a whole LockTimeout. (Heartbeats go on
// while an outcome is recorded, on purpose: recording may take longer than
// what is left of the lease.)
type closingStore struct {
	idempotency.Store
	closed     sync.Map // lease key -> struct{}
	heartbeats atomic.Int64
	late       atomic.Int64
}

func (s *closingStore) Heartbeat(ctx context.Context, l idempotency.Lease, d time.Duration) error {
	s.heartbeats.Add(1)
	if _, ok := s.closed.Load(l.Key); ok {
		s.late.Add(1)
	}
	return s.Store.Heartbeat(ctx, l, d)
}

func (s *closingStore) Release(ctx context.Context, l idempotency.Lease) error {
	s.closed.Store(l.Key, struct{}{})
	return s.Store.Release(ctx, l)
}

// Heartbeats whose timer fires while the action returns (an interval of a
// microsecond: every action races its first heartbeat) never start after
// the lease is given back, and one in flight finishes first.
func TestNoHeartbeatAfterTheLeaseIsGivenBack(t *testing.T) {
	store := &closingStore{Store: memstore.New(nil)}
	exec, err := idempotency.New(store, &idempotency.Config{LockTimeout: 30 * time.Second, HeartbeatInterval: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	fp := leaseReq(t).Fingerprint
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1500 {
				req := idempotency.Request{Scope: "usr_1", Key: fmt.Sprintf("hb-%d-%d", g, i), Fingerprint: fp}
				_, _ = exec.Do(context.Background(), req, func(context.Context) (idempotency.Response, error) {
					if i%2 == 1 {
						return idempotency.Response{}, errUnreachable // transient: the lease is released
					}
					return idempotency.Response{Code: 201}, nil
				})
			}
		}()
	}
	wg.Wait()
	if n := store.late.Load(); n != 0 {
		t.Fatalf("%d of %d heartbeats started after their lease was given back", n, store.heartbeats.Load())
	}
	if store.heartbeats.Load() == 0 {
		t.Fatal("no heartbeat raced an action's end: the test exercised nothing")
	}
	t.Logf("%d heartbeats raced 6000 actions' ends", store.heartbeats.Load())
}
