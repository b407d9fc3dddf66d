package idempotencytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/payonce/payonce/idempotency"
)

var errTransient = errors.New("connection reset by peer")

// RunTx runs its function in the claim's transaction and commits the
// function's writes with the completion it returns; a key held by another
// is answered as it is, the function not run; an error of the function
// rolls everything back, the claim included.
func testRunTx[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	r := req(t, scopeA, "run-tx", "10")
	p := claimParams(r)
	var got idempotency.Lease
	run := func(name string, fail error) func(ctx context.Context, tx TTx, l idempotency.Lease) (idempotency.Completion, error) {
		return func(ctx context.Context, tx TTx, l idempotency.Lease) (idempotency.Completion, error) {
			b.calls.n.Add(1)
			got = l
			if err := b.Write(ctx, tx, name); err != nil {
				return idempotency.Completion{}, err
			}
			return completion(idempotency.StatusCompleted, okResponse()), fail
		}
	}
	c, err := b.Store.RunTx(b.ctx, p, run("ran", nil))
	if err != nil || c.State != idempotency.ClaimAcquired || c.Lease != got {
		t.Fatalf("RunTx of a new key: %v %+v %v (the function got %+v)", c.State, c.Lease, err, got)
	}
	b.wantWritten(t, "ran", 1)
	b.wantRecord(t, r, idempotency.StatusCompleted, c.Lease.Version)
	c, err = b.Store.RunTx(b.ctx, p, run("ran", nil))
	if err != nil || c.State != idempotency.ClaimReplay {
		t.Fatalf("RunTx of a finished key: %v %v, want a replay", c.State, err)
	}
	mustEqualResponse(t, *c.Record.Response, okResponse())

	held := req(t, scopeA, "run-tx-held", "10")
	b.claim(t, "holder", claimParams(held), idempotency.ClaimAcquired)
	if c, err := b.Store.RunTx(b.ctx, claimParams(held), run("held", nil)); err != nil || c.State != idempotency.ClaimInProgress {
		t.Fatalf("RunTx of a held key: %v %v, want in progress", c.State, err)
	}
	b.wantExecutions(t, 1)

	failing := req(t, scopeA, "run-tx-fails", "10")
	c, err = b.Store.RunTx(b.ctx, claimParams(failing), run("failed", errTransient))
	if !errors.Is(err, errTransient) || c.State != idempotency.ClaimAcquired {
		t.Fatalf("RunTx whose function fails: %v %v, want the function's error with the claim", c.State, err)
	}
	b.wantWritten(t, "failed", 0)
	b.wantNoRecord(t, failing)
	if c, err := b.Store.RunTx(b.ctx, claimParams(failing), run("retried", nil)); err != nil || c.State != idempotency.ClaimAcquired {
		t.Fatalf("RunTx after a failed one: %v %v, want the key new", c.State, err)
	}
	b.wantWritten(t, "retried", 1)
}

// writeThen is a DoTx action that makes one write of name, counted, and
// then answers resp and fail.
func writeThen[TTx idempotency.Tx](b *txBundle[TTx], name string, resp idempotency.Response, fail error) idempotency.TxAction[TTx] {
	return func(ctx context.Context, tx TTx) (idempotency.Response, error) {
		b.calls.n.Add(1)
		if err := b.Write(ctx, tx, name); err != nil {
			return idempotency.Response{}, err
		}
		return resp, fail
	}
}

