package main

import (
	"context"
	"strings"
	"testing"

	"github.com/payonce/payonce/pgtest"
)

// --line applies, lists and prints only the lines named and those they
// need: a core-only service gets the idempotency tables and nothing of
// payments; a bad line is a usage error naming the lines, before any
// database is touched.
func TestMigrateLines(t *testing.T) {
	t.Parallel()
	url := pgtest.SchemaURL(t)
	out, code := run(t, nil, "migrate", "up", "--line", "idempotency", "--database-url", url)
	if code != 0 || !strings.Contains(out, "applied") {
		t.Fatalf("migrate up --line idempotency: exit %d\n%s", code, out)
	}
	pool := pgtest.PoolURL(t, url)
	var core, payments bool
	if err := pool.QueryRow(context.Background(),
		`SELECT to_regclass('idempotency_store') IS NOT NULL, to_regclass('payment_intents') IS NOT NULL`).Scan(&core, &payments); err != nil {
		t.Fatal(err)
	}
	if !core || payments {
		t.Fatalf("after the core line: idempotency_store %v, payment_intents %v", core, payments)
	}
	out, code = run(t, nil, "migrate", "status", "--line", "payments", "--database-url", url)
	if code != 0 || !strings.Contains(out, "payment_intents") || !strings.Contains(out, " no") {
		t.Fatalf("migrate status --line payments: exit %d\n%s", code, out)
	}
	out, code = run(t, nil, "migrate", "up", "--line", "payments", "--database-url", url)
	if code != 0 {
		t.Fatalf("migrate up --line payments: exit %d\n%s", code, out)
	}
	if err := pool.QueryRow(context.Background(), `SELECT to_regclass('payment_intents') IS NOT NULL`).Scan(&payments); err != nil || !payments {
		t.Fatalf("after the payments line: payment_intents %v (%v)", payments, err)
	}
	out, code = run(t, []string{"DATABASE_URL="}, "migrate", "print", "--line", "idempotency")
	if code != 0 || !strings.Contains(out, "idempotency_store") || strings.Contains(out, "payment_intents") {
		t.Fatalf("migrate print --line idempotency: exit %d\n%.400s", code, out)
	}
	out, code = run(t, []string{"DATABASE_URL="}, "migrate", "up", "--line", "payment")
	if code != 2 || !strings.Contains(out, `--line "payment": no such schema line`) || !strings.Contains(out, "idempotency, ledger, payments, saga") {
		t.Fatalf("migrate up --line payment: exit %d\n%s", code, out)
	}
}

// A malformed database URL is a usage error; a server that does not answer
// is named as the database, not as a migration that failed.
func TestMigrateBadDatabase(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"up", "status"} {
		if out, code := run(t, nil, "migrate", cmd, "--database-url", "postgres://u@h:notaport/db"); code != 2 || !strings.Contains(out, "database URL") {
			t.Errorf("migrate %s with a malformed URL: exit %d, want 2 naming the database URL\n%s", cmd, code, out)
		}
		out, code := run(t, nil, "migrate", cmd, "--database-url", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5")
		if code != 1 || !strings.Contains(out, "database:") || strings.Contains(out, "version 0001") {
			t.Errorf("migrate %s against no server: exit %d, want 1 naming the database\n%s", cmd, code, out)
		}
	}
}
