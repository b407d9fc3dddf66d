package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
)

// createOrders makes the table of orders that the DoTx tests' actions
// write, and returns the count of its rows.
func createOrders(t *testing.T, pool *pgxpool.Pool) (count func() int) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return func() (n int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// One transaction: concurrent duplicates wait for the first commit and
// replay; none answers "in progress", and the effect exists once.
func TestDoTxConcurrentDuplicatesReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	orders := createOrders(t, b.pool)
	e := mustExecutor(t, b.store, nil)
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
	if got := orders(); got != 1 || executed.Load() != 1 || replayed.Load() != n-1 {
		t.Fatalf("orders %d, executed %d, replayed %d", got, executed.Load(), replayed.Load())
	}
}

// A permanent error undoes the action's writes but stores FAILED; a
// transient error undoes everything, the claim included.
func TestDoTxErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	count := createOrders(t, b.pool)
	e := mustExecutor(t, b.store, nil)
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
	_, err := e.DoTx(ctx, perm, insertThen(perm, idempotency.Permanent(errors.New("sku unknown"), rejected)))
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
	orders := createOrders(t, b.pool)
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
	if n := orders(); n != 1 {
		t.Fatalf("orders = %d, want 1", n)
	}
	got, err := b.store.Claim(ctx, p)
	if err != nil || got.State != idempotency.ClaimReplay || string(got.Record.Response.Body) != "fresh" {
		t.Fatalf("replay: %v %+v %v", got.State, got.Record.Response, err)
	}
}

// DoTx is one span, idempotency.DoTx, holding the key as a short hash only.
func TestDoTxSpan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := tracetest.NewSpanRecorder()
	exec := mustExecutor(t, b.store, &idempotency.Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	r := childRequest("traced")
	for range 2 {
		if _, err := exec.DoTx(context.Background(), r, func(context.Context, pgx.Tx) (idempotency.Response, error) {
			return idempotency.Response{Code: 201}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	var spans, replayed int
	for _, s := range rec.Ended() {
		if s.Name() != "idempotency.DoTx" {
			continue
		}
		spans++
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), r.Key) {
				t.Errorf("attribute %s holds the key", kv.Key)
			}
			if string(kv.Key) == idempotency.AttrKeyHash && kv.Value.AsString() != idempotency.ShortHash(r.Key) {
				t.Errorf("key hash %q", kv.Value.AsString())
			}
			if string(kv.Key) == idempotency.AttrReplayed && kv.Value.AsBool() {
				replayed++
			}
		}
	}
	if spans != 2 || replayed != 1 {
		t.Fatalf("%d DoTx spans, %d replayed; want 2 and 1", spans, replayed)
	}
}
