package cronslot_test

import (
	"context"
	"fmt"
	"time"

	"github.com/payonce/payonce/idempotency/cronslot"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest"
)

// Two replicas of a service schedule the same nightly job; their clocks
// are half a second apart. The slot runs once.
func Example() {
	ctx := context.Background()
	pool, done := pgtest.ExamplePool(ctx)
	defer done()
	store, err := pgstore.New(pool, nil)
	if err != nil {
		panic(err)
	}
	nightly, err := cronslot.Parse("0 2 * * *")
	if err != nil {
		panic(err)
	}
	job := func(_ context.Context, s cronslot.Slot) error {
		fmt.Println("payouts for the slot", s.At.Format(time.RFC3339), "key", s.Key)
		return nil
	}
	for _, offset := range []time.Duration{0, 500 * time.Millisecond} {
		now := time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC).Add(offset)
		replica, err := cronslot.New(store, &cronslot.Config{Clock: func() time.Time { return now }})
		if err != nil {
			panic(err)
		}
		if err := replica.Fire(ctx, "payouts", nightly, job, nil); err != nil {
			panic(err)
		}
	}
	// Output:
	// payouts for the slot 2026-12-03T02:00:00Z key cron_payouts_20261203T020000Z
}
