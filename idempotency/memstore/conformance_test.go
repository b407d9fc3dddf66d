package memstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/idempotencytest"
	"github.com/payonce/payonce/idempotency/memstore"
)

// TestConformance runs the suite every Store must pass.
//
// The store's clock is real time plus an offset that Advance moves, so the
// executor's heartbeats run against leases that really run out, and the
// suite can still jump over lock timeouts and retention.
//
// Automatic eviction is off: the suite advances the clock well past a
// record's expiry and then expects it to be refused (ExpiredRefused) or
// pruned, which is the contract of an unpruned pgstore row. With eviction
// on, memstore would already have deleted it, as a pruner running in the
// background would; that is memstore's own behaviour, tested in
// memstore_test.go.
//
// It runs once more with the executor's replay cache, which must change no
// answer.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, cached := range []bool{false, true} {
		t.Run(map[bool]string{false: "Store", true: "ReplayCache"}[cached], func(t *testing.T) {
			t.Parallel()
			idempotencytest.Exercise(t, func(t *testing.T) idempotencytest.Harness {
				var offset atomic.Int64
				store := memstore.New(&memstore.Config{
					Clock:      func() time.Time { return time.Now().Add(time.Duration(offset.Load())) },
					EvictAfter: -1,
				})
				return idempotencytest.Harness{
					Store:       store,
					Advance:     func(_ testing.TB, d time.Duration) { offset.Add(int64(d)) },
					ReplayCache: cached,
				}
			})
			idempotencytest.ExerciseTx(t, func(t *testing.T) idempotencytest.TxHarness[*memstore.Tx] {
				var offset atomic.Int64
				store := memstore.New(&memstore.Config{
					Clock:      func() time.Time { return time.Now().Add(time.Duration(offset.Load())) },
					EvictAfter: -1,
				})
				var mu sync.Mutex
				written := map[string]int{}
				return idempotencytest.TxHarness[*memstore.Tx]{
					Store:       store,
					Advance:     func(_ testing.TB, d time.Duration) { offset.Add(int64(d)) },
					ReplayCache: cached,
					Write: func(_ context.Context, tx *memstore.Tx, name string) error {
						tx.OnCommit(func() {
							mu.Lock()
							defer mu.Unlock()
							written[name]++
						})
						return nil
					},
					Written: func(_ testing.TB, name string) int {
						mu.Lock()
						defer mu.Unlock()
						return written[name]
					},
				}
			})
		})
	}
}

var _ idempotency.TxStore[*memstore.Tx] = (*memstore.Store)(nil)
