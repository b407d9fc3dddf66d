package migrations_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/pgtest/localpg"
)

// lineTables are the tables each line creates, besides payonce_migrations.
var lineTables = map[migrations.Line][]string{
	migrations.LineIdempotency: {"idempotency_rate_limits", "idempotency_store", "operator_audit"},
	migrations.LineLedger:      {"ledger_accounts", "ledger_balance_snapshots", "ledger_entries", "ledger_postings"},
	migrations.LinePayments:    {"payment_intents", "reconcile_items", "reconcile_runs", "webhook_events"},
	migrations.LineSaga:        {"saga_steps", "sagas"},
	migrations.LineReplayCache: nil, // triggers on idempotency_store
}

func emptySchema(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return pgtest.PoolURL(t, pgtest.SchemaURL(t))
}

// tables lists the tables of the pool's current schema.
func tables(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	var out []string
	err := pool.QueryRow(context.Background(), `SELECT coalesce(array_agg(tablename::text ORDER BY tablename), '{}')
		FROM pg_tables WHERE schemaname = current_schema()`).Scan(&out)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// catalog describes the current schema independently of its name: tables
// and their columns in order, constraints, indexes, triggers, functions.
// Two schemas with the same catalog are the same schema.
func catalog(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	var out []string
	err := pool.QueryRow(context.Background(), `
WITH s AS (SELECT current_schema() AS name, (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) AS oid),
items AS (
    SELECT format('column %s.%s #%s %s notnull=%s default=%s identity=%s', c.relname, a.attname, a.attnum,
                  format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.attidentity) AS item
      FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE c.relnamespace = (SELECT oid FROM s) AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT format('constraint %s %s %s', c.relname, k.conname, pg_get_constraintdef(k.oid))
      FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
     WHERE k.connamespace = (SELECT oid FROM s)
    UNION ALL
    SELECT format('index %s', indexdef) FROM pg_indexes WHERE schemaname = (SELECT name FROM s)
    UNION ALL
    SELECT format('trigger %s', pg_get_triggerdef(g.oid))
      FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
     WHERE c.relnamespace = (SELECT oid FROM s) AND NOT g.tgisinternal
    UNION ALL
    SELECT format('function %s(%s) %s', p.proname, pg_get_function_arguments(p.oid), md5(p.prosrc))
      FROM pg_proc p WHERE p.pronamespace = (SELECT oid FROM s)
)
SELECT coalesce(array_agg(replace(item, (SELECT name FROM s) || '.', '') ORDER BY item), '{}') FROM items`).Scan(&out)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fullCatalog is the catalog of a fresh schema migrated with every line.
func fullCatalog(t *testing.T) []string {
	t.Helper()
	p := emptySchema(t)
	if _, err := migrations.Migrate(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	c := catalog(t, p)
	for _, kind := range []string{"column ", "constraint ", "index ", "trigger ", "function "} {
		if !slices.ContainsFunc(c, func(item string) bool { return strings.HasPrefix(item, kind) }) {
			t.Fatalf("the catalog of every line lists no %s: %v", kind, c)
		}
	}
	return c
}

func requireSameCatalog(t *testing.T, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("unexpected: %s", g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing: %s", w)
		}
	}
	t.FailNow()
}

func versionsOf(ms []migrations.Migration) []int {
	var out []int
	for _, m := range ms {
		out = append(out, m.Version)
	}
	return out
}

// The lines partition one dense sequence of versions, and each line comes
// after the lines it needs.
func TestLinesLayout(t *testing.T) {
	t.Parallel()
	all := migrations.All()
	for i, m := range all {
		if m.Version != i+1 {
			t.Fatalf("version %d at position %d: versions must run 1, 2, 3... across the lines", m.Version, i)
		}
		if !m.Line.Valid() {
			t.Fatalf("version %d has line %q", m.Version, m.Line)
		}
	}
	seen := map[migrations.Line]bool{}
	n := 0
	for _, l := range migrations.Lines() {
		for _, need := range l.Needs() {
			if !seen[need] {
				t.Fatalf("line %s needs %s, which Lines() lists after it", l, need)
			}
		}
		seen[l] = true
		if len(l.Migrations()) == 0 {
			t.Fatalf("line %s has no migration", l)
		}
		n += len(l.Migrations())
	}
	if n != len(all) {
		t.Fatalf("the lines hold %d migrations, All() %d", n, len(all))
	}
	if got := migrations.LinePayments.Needs(); !slices.Equal(got, []migrations.Line{migrations.LineIdempotency, migrations.LineLedger}) {
		t.Fatalf("payments needs %v", got)
	}
}

// Each line migrates alone, with the lines it needs and nothing else.
func TestEachLineAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, l := range migrations.Lines() {
		t.Run(string(l), func(t *testing.T) {
			t.Parallel()
			p := emptySchema(t)
			applied, err := migrations.MigrateLines(ctx, p, l)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"payonce_migrations"}
			var wantVersions []int
			for _, line := range append([]migrations.Line{l}, l.Needs()...) {
				want = append(want, lineTables[line]...)
				wantVersions = append(wantVersions, versionsOf(line.Migrations())...)
			}
			slices.Sort(want)
			slices.Sort(wantVersions)
			if got := tables(t, p); !slices.Equal(got, want) {
				t.Fatalf("tables %v, want %v", got, want)
			}
			if !slices.Equal(applied, wantVersions) {
				t.Fatalf("applied %v, want %v", applied, wantVersions)
			}
			if err := migrations.Check(ctx, p, l); err != nil {
				t.Fatalf("Check after MigrateLines: %v", err)
			}
			if again, err := migrations.MigrateLines(ctx, p, l); err != nil || len(again) != 0 {
				t.Fatalf("second run applied %v (%v)", again, err)
			}
		})
	}
}

