package pgstore_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/idempotencytest"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest"
)

func TestMain(m *testing.M) {
	if runChild() {
		return
	}
	goleak.VerifyTestMain(stopBouncer{m},
		// pgx pools' background health checks end when the pool is closed
		// by t.Cleanup, which runs before goleak looks.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("github.com/jackc/puddle/v2.(*Pool).CreateResource.func1"),
	)
}

// stopBouncer stops the PgBouncer that tests started, once they are done
// and before goleak looks.
type stopBouncer struct{ *testing.M }

func (s stopBouncer) Run() int {
	code := s.M.Run()
	pgtest.StopBouncer()
	return code
}

// advance makes d pass for every record of the test's schema. The database
// clock cannot be moved, so the records' timestamps move back instead.
func advance(pool *pgxpool.Pool) func(t testing.TB, d time.Duration) {
	return func(t testing.TB, d time.Duration) {
		t.Helper()
		_, err := pool.Exec(context.Background(), `UPDATE idempotency_store
			SET locked_until = locked_until - make_interval(secs => $1),
			    expires_at   = expires_at   - make_interval(secs => $1),
			    created_at   = created_at   - make_interval(secs => $1),
			    completed_at = completed_at - make_interval(secs => $1),
			    refuse_until = refuse_until - make_interval(secs => $1)`, d.Seconds())
		if err != nil {
			t.Fatalf("advance: %v", err)
		}
	}
}

type bundle struct {
	pool  *pgxpool.Pool
	store *pgstore.Store
	url   string
}

func setup(t *testing.T) bundle {
	t.Helper()
	return setupWith(t, nil)
}

func setupWith(t *testing.T, cfg *pgstore.Config) bundle {
	t.Helper()
	url := pgtest.MigratedURL(t)
	pool := pgtest.PoolURL(t, url)
	return bundle{pool: pool, store: mustStore(t, pool, cfg), url: url}
}

func mustStore(t testing.TB, pool *pgxpool.Pool, cfg *pgstore.Config) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(pool, cfg)
	return must(t, s, err)
}

func mustExecutor(t testing.TB, store *pgstore.Store, cfg *idempotency.Config) *pgstore.Executor {
	t.Helper()
	e, err := pgstore.NewExecutor(store, cfg)
	return must(t, e, err)
}

// must is v, the test stopped unless err is nil.
func must[T any](t testing.TB, v T, err error) T {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The suite, its transactional checks included, runs once per claim
// strategy, once more with the executor's replay cache and once without
// group commit: they must be indistinguishable but for their cost.
func TestConformance(t *testing.T) {
	t.Parallel()
	for name, strategy := range map[string]pgstore.ClaimStrategy{
		"Adaptive": pgstore.ClaimAdaptive, "OneStatement": pgstore.ClaimOneStatement, "ReadFirst": pgstore.ClaimReadFirst,
		"AdaptiveReplayCache": pgstore.ClaimAdaptive, "AdaptiveNoGroupCommit": pgstore.ClaimAdaptive,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := &pgstore.Config{ClaimStrategy: strategy, NoGroupCommit: strings.HasSuffix(name, "NoGroupCommit")}
			cached := strings.HasSuffix(name, "ReplayCache")
			idempotencytest.Exercise(t, func(t *testing.T) idempotencytest.Harness {
				b := setupWith(t, cfg)
				return idempotencytest.Harness{Store: b.store, Advance: advance(b.pool), ReplayCache: cached}
			})
			idempotencytest.ExerciseTx(t, func(t *testing.T) idempotencytest.TxHarness[pgx.Tx] {
				b := setupWith(t, cfg)
				return txHarness(t, b.pool, b.store, cached)
			})
		})
	}
}

