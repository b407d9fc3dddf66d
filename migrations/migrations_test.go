package migrations_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/pgtest"
)

// Many migrators start at once on one schema: every version is applied
// exactly once, and a second run applies nothing.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	url := pgtest.SchemaURL(t)
	ctx := context.Background()
	const n = 8
	applied := make([][]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		p := pgtest.PoolURL(t, url)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			applied[i], errs[i] = migrations.Migrate(ctx, p)
		}(i)
	}
	wg.Wait()
	total := 0
	for i := range errs {
		if errs[i] != nil {
			t.Fatalf("migrator %d: %v", i, errs[i])
		}
		total += len(applied[i])
	}
	if total != len(migrations.All()) {
		t.Fatalf("%d versions applied in all, want %d", total, len(migrations.All()))
	}
	p := pgtest.PoolURL(t, url)
	again, err := migrations.Migrate(ctx, p)
	if err != nil || len(again) != 0 {
		t.Fatalf("second run applied %v (%v)", again, err)
	}
	st, err := migrations.Status(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if !s.Applied {
			t.Fatalf("version %d not applied", s.Version)
		}
	}
}

// The printed SQL, run by another tool, yields the same schema.
func TestPrintedSQLApplies(t *testing.T) {
	t.Parallel()
	url := pgtest.SchemaURL(t)
	p := pgtest.PoolURL(t, url)
	ctx := context.Background()
	sql := migrations.SQL()
	if !strings.Contains(sql, "CREATE TABLE idempotency_store") {
		t.Fatal("printed SQL lacks the idempotency store")
	}
	if _, err := p.Exec(ctx, sql); err != nil {
		t.Fatalf("printed SQL: %v", err)
	}
	applied, err := migrations.Migrate(ctx, p)
	if err != nil || len(applied) != 0 {
		t.Fatalf("after the printed SQL, Migrate applied %v (%v)", applied, err)
	}
}