// DoTx's duplicates arriving together: the action runs once and its write
// commits once; every duplicate waits for that commit and replays the
// response, none is told "in progress".
func testDoTxConcurrent[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	r := req(t, scopeA, "tx-storm", "10")
	const n = 32
	var replays, executed atomic.Int64
	storm(n, func() {
		res, err := b.exec.DoTx(b.ctx, r, writeThen(b, "storm", okResponse(), nil))
		switch {
		case err != nil:
			t.Errorf("DoTx: %v (a duplicate must wait for the first transaction and replay)", err)
		case res.Replayed:
			replays.Add(1)
			if !sameResponse(res.Response, okResponse()) {
				t.Errorf("replay differs: %d %v %q", res.Response.Code, res.Response.Header, res.Response.Body)
			}
		default:
			executed.Add(1)
		}
	})
	if b.calls.n.Load() != 1 || executed.Load() != 1 || replays.Load() != n-1 {
		t.Fatalf("executions %d, executed answers %d, replays %d; want 1, 1, %d", b.calls.n.Load(), executed.Load(), replays.Load(), n-1)
	}
	b.wantWritten(t, "storm", 1)
}

// A permanent error rolls the action's writes back and stores FAILED,
// which retries replay.
func testDoTxPermanent[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	action := writeThen(b, "declined", okResponse(), idempotency.Permanent(errDeclined, declinedResponse))
	b.wantPermanentStored(t, req(t, scopeA, "tx-declined", "10"), func(r idempotency.Request) error {
		_, err := b.exec.DoTx(b.ctx, r, action)
		return err
	})
}

// declinedResponse is the answer of a permanent failure.
var declinedResponse = idempotency.Response{Code: 402, Body: []byte(`{"error":"declined"}`)}

// wantPermanentStored runs do, whose action writes "declined" and fails
// with a permanent error answering declinedResponse, on r twice: the first
// is told the failure, the retry is told it replayed, the action ran once
// and its write never committed.
func (b *txBundle[TTx]) wantPermanentStored(t *testing.T, r idempotency.Request, do func(idempotency.Request) error) {
	t.Helper()
	err := do(r)
	var fe *idempotency.FailedError
	if !errors.As(err, &fe) || !errors.Is(err, errDeclined) || fe.Replayed {
		t.Fatalf("first: err = %v, want a FailedError", err)
	}
	b.wantWritten(t, "declined", 0)
	b.wantRecord(t, r, idempotency.StatusFailed, 0)
	err = do(r)
	if !errors.As(err, &fe) || !fe.Replayed {
		t.Fatalf("retry: err = %v, want the failure replayed", err)
	}
	mustEqualResponse(t, fe.Response, declinedResponse)
	b.wantExecutions(t, 1)
	b.wantWritten(t, "declined", 0)
}

// A transient error rolls back everything, the claim included: a retry
// runs as new.
func testDoTxTransient[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	r := req(t, scopeA, "tx-transient", "10")
	if _, err := b.exec.DoTx(b.ctx, r, writeThen(b, "attempt", okResponse(), errTransient)); !errors.Is(err, errTransient) {
		t.Fatalf("first: err = %v, want the action's", err)
	}
	b.wantWritten(t, "attempt", 0)
	b.wantNoRecord(t, r)
	res, err := b.exec.DoTx(b.ctx, r, writeThen(b, "attempt", okResponse(), nil))
	b.wantRetriedAnew(t, res, err)
}

// wantRetriedAnew stops the check unless the retry after a transient
// failure, answering res and err, ran the action again: two executions,
// one write of "attempt" committed, the outcome COMPLETED.
func (b *txBundle[TTx]) wantRetriedAnew(t *testing.T, res idempotency.Result, err error) {
	t.Helper()
	if err != nil || res.Replayed || res.Status != idempotency.StatusCompleted {
		t.Fatalf("retry: %+v %v, want a new execution", res, err)
	}
	b.wantExecutions(t, 2)
	b.wantWritten(t, "attempt", 1)
}

// A panic in the action leaves neither its writes nor the claim.
func testDoTxPanic[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	r := req(t, scopeA, "tx-panics", "10")
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic was swallowed")
			}
		}()
		_, _ = b.exec.DoTx(b.ctx, r, func(ctx context.Context, tx TTx) (idempotency.Response, error) {
			if err := b.Write(ctx, tx, "attempt"); err != nil {
				return idempotency.Response{}, err
			}
			panic("boom")
		})
	}()
	b.wantWritten(t, "attempt", 0)
	b.wantNoRecord(t, r)
	if res, err := b.exec.DoTx(b.ctx, r, writeThen(b, "attempt", okResponse(), nil)); err != nil || res.Replayed {
		t.Fatalf("retry after panic: %+v %v", res, err)
	}
	b.wantWritten(t, "attempt", 1)
}