// A core-only service gets the idempotency tables and nothing of payments,
// the ledger or sagas; the payments line is refused by Check, naming what
// is missing and how to apply it.
func TestCoreOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := emptySchema(t)
	applied, err := migrations.MigrateLines(ctx, p, migrations.LineIdempotency)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 3, 8, 15, 16, 17, 18, 19}; !slices.Equal(applied, want) {
		t.Fatalf("applied %v, want %v", applied, want)
	}
	got := tables(t, p)
	for _, absent := range []string{"payment_intents", "ledger_accounts", "ledger_entries", "ledger_postings", "webhook_events", "sagas", "reconcile_runs"} {
		if slices.Contains(got, absent) {
			t.Fatalf("a core-only schema has %s: %v", absent, got)
		}
	}
	if err := migrations.Check(ctx, p, migrations.LineIdempotency); err != nil {
		t.Fatal(err)
	}
	if got := announcementTriggers(t, p); len(got) != 0 {
		t.Fatalf("a core-only schema has the replay cache's triggers %v", got)
	}

	err = migrations.Check(ctx, p, migrations.LinePayments)
	var ne *migrations.NotMigratedError
	if !errors.As(err, &ne) || !errors.Is(err, migrations.ErrNotMigrated) {
		t.Fatalf("Check(payments) on a core-only schema: %v", err)
	}
	wantMissing := append(versionsOf(migrations.LineLedger.Migrations()), versionsOf(migrations.LinePayments.Migrations())...)
	slices.Sort(wantMissing)
	if got := versionsOf(ne.Missing); !slices.Equal(got, wantMissing) {
		t.Fatalf("missing %v, want %v", got, wantMissing)
	}
	for _, s := range []string{"the ledger line (0002_ledger)", "the payments line (0004_payment_intents, ", "0013_overturned_outcomes)",
		`"payonce migrate up"`, "migrations.MigrateLines(ctx, pool, migrations.LinePayments)", ne.Schema} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q: %v", s, err)
		}
	}
	if strings.Contains(err.Error(), "idempotency line") {
		t.Errorf("error names the idempotency line, which is applied: %v", err)
	}

	st, err := migrations.StatusLines(ctx, p, migrations.LinePayments)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Applied != (s.Line == migrations.LineIdempotency) {
			t.Fatalf("status of %04d (line %s): applied %v", s.Version, s.Line, s.Applied)
		}
	}
	if len(st) != len(migrations.All())-len(migrations.LineSaga.Migrations())-len(migrations.LineReplayCache.Migrations()) {
		t.Fatalf("StatusLines(payments) lists %d versions", len(st))
	}
}

