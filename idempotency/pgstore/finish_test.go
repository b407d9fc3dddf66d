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
