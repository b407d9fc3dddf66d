package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest"
)

// roundTrips records what reaches the server, one entry per round trip:
// a statement, or a batch's statements joined by " | ".
type roundTrips struct {
	mu    sync.Mutex
	trips []string
	batch []string
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trips = append(r.trips, firstWord(d.SQL))
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	var qs []string
	for _, q := range d.Batch.QueuedQueries {
		qs = append(qs, firstWord(q.SQL))
	}
	r.trips = append(r.trips, strings.Join(qs, " | "))
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *roundTrips) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.trips
	r.trips = nil
	return t
}

func firstWord(sql string) string {
	f := strings.Fields(sql)
	if len(f) == 0 {
		return ""
	}
	return strings.ToUpper(f[0])
}

// oneConnPool is a pool of one connection on a migrated schema of the
// test's own, its queries traced by tracer when it is not nil.
func oneConnPool(t *testing.T, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.MigratedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	if tracer != nil {
		cfg.ConnConfig.Tracer = tracer
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// DoTx sends BEGIN with the claim's first statement and the completion
// with the COMMIT: a new key costs two round trips besides the action's
// statements, a replay one and its rollback. The answers are those of
// the unpipelined path.
func TestDoTxPipelinesBeginWithClaim(t *testing.T) {
	t.Parallel()
	rt := &roundTrips{}
	pool := oneConnPool(t, rt)
	ctx := context.Background()
	orders := createOrders(t, pool)
	for name, strategy := range map[string]pgstore.ClaimStrategy{
		"OneStatement": pgstore.ClaimOneStatement, "ReadFirst": pgstore.ClaimReadFirst,
	} {
		e := mustExecutor(t, mustStore(t, pool, &pgstore.Config{ClaimStrategy: strategy}), nil)
		insert := func(r idempotency.Request) pgstore.TxAction {
			return func(ctx context.Context, tx pgx.Tx) (idempotency.Response, error) {
				_, err := tx.Exec(ctx, `INSERT INTO orders (key) VALUES ($1)`, r.Key)
				return idempotency.Response{Code: 201, Body: []byte(r.Key)}, err
			}
		}
		// Warm the connection's statement cache, whose preparations are
		// round trips of their own.
		warm := childRequest("pipeline-warm-" + name)
		for range 2 {
			if _, err := e.DoTx(ctx, warm, insert(warm)); err != nil {
				t.Fatal(err)
			}
		}
		rt.take()

		r := childRequest("pipeline-" + name)
		res, err := e.DoTx(ctx, r, insert(r))
		if err != nil || res.Replayed || string(res.Response.Body) != r.Key {
			t.Fatalf("%s: new key: %+v %v", name, res, err)
		}
		// The claim and the completion are CTEs (WITH ...); the read is a
		// SELECT.
		want, wantReplay := "BEGIN | WITH, INSERT, WITH | COMMIT", "BEGIN | WITH, ROLLBACK"
		if strategy == pgstore.ClaimReadFirst {
			want, wantReplay = "BEGIN | SELECT, WITH, INSERT, WITH | COMMIT", "BEGIN | SELECT, ROLLBACK"
		}
		if got := strings.Join(rt.take(), ", "); got != want {
			t.Fatalf("%s: new key: round trips %q, want %q", name, got, want)
		}

		res, err = e.DoTx(ctx, r, func(context.Context, pgx.Tx) (idempotency.Response, error) {
			t.Errorf("%s: a replay ran its action", name)
			return idempotency.Response{}, nil
		})
		if err != nil || !res.Replayed || string(res.Response.Body) != r.Key {
			t.Fatalf("%s: replay: %+v %v", name, res, err)
		}
		if got := strings.Join(rt.take(), ", "); got != wantReplay {
			t.Fatalf("%s: replay: round trips %q, want %q", name, got, wantReplay)
		}
	}
	if n := orders(); n != 4 {
		t.Fatalf("%d orders, want 4", n)
	}
}

// A claim that fails inside the BEGIN's batch leaves no transaction open
// and the pool's connection usable.
func TestDoTxClaimFailsInsideTheBeginBatch(t *testing.T) {
	t.Parallel()
	pool := oneConnPool(t, nil)
	ctx := context.Background()
	e := mustExecutor(t, mustStore(t, pool, &pgstore.Config{ClaimStrategy: pgstore.ClaimOneStatement}), nil)
	if _, err := pool.Exec(ctx, `ALTER TABLE idempotency_store RENAME TO idempotency_store_away`); err != nil {
		t.Fatal(err)
	}
	r := childRequest("pipeline-fails")
	_, err := e.DoTx(ctx, r, func(context.Context, pgx.Tx) (idempotency.Response, error) {
		t.Error("the action ran without a claim")
		return idempotency.Response{}, nil
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Fatalf("got %v, want the claim's undefined_table error", err)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE idempotency_store_away RENAME TO idempotency_store`); err != nil {
		t.Fatal(err)
	}
	res, err := e.DoTx(ctx, r, func(context.Context, pgx.Tx) (idempotency.Response, error) {
		return idempotency.Response{Code: 201}, nil
	})
	if err != nil || res.Replayed || res.Status != idempotency.StatusCompleted {
		t.Fatalf("after the failure: %+v %v", res, err)
	}
}