// A database that the single-sequence migrator left at version 12 gets the
// versions after it, and ends as a fresh one; or only those of the lines
// it asks for, and the rest later.
func TestFromOldSequence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	want := fullCatalog(t)
	atVersion12 := func(t *testing.T) *pgxpool.Pool {
		p := emptySchema(t)
		for v := 1; v <= 12; v++ {
			if err := migrations.ApplyVersion(ctx, p, v); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	t.Run("Migrate", func(t *testing.T) {
		t.Parallel()
		p := atVersion12(t)
		applied, err := migrations.Migrate(ctx, p)
		if err != nil || !slices.Equal(applied, []int{13, 14, 15, 16, 17, 18, 19, 20}) {
			t.Fatalf("applied %v (%v), want [13 14 15 16 17 18 19 20]", applied, err)
		}
		requireSameCatalog(t, catalog(t, p), want)
		if err := migrations.Check(ctx, p, migrations.Lines()...); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("LineByLine", func(t *testing.T) {
		t.Parallel()
		p := atVersion12(t)
		err := migrations.Check(ctx, p, migrations.LineIdempotency)
		var ne *migrations.NotMigratedError
		if !errors.As(err, &ne) || !slices.Equal(versionsOf(ne.Missing), []int{15, 16, 17, 18, 19}) ||
			!strings.Contains(err.Error(), "versions 0015_expiry_tombstones, 0016_replay_invalidation, 0017_lease_holders, 0018_cheap_change_trigger, 0019_announcements_opt_in of the idempotency line (an older schema)") {
			t.Fatalf("Check(idempotency) at version 12: %v", err)
		}
		if applied, err := migrations.MigrateLines(ctx, p, migrations.LineIdempotency); err != nil || !slices.Equal(applied, []int{15, 16, 17, 18, 19}) {
			t.Fatalf("idempotency line applied %v (%v), want [15 16 17 18 19]", applied, err)
		}
		err = migrations.Check(ctx, p, migrations.LinePayments)
		if !errors.As(err, &ne) || !slices.Equal(versionsOf(ne.Missing), []int{13}) {
			t.Fatalf("Check(payments) at version 12: %v", err)
		}
		if applied, err := migrations.MigrateLines(ctx, p, migrations.LinePayments); err != nil || !slices.Equal(applied, []int{13}) {
			t.Fatalf("payments line applied %v (%v), want [13]", applied, err)
		}
		if applied, err := migrations.Migrate(ctx, p); err != nil || !slices.Equal(applied, []int{14, 20}) {
			t.Fatalf("every line applied %v (%v), want [14 20]", applied, err)
		}
		requireSameCatalog(t, catalog(t, p), want)
	})
}

// Lines added later, in any order, end in the same schema as every line
// migrated at once.
func TestLinesAddedLater(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	want := fullCatalog(t)
	for _, order := range [][]migrations.Line{
		{migrations.LineIdempotency, migrations.LinePayments, migrations.LineSaga, migrations.LineReplayCache},
		{migrations.LineSaga, migrations.LineReplayCache, migrations.LineLedger, migrations.LinePayments},
		{migrations.LineReplayCache, migrations.LineLedger, migrations.LineIdempotency, migrations.LineSaga, migrations.LinePayments},
	} {
		t.Run(fmtLines(order), func(t *testing.T) {
			t.Parallel()
			p := emptySchema(t)
			for _, l := range order {
				if _, err := migrations.MigrateLines(ctx, p, l); err != nil {
					t.Fatalf("line %s: %v", l, err)
				}
			}
			requireSameCatalog(t, catalog(t, p), want)
			if applied, err := migrations.Migrate(ctx, p); err != nil || len(applied) != 0 {
				t.Fatalf("Migrate after every line applied %v (%v)", applied, err)
			}
		})
	}
}

func fmtLines(ls []migrations.Line) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = string(l)
	}
	return strings.Join(s, ",")
}

// Check, MigrateLines, StatusLines and SQLLines name a bad line; Check
// names the schema it looked at and how to migrate it.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := emptySchema(t)
	for name, err := range map[string]error{
		"Check":       migrations.Check(ctx, p),
		"Check(nope)": migrations.Check(ctx, p, "nope"),
		"MigrateLines": func() error {
			_, err := migrations.MigrateLines(ctx, p)
			return err
		}(),
		"MigrateLines(nope)": func() error {
			_, err := migrations.MigrateLines(ctx, p, migrations.LineIdempotency, "nope")
			return err
		}(),
		"StatusLines(nope)": func() error {
			_, err := migrations.StatusLines(ctx, p, "nope")
			return err
		}(),
		"SQLLines(nope)": func() error {
			_, err := migrations.SQLLines("nope")
			return err
		}(),
	} {
		if err == nil || !strings.Contains(err.Error(), "idempotency, ledger, payments, saga, replaycache") {
			t.Errorf("%s: %v, want an error listing the lines", name, err)
		}
	}
	if len(tables(t, p)) != 0 {
		t.Fatal("a refused MigrateLines created tables")
	}

	// An empty schema: nothing applied, not even payonce_migrations.
	err := migrations.Check(ctx, p, migrations.LineIdempotency)
	var ne *migrations.NotMigratedError
	if !errors.As(err, &ne) || !strings.HasPrefix(ne.Schema, "t_") || len(ne.Missing) != len(migrations.LineIdempotency.Migrations()) {
		t.Fatalf("Check on an empty schema: %#v", err)
	}
	for _, s := range []string{`schema "` + ne.Schema + `" lacks the idempotency line (0001_idempotency_store, `,
		`run "payonce migrate up" on this database and schema, or from Go migrations.MigrateLines(ctx, pool, migrations.LineIdempotency)`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q: %v", s, err)
		}
	}

	// A search_path naming no schema that exists.
	u, err := localpg.WithSearchPath(pgtest.BaseURL(t), "no_such_schema_x")
	if err != nil {
		t.Fatal(err)
	}
	err = migrations.Check(ctx, pgtest.PoolURL(t, u), migrations.LineSaga)
	if !errors.As(err, &ne) || ne.Schema != "" || !strings.Contains(err.Error(), `search_path "no_such_schema_x" names no schema that exists`) ||
		!strings.Contains(err.Error(), "migrations.MigrateLines(ctx, pool, migrations.LineSaga)") {
		t.Fatalf("Check with a search_path of no schema: %v", err)
	}
}

