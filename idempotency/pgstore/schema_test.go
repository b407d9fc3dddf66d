package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/pgtest"
)

// New refuses a schema without the idempotency line, or with an older
// one, naming what is missing and the command that applies it, instead of
// failing the first claim with `relation "idempotency_store" does not
// exist`.
func TestNewChecksSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolURL(t, pgtest.SchemaURL(t))

	_, err := pgstore.New(pool, nil)
	if !errors.Is(err, migrations.ErrNotMigrated) {
		t.Fatalf("New on an empty schema: %v, want migrations.ErrNotMigrated", err)
	}
	for _, s := range []string{"pgstore.New: schema ", "lacks the idempotency line (0001_idempotency_store, ", `"payonce migrate up"`,
		"migrations.MigrateLines(ctx, pool, migrations.LineIdempotency)"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q: %v", s, err)
		}
	}
	if strings.Contains(err.Error(), "does not exist") {
		t.Errorf("the database's error leaks instead of the hint: %v", err)
	}

	// An older schema: the core line without its last version.
	if _, err := migrations.MigrateLines(ctx, pool, migrations.LineIdempotency); err != nil {
		t.Fatal(err)
	}
	last := migrations.LineIdempotency.Migrations()
	lastVersion := last[len(last)-1]
	if _, err := pool.Exec(ctx, `DELETE FROM payonce_migrations WHERE version = $1`, lastVersion.Version); err != nil {
		t.Fatal(err)
	}
	_, err = pgstore.New(pool, nil)
	if !errors.Is(err, migrations.ErrNotMigrated) || !strings.Contains(err.Error(), lastVersion.Name+" of the idempotency line (an older schema)") {
		t.Fatalf("New on an older schema: %v", err)
	}
}

// A core-only schema (the idempotency line, no payments, ledger or saga
// tables) is all a store needs.
func TestCoreOnlySchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolURL(t, pgtest.SchemaURL(t))
	if _, err := migrations.MigrateLines(ctx, pool, migrations.LineIdempotency); err != nil {
		t.Fatal(err)
	}
	var others int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()
		AND tablename IN ('payment_intents', 'ledger_entries', 'sagas')`).Scan(&others); err != nil || others != 0 {
		t.Fatalf("a core-only schema has %d other tables (%v)", others, err)
	}
	exec, err := pgstore.NewExecutor(mustStore(t, pool, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Close() })
	r := childRequest("core-only")
	for i := range 2 {
		res, err := exec.Do(ctx, r, func(context.Context) (idempotency.Response, error) {
			return idempotency.Response{Code: 201, Body: []byte("done")}, nil
		})
		if err != nil || res.Replayed != (i == 1) || string(res.Response.Body) != "done" {
			t.Fatalf("call %d: %+v, %v", i, res, err)
		}
	}
}