// txHarness is the transactional suite's harness on store, whose pool
// reaches the test's own schema or database: a check's writes are rows of
// a table of its own there, committed or not with the store's records.
func txHarness(t *testing.T, pool *pgxpool.Pool, store *pgstore.Store, cached bool) idempotencytest.TxHarness[pgx.Tx] {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `CREATE TABLE conformance_writes (name TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return idempotencytest.TxHarness[pgx.Tx]{
		Store: store, Advance: advance(pool), ReplayCache: cached,
		Write: func(ctx context.Context, tx pgx.Tx, name string) error {
			_, err := tx.Exec(ctx, `INSERT INTO conformance_writes (name) VALUES ($1)`, name)
			return err
		},
		Written: func(t testing.TB, name string) int {
			t.Helper()
			var n int
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM conformance_writes WHERE name = $1`, name).Scan(&n); err != nil {
				t.Fatalf("written: %v", err)
			}
			return n
		},
		Waiting: func(t testing.TB, tx pgx.Tx) bool {
			t.Helper()
			ctx := context.Background()
			var pid int32 // the server's, also through PgBouncer
			if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				t.Fatalf("waiting: %v", err)
			}
			var waiting bool
			if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))`, pid).Scan(&waiting); err != nil {
				t.Fatalf("waiting: %v", err)
			}
			return waiting
		},
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := pgstore.New(b.pool, &pgstore.Config{ClaimStrategy: 9})
	var ie *idempotency.InvalidError
	if !errors.As(err, &ie) || ie.Field != "Config.ClaimStrategy" {
		t.Fatalf("err = %v", err)
	}
	if _, err := pgstore.New(nil, nil); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("nil pool: %v", err)
	}
}

func mustFP(t testing.TB, fields ...string) idempotency.Fingerprint {
	t.Helper()
	b := idempotency.NewFingerprint()
	for i, f := range fields {
		b.String(string(rune('a'+i)), f)
	}
	f, err := b.Sum()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Replays of records whose stored headers are the same bytes each get
// headers of their own (changing one answer's changes no other), and
// records with other headers get theirs.
func TestReplayHeadersAreTheirOwn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	store := func(key string, h http.Header) {
		p := idempotency.ClaimParams{Scope: "usr_hdr", Key: key, Fingerprint: mustFP(t, key),
			LockTimeout: time.Minute, Retention: time.Hour}
		c, err := b.store.Claim(ctx, p)
		if err != nil || c.State != idempotency.ClaimAcquired {
			t.Fatalf("claim %s: %+v, %v", key, c, err)
		}
		if err := b.store.Complete(ctx, c.Lease, idempotency.Completion{Status: idempotency.StatusCompleted,
			Response: idempotency.Response{Code: 201, Header: h, Body: []byte("{}")}, Retention: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	replay := func(key string) http.Header {
		p := idempotency.ClaimParams{Scope: "usr_hdr", Key: key, Fingerprint: mustFP(t, key),
			LockTimeout: time.Minute, Retention: time.Hour}
		c, err := b.store.Claim(ctx, p)
		if err != nil || c.State != idempotency.ClaimReplay {
			t.Fatalf("replay %s: %+v, %v", key, c, err)
		}
		return c.Record.Response.Header
	}
	store("hdr-json-1", http.Header{"Content-Type": {"application/json"}})
	store("hdr-json-2", http.Header{"Content-Type": {"application/json"}})
	store("hdr-text", http.Header{"Content-Type": {"text/plain"}, "Location": {"/orders/7"}})

	// Each answer is changed by its caller before the next replay.
	for _, key := range []string{"hdr-json-1", "hdr-json-2", "hdr-json-1", "hdr-json-2"} {
		h := replay(key)
		if h.Get("Content-Type") != "application/json" || len(h) != 1 {
			t.Errorf("replay of %s after a caller changed another answer's headers: %v", key, h)
		}
		h.Set("Content-Type", "changed/by-caller")
		h["X-Added"] = []string{"by caller"}
	}
	if h := replay("hdr-text"); h.Get("Content-Type") != "text/plain" || h.Get("Location") != "/orders/7" || len(h) != 2 {
		t.Errorf("replay of hdr-text: %v", h)
	}
	if h := replay("hdr-json-2"); h.Get("Content-Type") != "application/json" || len(h) != 1 {
		t.Errorf("replay of hdr-json-2 after hdr-text: %v", h)
	}
}