// The printed SQL of one line, run by another tool, yields that line and
// records its versions: Check accepts it and MigrateLines has nothing to do.
func TestPrintedLineSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := emptySchema(t)
	sql, err := migrations.SQLLines(migrations.LineIdempotency)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sql, "payment_intents") || strings.Contains(sql, "ledger_") {
		t.Fatal("the idempotency line's SQL holds other lines' tables")
	}
	if _, err := p.Exec(ctx, sql); err != nil {
		t.Fatalf("printed SQL: %v", err)
	}
	if got, want := tables(t, p), append(slices.Clone(lineTables[migrations.LineIdempotency]), "payonce_migrations"); !slices.Equal(got, want) {
		t.Fatalf("tables %v, want %v", got, want)
	}
	if err := migrations.Check(ctx, p, migrations.LineIdempotency); err != nil {
		t.Fatal(err)
	}
	if applied, err := migrations.MigrateLines(ctx, p, migrations.LineIdempotency); err != nil || len(applied) != 0 {
		t.Fatalf("after the printed SQL, MigrateLines applied %v (%v)", applied, err)
	}
}

// The catalog sees a difference in a column, and a schema's name does not
// make one.
func TestCatalogComparesSchemas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := emptySchema(t), emptySchema(t)
	for _, p := range []*pgxpool.Pool{a, b} {
		if _, err := migrations.MigrateLines(ctx, p, migrations.LineIdempotency); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(catalog(t, a), catalog(t, b)) {
		t.Fatal("two schemas migrated alike differ")
	}
	if _, err := b.Exec(ctx, `ALTER TABLE idempotency_store ALTER COLUMN response_code SET DEFAULT 0`); err != nil {
		t.Fatal(err)
	}
	if slices.Equal(catalog(t, a), catalog(t, b)) {
		t.Fatal("the catalog misses a changed default")
	}
}

