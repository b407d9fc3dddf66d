package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/idempotencytest"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest"
)

// Through PgBouncer in transaction pooling mode, where consecutive
// statements may run on different server sessions, the store gives the
// same answers: the conformance suite, its transactional checks included
// (a transaction keeps its server session), with and without the replay
// cache.
func TestConformanceThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("ReplayCache=%v", cached), func(t *testing.T) {
			t.Parallel()
			idempotencytest.Exercise(t, func(t *testing.T) idempotencytest.Harness {
				pool := pgtest.BouncerPool(t)
				store := mustStore(t, pool, &pgstore.Config{Pooler: pgstore.TransactionPooler})
				return idempotencytest.Harness{Store: store, Advance: advance(pool), ReplayCache: cached}
			})
			idempotencytest.ExerciseTx(t, func(t *testing.T) idempotencytest.TxHarness[pgx.Tx] {
				pool := pgtest.BouncerPool(t)
				store := mustStore(t, pool, &pgstore.Config{Pooler: pgstore.TransactionPooler})
				return txHarness(t, pool, store, cached)
			})
		})
	}
}

// DoTx through PgBouncer: 16 goroutines on one key, the action's write
// and the record in one transaction; one effect, every answer the same.
func TestDoTxThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pool := pgtest.BouncerPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, effectsDDL); err != nil {
		t.Fatal(err)
	}
	exec, err := pgstore.NewExecutor(mustStore(t, pool, &pgstore.Config{Pooler: pgstore.TransactionPooler}), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := childRequest("bouncer")
	var wg sync.WaitGroup
	bodies := make([]string, 16)
	errs := make([]error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := exec.DoTx(ctx, r, func(ctx context.Context, tx pgx.Tx) (idempotency.Response, error) {
					if _, err := tx.Exec(ctx, `INSERT INTO effects (key, pid) VALUES ($1, $2)`, r.Key, i); err != nil {
						return idempotency.Response{}, err
					}
					return idempotency.Response{Code: 201, Body: fmt.Appendf(nil, "by %d", i)}, nil
				})
				if errors.Is(err, idempotency.ErrInProgress) {
					continue
				}
				bodies[i], errs[i] = string(res.Response.Body), err
				return
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, b := range bodies {
		if b != bodies[0] {
			t.Fatalf("answers differ: %q", bodies)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM effects`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d effects (%v), want 1", n, err)
	}
}

// A pool that prepares statements is refused behind a transaction pooler,
// with the fix named; nothing is created.
func TestTransactionPoolerNeedsAnUnpreparedPool(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := pgstore.New(b.pool, &pgstore.Config{Pooler: pgstore.TransactionPooler})
	var ie *idempotency.InvalidError
	if !errors.As(err, &ie) || ie.Field != "Config.Pooler" || !strings.Contains(err.Error(), "ForTransactionPooler") {
		t.Fatalf("got %v, want an InvalidError on Config.Pooler naming ForTransactionPooler", err)
	}
	if _, err := pgstore.New(b.pool, &pgstore.Config{Pooler: 7}); !errors.As(err, &ie) || ie.Field != "Config.Pooler" {
		t.Fatalf("unknown pooler: %v", err)
	}
}
