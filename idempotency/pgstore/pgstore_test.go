package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The suite runs once per claim strategy, once more with the executor's
// replay cache and once without group commit: they must be
// indistinguishable but for their cost.
func TestConformance(t *testing.T) {
	t.Parallel()
	for name, strategy := range map[string]pgstore.ClaimStrategy{
		"Adaptive": pgstore.ClaimAdaptive, "OneStatement": pgstore.ClaimOneStatement, "ReadFirst": pgstore.ClaimReadFirst,
		"AdaptiveReplayCache": pgstore.ClaimAdaptive, "AdaptiveNoGroupCommit": pgstore.ClaimAdaptive,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			idempotencytest.Exercise(t, func(t *testing.T) idempotencytest.Harness {
				b := setupWith(t, &pgstore.Config{ClaimStrategy: strategy, NoGroupCommit: strings.HasSuffix(name, "NoGroupCommit")})
				return idempotencytest.Harness{Store: b.store, Advance: advance(b.pool),
					ReplayCache: strings.HasSuffix(name, "ReplayCache")}
			})
		})
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