// announcementTriggers lists the replay cache's triggers on the current
// schema's idempotency_store.
func announcementTriggers(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	var out []string
	err := pool.QueryRow(context.Background(), `SELECT coalesce(array_agg(tgname::text ORDER BY tgname), '{}') FROM pg_trigger
		WHERE tgrelid = to_regclass('idempotency_store') AND NOT tgisinternal`).Scan(&out)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The replay cache's change announcements are the replaycache line's: a
// database that had them from the idempotency line (0016, 0018) loses them
// with that line's 0019 and gets them back, the same, with the
// replaycache line; applied out of order (0020 before 0019, as a tool
// running printed scripts might), they stay.
func TestAnnouncementsAreTheReplayCacheLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	want := []string{"idempotency_finished_changed", "idempotency_finished_deleted", "idempotency_truncated"}
	full := fullCatalog(t)
	if got := announcementTriggers(t, func() *pgxpool.Pool {
		p := emptySchema(t)
		if _, err := migrations.Migrate(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}()); !slices.Equal(got, want) {
		t.Fatalf("every line: triggers %v, want %v", got, want)
	}

	// A database of the day before: every version up to 0018.
	p := emptySchema(t)
	for v := 1; v <= 18; v++ {
		if err := migrations.ApplyVersion(ctx, p, v); err != nil {
			t.Fatal(err)
		}
	}
	if got := announcementTriggers(t, p); !slices.Equal(got, want) {
		t.Fatalf("at 0018: triggers %v, want %v", got, want)
	}
	if applied, err := migrations.MigrateLines(ctx, p, migrations.LineIdempotency); err != nil || !slices.Equal(applied, []int{19}) {
		t.Fatalf("idempotency line applied %v (%v), want [19]", applied, err)
	}
	if got := announcementTriggers(t, p); len(got) != 0 {
		t.Fatalf("after the idempotency line's 0019: triggers %v", got)
	}
	err := migrations.Check(ctx, p, migrations.LineReplayCache)
	var ne *migrations.NotMigratedError
	if !errors.As(err, &ne) || !slices.Equal(versionsOf(ne.Missing), []int{20}) ||
		!strings.Contains(err.Error(), "migrations.MigrateLines(ctx, pool, migrations.LineReplayCache)") {
		t.Fatalf("Check(replaycache) without it: %v", err)
	}
	if applied, err := migrations.MigrateLines(ctx, p, migrations.LineReplayCache); err != nil || !slices.Equal(applied, []int{20}) {
		t.Fatalf("replaycache line applied %v (%v), want [20]", applied, err)
	}
	if got := announcementTriggers(t, p); !slices.Equal(got, want) {
		t.Fatalf("after the replaycache line: triggers %v, want %v", got, want)
	}
	if applied, err := migrations.Migrate(ctx, p); err != nil {
		t.Fatal(err)
	} else if slices.Contains(applied, 19) || slices.Contains(applied, 20) {
		t.Fatalf("Migrate applied %v again", applied)
	}
	requireSameCatalog(t, catalog(t, p), full)

	// Out of order: 0020, then 0019.
	q := emptySchema(t)
	for v := 1; v <= 18; v++ {
		if err := migrations.ApplyVersion(ctx, q, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []int{20, 19} {
		if err := migrations.ApplyVersion(ctx, q, v); err != nil {
			t.Fatal(err)
		}
	}
	if got := announcementTriggers(t, q); !slices.Equal(got, want) {
		t.Fatalf("0020 then 0019: triggers %v, want %v", got, want)
	}
	if _, err := migrations.Migrate(ctx, q); err != nil {
		t.Fatal(err)
	}
	requireSameCatalog(t, catalog(t, q), full)
}
