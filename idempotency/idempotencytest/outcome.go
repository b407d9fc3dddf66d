package idempotencytest

import (
	"context"
	"errors"
	"testing"

	"github.com/payonce/payonce/idempotency"
)

// outcomeChecks: how an action ends decides what is kept. A permanent
// error is stored and replayed; a transient error, a panic or a cancelled
// context release the lock so a retry runs at once; an abandoned claim
// leaves no record.
var outcomeChecks = []check{
	{"PermanentErrorStoredAndReplayed", testPermanent},
	{"TransientErrorReleasesLock", testTransient},
	{"PanicReleasesLock", testPanic},
	{"ContextCancelledReleasesLock", testContextCancel},
	{"AbandonLeavesNoRecord", testAbandon},
}

var errDeclined = errors.New("card declined")

func testPermanent(t *testing.T, h Harness) {
	b := setup(t, h, nil)
	r := req(t, scopeA, "declined", "10")
	declined := idempotency.Response{Code: 402, Body: []byte(`{"error":"declined"}`)}
	action := func(ctx context.Context) (idempotency.Response, error) {
		b.calls.n.Add(1)
		return idempotency.Response{}, idempotency.Permanent(errDeclined, declined)
	}
	_, err := b.exec.Do(b.ctx, r, action)
	var fe *idempotency.FailedError
	if !errors.As(err, &fe) || !errors.Is(err, errDeclined) || fe.Replayed {
		t.Fatalf("first: err = %v", err)
	}
	for i := 0; i < 2; i++ {
		res, err := b.exec.Do(b.ctx, r, action)
		if !errors.As(err, &fe) || !fe.Replayed || !errors.Is(err, idempotency.ErrFailed) {
			t.Fatalf("retry: err = %v", err)
		}
		if !res.Replayed || res.Status != idempotency.StatusFailed {
			t.Fatalf("retry result: %+v", res)
		}
		mustEqualResponse(t, fe.Response, declined)
	}
	b.wantExecutions(t, 1)
}

func testTransient(t *testing.T, h Harness) {
	b := setup(t, h, nil)
	r := req(t, scopeA, "flaky", "10")
	errTimeout := errors.New("upstream timeout")
	_, err := b.exec.Do(b.ctx, r, func(ctx context.Context) (idempotency.Response, error) {
		b.calls.n.Add(1)
		return idempotency.Response{}, errTimeout
	})
	if !errors.Is(err, errTimeout) {
		t.Fatalf("err = %v", err)
	}
	rec, err := b.Store.Get(b.ctx, r.Scope, r.Key)
	if err != nil || rec.Status != idempotency.StatusProcessing {
		t.Fatalf("after a transient error the record must be kept PROCESSING: %+v %v", rec, err)
	}
	// The lock is released: a retry runs at once, without waiting for the
	// lock timeout.
	res, err := b.exec.Do(b.ctx, r, b.calls.action(okResponse()))
	if err != nil || res.Replayed {
		t.Fatalf("retry: %+v %v", res, err)
	}
	b.wantExecutions(t, 2)
}

func testPanic(t *testing.T, h Harness) {
	b := setup(t, h, nil)
	r := req(t, scopeA, "panics", "10")
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic was swallowed")
			}
		}()
		_, _ = b.exec.Do(b.ctx, r, func(ctx context.Context) (idempotency.Response, error) { panic("boom") })
	}()
	if _, err := b.exec.Do(b.ctx, r, b.calls.action(okResponse())); err != nil || b.calls.n.Load() != 1 {
		t.Fatalf("retry after panic: err = %v, executions = %d", err, b.calls.n.Load())
	}
}

func testContextCancel(t *testing.T, h Harness) {
	b := setup(t, h, nil)
	r := req(t, scopeA, "cancel", "10")
	ctx, cancel := context.WithCancel(b.ctx)
	started := make(chan struct{})
	go func() { <-started; cancel() }()
	_, err := b.exec.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) {
		close(started)
		<-ctx.Done()
		return idempotency.Response{}, ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	// The lease was released despite the cancelled context.
	if _, err := b.exec.Do(b.ctx, r, b.calls.action(okResponse())); err != nil || b.calls.n.Load() != 1 {
		t.Fatalf("retry: err = %v, executions = %d", err, b.calls.n.Load())
	}
	// A context cancelled before the call does nothing.
	dead, cancel2 := context.WithCancel(context.Background())
	cancel2()
	r2 := req(t, scopeA, "dead", "10")
	if _, err := b.exec.Do(dead, r2, b.calls.action(okResponse())); !errors.Is(err, context.Canceled) {
		t.Fatalf("dead context: %v", err)
	}
	if _, err := b.Store.Get(b.ctx, r2.Scope, r2.Key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("dead context left a record: %v", err)
	}
}

// A claim taken back (idempotency.Abandon, e.g. a rate limit) leaves no
// record with a store that can delete claims, and never blocks a retry.
func testAbandon(t *testing.T, h Harness) {
	b := setup(t, h, nil)
	r := req(t, scopeA, "abandoned", "10")
	refused := errors.New("too many")
	if _, err := b.exec.Do(b.ctx, r, func(context.Context) (idempotency.Response, error) {
		return idempotency.Response{}, idempotency.Abandon(refused)
	}); !errors.Is(err, refused) {
		t.Fatalf("err = %v", err)
	}
	_, err := b.Store.Get(b.ctx, r.Scope, r.Key)
	if _, ok := b.Store.(idempotency.Abandoner); ok && !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("abandoned claim left a record: %v", err)
	}
	if res, err := b.exec.Do(b.ctx, r, b.calls.action(okResponse())); err != nil || res.Replayed || b.calls.n.Load() != 1 {
		t.Fatalf("retry after abandon: %+v %v", res, err)
	}
	// Only the holder can abandon.
	if ab, ok := b.Store.(idempotency.Abandoner); ok {
		if err := ab.Abandon(b.ctx, idempotency.Lease{Scope: r.Scope, Key: r.Key, Version: -5}); !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Fatalf("abandon by a stranger: %v", err)
		}
	}
}