// withTxAction is a WithTx action that makes one write of name through
// the transaction of its context, counted, and then answers resp and
// fail.
func withTxAction[TTx idempotency.Tx](b *txBundle[TTx], name string, resp idempotency.Response, fail error) idempotency.Action {
	write := writeThen(b, name, resp, fail)
	return func(ctx context.Context) (idempotency.Response, error) {
		tx, ok := idempotency.TxFromContext[TTx](ctx)
		if !ok {
			b.calls.n.Add(1)
			return idempotency.Response{}, errors.New("no transaction in the action's context")
		}
		return write(ctx, tx)
	}
}

// WithTx: the claim is committed at once (a duplicate meanwhile is told
// "in progress"), and the action's writes commit with the outcome.
func testWithTx[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	r := req(t, scopeA, "with-tx", "10")
	d := b.exec.WithTx()
	write := withTxAction(b, "with-tx", okResponse(), nil)
	var during error
	res, err := d.Do(b.ctx, r, func(ctx context.Context) (idempotency.Response, error) {
		_, during = b.exec.Do(b.ctx, r, b.calls.action(okResponse()))
		return write(ctx)
	})
	if err != nil || res.Replayed || res.Status != idempotency.StatusCompleted {
		t.Fatalf("first: %+v %v", res, err)
	}
	if !errors.Is(during, idempotency.ErrInProgress) {
		t.Fatalf("a duplicate during the action: %v, want in progress", during)
	}
	mustEqualResponse(t, res.Response, okResponse())
	b.wantWritten(t, "with-tx", 1)
	b.wantRecord(t, r, idempotency.StatusCompleted, res.Lease.Version)
	res, err = d.Do(b.ctx, r, write)
	if err != nil || !res.Replayed {
		t.Fatalf("retry: %+v %v, want a replay", res, err)
	}
	mustEqualResponse(t, res.Response, okResponse())
	b.wantExecutions(t, 1)
	b.wantWritten(t, "with-tx", 1)
}

// WithTx: a transient error rolls the action's writes back and releases
// the key, so a retry runs again.
func testWithTxTransient[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	r := req(t, scopeA, "with-tx-transient", "10")
	d := b.exec.WithTx()
	if _, err := d.Do(b.ctx, r, withTxAction(b, "attempt", okResponse(), errTransient)); !errors.Is(err, errTransient) {
		t.Fatalf("first: err = %v, want the action's", err)
	}
	b.wantWritten(t, "attempt", 0)
	res, err := d.Do(b.ctx, r, withTxAction(b, "attempt", okResponse(), nil))
	b.wantRetriedAnew(t, res, err)
}

// WithTx: a permanent error rolls the action's writes back and stores
// FAILED, which retries replay.
func testWithTxPermanent[TTx idempotency.Tx](t *testing.T, h TxHarness[TTx]) {
	b := setupTx(t, h, nil)
	d := b.exec.WithTx()
	action := withTxAction(b, "declined", okResponse(), idempotency.Permanent(errDeclined, declinedResponse))
	b.wantPermanentStored(t, req(t, scopeA, "with-tx-declined", "10"), func(r idempotency.Request) error {
		_, err := d.Do(b.ctx, r, action)
		return err
	})
}

// sameResponse is mustEqualResponse for goroutines, which must not stop
// the check.
func sameResponse(got, want idempotency.Response) bool {
	return got.Code == want.Code && bytes.Equal(got.Body, want.Body) && fmt.Sprint(got.Header) == fmt.Sprint(want.Header)
}
