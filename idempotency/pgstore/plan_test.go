package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest"
)

// A completion, and every other statement acting on one holder's record
// (heartbeat, release, fence, abandon, reclaim), reaches it through the
// primary key, never by
// reading the orphan-lock partial index (WHERE status = 'PROCESSING') and
// filtering it on the key: that index holds every live claim and, until
// vacuum, an entry of every completed one, so such a plan costs a
// completion time in proportion to the recent traffic. The table here is
// what a busy store looks like to the planner: many finished records, few
// live claims, fresh statistics. Both plans a prepared statement gets are
// checked: the custom plans of its first executions and the generic plan
// it may keep.
func TestHolderPlansUseThePrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolURL(t, pgtest.MigratedURL(t))
	if _, err := pool.Exec(ctx, `INSERT INTO idempotency_store
		(idempotency_key, user_id, fingerprint, status, response_code, response_raw, lock_version, completed_at, expires_at)
		SELECT 'k' || g, 'plan', repeat('a', 64), 'COMPLETED', 201, '\x7b7d', 1, now(), now() + interval '1 day'
		  FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, lock_version, locked_until, expires_at)
		VALUES ('live', 'plan', repeat('a', 64), 'PROCESSING', 7, now() + interval '30 seconds', now() + interval '1 day')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE idempotency_store`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	sql := pgstore.Statements()
	statements := []struct{ name, prepare, execute string }{
		{"complete", `PREPARE plan_complete(text, text, int8, text, int4, jsonb, bytea, float8) AS ` + sql["complete"],
			`EXECUTE plan_complete('live', 'plan', 7, 'COMPLETED', 201, NULL, '\x7b7d', 60)`},
		{"complete_group", `PREPARE plan_complete_group(text[], text[], int8[], text[], int4[], text[], bytea[], float8[]) AS ` + sql["complete_group"],
			`EXECUTE plan_complete_group('{live}', '{plan}', '{7}', '{COMPLETED}', '{201}', '{NULL}', '{"\\x7b7d"}', '{60}')`},
		// The other statements that act on one holder's record.
		{"heartbeat", `PREPARE plan_heartbeat(text, text, int8, float8) AS ` + sql["heartbeat"],
			`EXECUTE plan_heartbeat('live', 'plan', 7, 30)`},
		{"heartbeat_group", `PREPARE plan_heartbeat_group(text[], text[], int8[], float8[]) AS ` + sql["heartbeat_group"],
			`EXECUTE plan_heartbeat_group('{live}', '{plan}', '{7}', '{30}')`},
		{"release", `PREPARE plan_release(text, text, int8) AS ` + sql["release"],
			`EXECUTE plan_release('live', 'plan', 7)`},
		{"fence", `PREPARE plan_fence(text, text, int8) AS ` + sql["fence"],
			`EXECUTE plan_fence('live', 'plan', 7)`},
		{"abandon", `PREPARE plan_abandon(text, text, int8) AS ` + sql["abandon"],
			`EXECUTE plan_abandon('live', 'plan', 7)`},
		{"reclaim", `PREPARE plan_reclaim(text, text, int8, float8, text, int8) AS ` + sql["reclaim"],
			`EXECUTE plan_reclaim('live', 'plan', 7, 30, '', 0)`},
	}
	for _, st := range statements {
		if _, err := conn.Exec(ctx, st.prepare); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			if _, err := conn.Exec(ctx, `SET plan_cache_mode = `+mode); err != nil {
				t.Fatal(err)
			}
			rows, err := conn.Query(ctx, `EXPLAIN (COSTS OFF) `+st.execute)
			if err != nil {
				t.Fatalf("%s (%s): %v", st.name, mode, err)
			}
			var plan []string
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, line)
			}
			if err := rows.Err(); err != nil {
				t.Fatalf("%s (%s): %v", st.name, mode, err)
			}
			text := strings.Join(plan, "\n")
			if !strings.Contains(text, "pk_idempotency") || strings.Contains(text, "idx_idempotency_orphan_locks") {
				t.Errorf("%s (%s) does not reach the record through the primary key alone:\n%s", st.name, mode, text)
			}
		}
	}
}

// Every statement that may fire a row trigger prepares the trigger's WHEN
// condition again (PostgreSQL reads it back from its stored node tree per
// statement), before any row is tested. A completion is such a statement
// for the replay cache's UPDATE trigger, so that condition must stay a
// test of the OLD record's state: migration 0016's comparison of eight OLD
// columns with eight NEW ones cost every completion about 20 us of server
// CPU (BENCHMARKS.md, where a cycle's time goes), although it was false at
// its first test. The comparison belongs in the trigger's function, which
// runs only for finished, live records; TestChangeAnnouncements checks
// that what is announced did not change.
func TestTriggerConditionsStaySmall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolURL(t, pgtest.MigratedURL(t))
	rows, err := pool.Query(ctx, `SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger
		WHERE tgrelid = 'idempotency_store'::regclass AND NOT tgisinternal AND tgqual IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	defs := map[string]string{}
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		defs[name] = def
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if _, ok := defs["idempotency_finished_changed"]; !ok {
		t.Fatalf("no conditional UPDATE trigger idempotency_finished_changed among %v", defs)
	}
	for name, def := range defs {
		_, when, ok := strings.Cut(def, " WHEN ")
		if !ok {
			t.Fatalf("%s: no WHEN in %s", name, def)
		}
		when = strings.ToLower(when)
		if strings.Contains(when, "new.") || strings.Count(when, "old.") > 2 {
			t.Errorf("%s: its WHEN condition reads more than the old record's status and expiry: %s\n"+
				"every statement that may fire it pays for preparing it; move the rest into the function", name, def)
		}
	}
}
