package idempotency_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// instantStore answers every claim with a new lease and records every
// outcome at once, without storing anything: what Executor.Do costs on
// top of its store's two round trips (BENCHMARKS.md, sixth session).
type instantStore struct{}

func (instantStore) Claim(_ context.Context, p idempotency.ClaimParams) (idempotency.Claim, error) {
	return idempotency.Claim{State: idempotency.ClaimAcquired, Lease: idempotency.Lease{Scope: p.Scope, Key: p.Key, Version: 1}}, nil
}
func (instantStore) Complete(context.Context, idempotency.Lease, idempotency.Completion) error {
	return nil
}
func (instantStore) Release(context.Context, idempotency.Lease) error { return nil }
func (instantStore) Heartbeat(context.Context, idempotency.Lease, time.Duration) error {
	return nil
}
func (instantStore) Get(context.Context, string, string) (idempotency.Record, error) {
	return idempotency.Record{}, idempotency.ErrNotFound
}
func (instantStore) Prune(context.Context, int) (int, error) { return 0, nil }

// BenchmarkExecutorDo is the executor's own work for one new key: checks,
// claim bookkeeping, the lease guard, the heartbeat queue, the finishing
// context and the outcome, over a store that costs nothing.
func BenchmarkExecutorDo(b *testing.B) {
	exec, err := idempotency.New(instantStore{}, &idempotency.Config{LockTimeout: 30 * time.Second, Retention: 24 * time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	fp, err := idempotency.NewFingerprint().Decimal("amount", "49.99").String("currency", "EUR").Sum()
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "order-" + strconv.Itoa(1_000_000+i)
	}
	resp := idempotency.Response{Code: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"order_id":"ord_4f9c2a"}`)}
	action := func(context.Context) (idempotency.Response, error) { return resp, nil }
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		res, err := exec.Do(ctx, idempotency.Request{Scope: "bench", Key: keys[i%len(keys)], Fingerprint: fp}, action)
		if err != nil || res.Status != idempotency.StatusCompleted {
			b.Fatalf("Do = %+v, %v", res, err)
		}
	}
}
