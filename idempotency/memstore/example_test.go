package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/memstore"
)

// An executor over a memstore runs an action once per key and replays its
// outcome to every retry.
func Example() {
	ctx := context.Background()
	exec, err := idempotency.New(memstore.New(nil), nil)
	if err != nil {
		panic(err)
	}

	key, err := idempotency.ComposeKey("usr_7fQ9x", "createOrder", "0b1c2e4a-7d3f-4e8a-9b6c-5d4e3f2a1b0c")
	if err != nil {
		panic(err)
	}
	fp, err := idempotency.NewFingerprint().Decimal("amount", "49.99").String("currency", "EUR").Sum()
	if err != nil {
		panic(err)
	}
	req := idempotency.Request{Scope: "usr_7fQ9x", Key: key, Fingerprint: fp}

	orders := 0
	createOrder := func(ctx context.Context) (idempotency.Response, error) {
		orders++
		return idempotency.Response{Code: 201, Body: fmt.Appendf(nil, `{"order":%d}`, orders)}, nil
	}

	for range 3 { // a double click, then a retry after a lost response
		res, err := exec.Do(ctx, req, createOrder)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%d %s replayed=%v\n", res.Response.Code, res.Response.Body, res.Replayed)
	}

	// The same key with another amount is refused; nothing changes.
	req.Fingerprint, _ = idempotency.NewFingerprint().Decimal("amount", "99.99").String("currency", "EUR").Sum()
	_, err = exec.Do(ctx, req, createOrder)
	fmt.Println(errors.Is(err, idempotency.ErrFingerprintMismatch), "orders created:", orders)

	// Output:
	// 201 {"order":1} replayed=false
	// 201 {"order":1} replayed=true
	// 201 {"order":1} replayed=true
	// true orders created: 1
}

// The store's own API, on an injected clock: claim, a duplicate while the
// first runs, complete, replay, and a new request once the record expired.
func ExampleStore_Claim() {
	ctx := context.Background()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	store := memstore.New(&memstore.Config{Clock: func() time.Time { return now }})

	fp, _ := idempotency.NewFingerprint().Decimal("amount", "49.99").Sum()
	p := idempotency.ClaimParams{
		Scope:       "usr_7fQ9x",
		Key:         "usr_7fQ9x_charge_0b1c2e4a-7d3f-4e8a-9b6c-5d4e3f2a1b0c",
		Fingerprint: fp,
		LockTimeout: 30 * time.Second,
		Retention:   24 * time.Hour,
	}
	claim := func() idempotency.Claim {
		c, err := store.Claim(ctx, p)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s lease=%d retry_after=%s\n", c.State, c.Lease.Version, c.RetryAfter)
		return c
	}

	first := claim()
	now = now.Add(10 * time.Second)
	claim()
	err := store.Complete(ctx, first.Lease, idempotency.Completion{
		Status:    idempotency.StatusCompleted,
		Response:  idempotency.Response{Code: 200, Body: []byte(`{"charge":"ch_1"}`)},
		Retention: 24 * time.Hour,
	})
	if err != nil {
		panic(err)
	}
	replay := claim()
	fmt.Printf("%d %s\n", replay.Record.Response.Code, replay.Record.Response.Body)

	now = now.Add(24 * time.Hour)
	claim()

	// Output:
	// acquired lease=0 retry_after=0s
	// in_progress lease=0 retry_after=20s
	// replay lease=0 retry_after=0s
	// 200 {"charge":"ch_1"}
	// acquired lease=1 retry_after=0s
}
