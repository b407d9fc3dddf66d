// Package pgtest gives each test its own PostgreSQL schema on the server
// named by TEST_DATABASE_URL (which `make test` provides by starting a
// throwaway cluster, and lab/cmd/withpg for any command), migrated to the
// current payonce schema. payonce's tests use it, and so can a service's
// integration tests of its payonce wiring; [localpg] starts the throwaway
// cluster itself.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/pgtest/localpg"
)

const missing = "TEST_DATABASE_URL is not set. Run the suite with `make test`, which starts a throwaway " +
	"PostgreSQL from the local binaries, or point TEST_DATABASE_URL at a server you own, e.g. " +
	"TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable go test ./..."

var (
	adminOnce sync.Once
	admin     *pgxpool.Pool
	adminErr  error
)

// BaseURL returns TEST_DATABASE_URL, failing the test with instructions
// when it is unset. Tests never skip for a missing database.
func BaseURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("TEST_DATABASE_URL")
	if u == "" {
		t.Fatal(missing)
	}
	return u
}

func adminPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	base := BaseURL(t)
	adminOnce.Do(func() {
		cfg, err := pgxpool.ParseConfig(base)
		if err != nil {
			adminErr = err
			return
		}
		cfg.MaxConns = 4
		admin, adminErr = pgxpool.NewWithConfig(context.Background(), cfg)
	})
	if adminErr != nil {
		t.Fatalf("pgtest: connect to TEST_DATABASE_URL: %v", adminErr)
	}
	return admin
}

// SchemaURL creates an empty schema for this test, dropped when the test
// ends, and returns a connection URL whose search_path selects it. The URL
// can be handed to other processes.
func SchemaURL(t testing.TB) string {
	t.Helper()
	a := adminPool(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := a.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Logf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	u, err := localpg.WithSearchPath(BaseURL(t), schema)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return u
}

// Pool returns a pool on a fresh, migrated schema of its own, closed when
// the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PoolURL(t, MigratedURL(t))
}

// MigratedURL is [SchemaURL] with every payonce migration applied.
func MigratedURL(t testing.TB) string {
	t.Helper()
	u := SchemaURL(t)
	p := PoolURL(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := migrations.Migrate(ctx, p); err != nil {
		t.Fatalf("pgtest: migrate: %v", err)
	}
	return u
}

// PoolURL opens a pool on url, closed when the test ends.
func PoolURL(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgtest: parse url: %v", err)
	}
	cfg.MaxConns = 16
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// ExamplePool returns a pool on a fresh, migrated schema of
// TEST_DATABASE_URL for a runnable example (which has no *testing.T), and
// a function that closes it and drops the schema. It panics with
// instructions when the database is missing.
func ExamplePool(ctx context.Context) (*pgxpool.Pool, func()) {
	base := os.Getenv("TEST_DATABASE_URL")
	if base == "" {
		panic(missing)
	}
	admin, err := pgxpool.New(ctx, base)
	if err != nil {
		panic(fmt.Sprintf("pgtest: connect to TEST_DATABASE_URL: %v", err))
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "example_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		panic(fmt.Sprintf("pgtest: create schema: %v", err))
	}
	u, err := localpg.WithSearchPath(base, schema)
	if err != nil {
		panic(err)
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		panic(err)
	}
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		panic(fmt.Sprintf("pgtest: migrate: %v", err))
	}
	return pool, func() {
		pool.Close()
		_, _ = admin.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+schema+" CASCADE")
		admin.Close()
	}
}
