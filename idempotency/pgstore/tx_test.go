package pgstore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
)

// One transaction: concurrent duplicates wait for the first commit and
// replay; none answers "in progress", and the effect exists once.
func TestDoTxConcurrentDuplicatesReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `CREATE TABLE orders (id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	e, err := pgstore.NewExecutor(b.store, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := childRequest("tx-storm")
	const n = 32
	var replayed, executed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := e.DoTx(ctx, r, func(ctx context.Context, tx pgx.Tx) (idempotency.Response, error) {
				var id int64
				err := tx.QueryRow(ctx, `INSERT INTO orders (key) VALUES ($1) RETURNING id`, r.Key).Scan(&id)
				return idempotency.Response{Code: 201, Body: []byte("order")}, err
			})
			switch {
			case err != nil:
				t.Errorf("DoTx: %v", err)
			case res.Replayed:
				replayed.Add(1)
			default:
				executed.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	var orders int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil {
		t.Fatal(err)
	}
	if orders != 1 || executed.Load() != 1 || replayed.Load() != n-1 {
		t.Fatalf("orders %d, executed %d, replayed %d", orders, executed.Load(), replayed.Load())
	}
}

// A permanent error undoes the action's writes but stores FAILED; a
// transient error undoes everything, the claim included.
func TestDoTxErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `CREATE TABLE orders (id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	e, err := pgstore.NewExecutor(b.store, nil)
	if err != nil {
		t.Fatal(err)
	}
	count := func() (n int) {
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	insertThen := func(r idempotency.Request, fail error) pgstore.TxAction {
		return func(ctx context.Context, tx pgx.Tx) (idempotency.Response, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (key) VALUES ($1)`, r.Key); err != nil {
				return idempotency.Response{}, err
			}
			return idempotency.Response{Code: 201}, fail
		}
	}

	perm := childRequest("tx-perm")
	rejected := idempotency.Response{Code: 422, Body: []byte(`{"error":"sku unknown"}`)}
	_, err = e.DoTx(ctx, perm, insertThen(perm, idempotency.Permanent(errors.New("sku unknown"), rejected)))
	if !errors.Is(err, idempotency.ErrFailed) || count() != 0 {
		t.Fatalf("permanent: err = %v, orders = %d", err, count())
	}
	res, err := e.DoTx(ctx, perm, insertThen(perm, nil))
	var fe *idempotency.FailedError
	if !errors.As(err, &fe) || !res.Replayed || string(fe.Response.Body) != string(rejected.Body) || count() != 0 {
		t.Fatalf("permanent replay: %+v %v", res, err)
	}

	trans := childRequest("tx-transient")
	boom := errors.New("boom")
	if _, err := e.DoTx(ctx, trans, insertThen(trans, boom)); !errors.Is(err, boom) {
		t.Fatalf("transient: %v", err)
	}
	if _, err := b.store.Get(ctx, trans.Scope, trans.Key); !errors.Is(err, idempotency.ErrNotFound) || count() != 0 {
		t.Fatalf("transient left a record (%v) or orders (%d)", err, count())
	}
	if res, err := e.DoTx(ctx, trans, insertThen(trans, nil)); err != nil || res.Replayed || count() != 1 {
		t.Fatalf("retry: %+v %v, orders %d", res, err, count())
	}
}

// CompleteTx: the claim is visible at once (duplicates see "in progress"),
// while the action's rows and the outcome commit together. A holder whose
// lease was lost cannot commit its rows with an outcome.
func TestCompleteTx(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `CREATE TABLE orders (id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	r := childRequest("complete-tx")
	p := idempotency.ClaimParams{Scope: r.Scope, Key: r.Key, Fingerprint: r.Fingerprint, LockTimeout: time.Second, Retention: time.Hour}
	a, err := b.store.Claim(ctx, p)
	if err != nil || a.State != idempotency.ClaimAcquired {
		t.Fatalf("claim: %v %v", a.State, err)
	}
	if dup, err := b.store.Claim(ctx, p); err != nil || dup.State != idempotency.ClaimInProgress {
		t.Fatalf("duplicate: %v %v", dup.State, err)
	}
	finish := func(l idempotency.Lease, body string) error {
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (key) VALUES ($1)`, r.Key); err != nil {
				return err
			}
			return b.store.CompleteTx(ctx, tx, l, idempotency.Completion{Status: idempotency.StatusCompleted,
				Response: idempotency.Response{Code: 201, Body: []byte(body)}, Retention: time.Hour})
		})
	}
	// The lease runs out and another holder takes over: the first holder's
	// transaction must roll back, leaving no order.
	advance(b.pool)(t, 2*time.Second)
	c, err := b.store.Claim(ctx, p)
	if err != nil || c.State != idempotency.ClaimReclaimed {
		t.Fatalf("reclaim: %v %v", c.State, err)
	}
	if err := finish(a.Lease, "stale"); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("stale holder: %v", err)
	}
	if err := finish(c.Lease, "fresh"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("orders = %d (%v), want 1", n, err)
	}
	got, err := b.store.Claim(ctx, p)
	if err != nil || got.State != idempotency.ClaimReplay || string(got.Record.Response.Body) != "fresh" {
		t.Fatalf("replay: %v %+v %v", got.State, got.Record.Response, err)
	}
}
