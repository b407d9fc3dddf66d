package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// A completion that the database holds up (here a row lock taken by
// another transaction) ends at FinishTimeout with an error that says so,
// on the connection's deadline (the context it runs with cannot end),
// and the pool it ran on goes on working.
func TestCompletionEndsAtFinishTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := mustExecutor(t, b.store, &idempotency.Config{FinishTimeout: time.Second})
	ctx := context.Background()
	fp, err := idempotency.NewFingerprint().String("order", "ord_1").Sum()
	if err != nil {
		t.Fatal(err)
	}
	req := idempotency.Request{Scope: "cus_1", Key: "cus_1_held", Fingerprint: fp}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.Do(ctx, req, func(ctx context.Context) (idempotency.Response, error) {
			// The completion's UPDATE will wait for this lock.
			_, err := tx.Exec(ctx, `SELECT 1 FROM idempotency_store WHERE idempotency_key = $1 FOR UPDATE`, req.Key)
			return idempotency.Response{Code: 201}, err
		})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do: %v, want an error matching context.DeadlineExceeded", err)
		}
	case <-time.After(time.Minute): // a safety net, far above FinishTimeout: the test waits for Do's return
		t.Fatal("the completion did not end at FinishTimeout")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range 16 { // every connection of the pool, and more
		var one int
		if err := b.pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
			t.Fatalf("the pool after the timeout: %v", err)
		}
	}
}

// A caller of Store.Complete with a context of its own keeps its power to
// cancel the call: only the executor's finishing context, which nothing
// cancels before its deadline, is bounded by the connection's deadline.
func TestCompleteHonoursTheCallersCancellation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	fp, err := idempotency.NewFingerprint().String("order", "ord_2").Sum()
	if err != nil {
		t.Fatal(err)
	}
	claim, err := b.store.Claim(ctx, idempotency.ClaimParams{Scope: "cus_1", Key: "cus_1_cancelled", Fingerprint: fp,
		LockTimeout: 30 * time.Second, Retention: time.Hour})
	if err != nil || claim.State != idempotency.ClaimAcquired {
		t.Fatalf("claim: %v %v", claim.State, err)
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM idempotency_store WHERE idempotency_key = $1 FOR UPDATE`, claim.Lease.Key); err != nil {
		t.Fatal(err)
	}
	// A deadline far away, and a cancellation that comes first, once the
	// completion waits for the lock.
	cctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- b.store.Complete(cctx, claim.Lease, idempotency.Completion{Status: idempotency.StatusCompleted,
			Response: idempotency.Response{Code: 201}, Retention: time.Hour})
	}()
	waitForLockWait(t, b.pool, tx)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Complete: %v, want an error matching context.Canceled", err)
		}
	case <-time.After(time.Minute): // a safety net: the test waits for Complete's return
		t.Fatal("the cancellation did not end Complete")
	}
}
