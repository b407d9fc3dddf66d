package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest"
)

// A tombstone holds nothing of the response: the prune is also how data
// leaves the store, so no column of it survives, whatever Get shows.
// What it keeps refuses the key until expires_at plus the horizon the
// claim recorded.
func TestTombstoneHoldsNoResponse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	exec, err := idempotency.New(b.store, &idempotency.Config{Retention: time.Hour,
		Expired: idempotency.ExpiredRefused, RefusalHorizon: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	key, err := idempotency.ComposeKey("usr_T1", "createOrder", "3f2b8c9e-5d1a-4e7b-9c0d-2a6f8e1b4c7d")
	if err != nil {
		t.Fatal(err)
	}
	r := idempotency.Request{Scope: "usr_T1", Key: key, Fingerprint: mustFP(t, "10")}
	resp := idempotency.Response{Code: 201, Header: map[string][]string{"X-Order": {"o_1"}}, Body: []byte(`{"card":"4242"}`)}
	if _, err := exec.Do(ctx, r, func(context.Context) (idempotency.Response, error) { return resp, nil }); err != nil {
		t.Fatal(err)
	}
	advance(b.pool)(t, 2*time.Hour)
	if n, err := b.store.Prune(ctx, 10); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1", n, err)
	}
	var (
		code            *int32
		meta, raw       []byte
		fp              string
		horizon         time.Duration
		gap             time.Duration
		stillInLiveScan bool
	)
	err = b.pool.QueryRow(ctx, `SELECT response_code, response_body, response_raw, fingerprint,
	        extract(epoch FROM refuse_for)::float8 * 1e9, extract(epoch FROM refuse_until - expires_at)::float8 * 1e9,
	        refuse_until IS NULL
	   FROM idempotency_store WHERE idempotency_key = $1 AND user_id = $2`, key, r.Scope).
		Scan(&code, &meta, &raw, &fp, &horizon, &gap, &stillInLiveScan)
	if err != nil {
		t.Fatal(err)
	}
	if code != nil || meta != nil || raw != nil {
		t.Fatalf("the tombstone keeps the response: code %v, metadata %q, body %q", code, meta, raw)
	}
	if kept := idempotency.Fingerprint(fp).Equal(r.Fingerprint); !kept || horizon != 48*time.Hour || gap != 48*time.Hour || stillInLiveScan {
		t.Fatalf("tombstone: fingerprint kept %v, refuse_for %s, refuse_until - expires_at %s, refuse_until NULL %v",
			kept, horizon, gap, stillInLiveScan)
	}
}

// Each prune batch finds its rows through the two partial indexes, never by
// reading the table: expired records through idx_idempotency_expires_live,
// which tombstones leave, and tombstones past their horizon through
// idx_idempotency_tombstones. A predicate the planner cannot match to an
// index would show here as a scan of the table.
func TestPruneUsesPartialIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	seedTombstones(t, b, 500)
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `ANALYZE idempotency_store`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN (COSTS OFF) `+strings.ReplaceAll(statement(t, "prune"), "$1", "1000"))
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	for _, want := range []string{"idx_idempotency_expires_live", "idx_idempotency_tombstones"} {
		if !strings.Contains(plan, want) {
			t.Errorf("the prune does not use %s:\n%s", want, plan)
		}
	}
	if strings.Contains(plan, "Seq Scan") {
		t.Errorf("the prune reads the table:\n%s", plan)
	}
}

// seedTombstones inserts n rows of each kind a prune decides on, keyed
// "<kind>_<i>":
//
//	refused     expired an hour ago, refused for 30 days: becomes a tombstone
//	stale       expired 3 days ago, refused for 2: deleted at once
//	isnew       expired an hour ago, no horizon (ExpiredIsNew): deleted
//	tomb_due    a tombstone whose horizon ended an hour ago: deleted
//	tomb_live   a tombstone refusing for another day: kept
//	live        refused for 30 days but not expired: kept
//	processing  PROCESSING with a horizon, past its expiry: kept
func seedTombstones(t *testing.T, b bundle, n int) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `
INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, response_code, response_raw,
                               lock_version, locked_until, created_at, completed_at, expires_at, refuse_for, refuse_until)
SELECT k.kind || '_' || g, 'usr_' || (g % 31), md5(g::text) || md5(g::text),
       CASE WHEN k.kind = 'processing' THEN 'PROCESSING' WHEN g % 3 = 0 THEN 'FAILED' ELSE 'COMPLETED' END,
       CASE WHEN k.kind IN ('processing', 'tomb_due', 'tomb_live') THEN NULL ELSE 201 END,
       CASE WHEN k.kind IN ('processing', 'tomb_due', 'tomb_live') THEN NULL ELSE '\x7b7d'::bytea END,
       7, CASE WHEN k.kind = 'processing' THEN now() - interval '1 day' END,
       now() - interval '40 days', now() - interval '40 days', now() + k.expires, k.refuse_for,
       CASE WHEN k.kind IN ('tomb_due', 'tomb_live') THEN now() + k.expires + k.refuse_for END
  FROM (VALUES ('refused',    interval '-1 hour',  interval '30 days'),
               ('stale',      interval '-3 days',  interval '2 days'),
               ('isnew',      interval '-1 hour',  NULL::interval),
               ('tomb_due',   interval '-25 hours', interval '1 day'),
               ('tomb_live',  interval '-1 hour',  interval '1 day'),
               ('live',       interval '1 hour',   interval '30 days'),
               ('processing', interval '-1 hour',  interval '30 days')) AS k(kind, expires, refuse_for),
       generate_series(1, $1::int) g`, n)
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
}

// Several pruners on separate pools, as on separate instances, work through
// every kind of row at once: each row due is taken exactly once (reduced
// to a tombstone, or deleted), and nothing else is touched.
func TestPrunersMakeTombstonesConcurrently(t *testing.T) {
	t.Parallel()
	const pruners, n = 4, 3_000
	b := setup(t)
	seedTombstones(t, b, n)
	if _, err := b.pool.Exec(context.Background(), `ANALYZE idempotency_store`); err != nil {
		t.Fatal(err)
	}
	// A bound, not a wait: a pass that takes tombstones again and again
	// never drains, and must fail rather than hang.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reports := make([]idempotency.PruneReport, pruners)
	errs := make([]error, pruners)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range pruners {
		p := newPgPruner(t, pgtest.PoolURL(t, b.url), nil, &idempotency.PrunerConfig{BatchSize: 250, Pause: -1})
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			reports[i], errs[i] = p.RunOnce(ctx)
		}()
	}
	close(start)
	wg.Wait()
	total := 0
	for i, r := range reports {
		if errs[i] != nil {
			t.Fatalf("pruner %d: %v", i, errs[i])
		}
		total += r.Deleted
	}
	// refused (reduced), stale, isnew and tomb_due (deleted).
	if total != 4*n {
		t.Fatalf("the pruners took %d rows in all, want %d: %+v", total, 4*n, reports)
	}
	for kind, want := range map[string]int{"refused": n, "stale": 0, "isnew": 0, "tomb_due": 0, "tomb_live": n, "live": n, "processing": n} {
		if got := countWhere(t, b, `idempotency_key LIKE '`+kind+`\_%'`); got != want {
			t.Errorf("%s: %d rows left, want %d", kind, got, want)
		}
	}
	if got := countWhere(t, b, `idempotency_key LIKE 'refused\_%' AND refuse_until = expires_at + refuse_for
			AND response_code IS NULL AND response_raw IS NULL AND lock_version = 7`); got != n {
		t.Errorf("%d of %d expired refused records are tombstones", got, n)
	}
	if got := countWhere(t, b, `idempotency_key LIKE 'live\_%' AND response_raw IS NOT NULL AND refuse_until IS NULL`); got != n {
		t.Errorf("%d of %d live records kept whole", got, n)
	}
	if got := countWhere(t, b, `idempotency_key LIKE 'processing\_%' AND status = 'PROCESSING' AND refuse_until IS NULL`); got != n {
		t.Errorf("%d of %d PROCESSING records untouched", got, n)
	}
	if r, err := b.store.Prune(ctx, 1000); err != nil || r != 0 {
		t.Fatalf("a prune after the pass took %d (%v), want 0", r, err)
	}
}

func statement(t *testing.T, name string) string {
	t.Helper()
	sql, ok := pgstore.Statements()[name]
	if !ok {
		t.Fatalf("no statement %q", name)
	}
	return sql
}

// DoTx claims with the executor's horizon too: the record it writes is
// kept as a tombstone for exactly that long, and refused through DoTx
// after the prune.
func TestDoTxRecordsRefusalHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	exec, err := pgstore.NewExecutor(b.store, &idempotency.Config{Retention: time.Hour,
		Expired: idempotency.ExpiredRefused, RefusalHorizon: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	key, err := idempotency.ComposeKey("usr_T2", "createOrder", "8d4e1f2a-6b3c-4a5d-9e7f-0c1b2a3d4e5f")
	if err != nil {
		t.Fatal(err)
	}
	r := idempotency.Request{Scope: "usr_T2", Key: key, Fingerprint: mustFP(t, "10")}
	runs := 0
	action := func(context.Context, pgx.Tx) (idempotency.Response, error) {
		runs++
		return idempotency.Response{Code: 201}, nil
	}
	if _, err := exec.DoTx(ctx, r, action); err != nil {
		t.Fatal(err)
	}
	var horizon time.Duration
	if err := b.pool.QueryRow(ctx, `SELECT extract(epoch FROM refuse_for)::float8 * 1e9 FROM idempotency_store
		 WHERE idempotency_key = $1 AND user_id = $2`, key, r.Scope).Scan(&horizon); err != nil || horizon != 2*time.Hour {
		t.Fatalf("refuse_for = %s, %v; want 2h", horizon, err)
	}
	advance(b.pool)(t, 2*time.Hour)
	if n, err := b.store.Prune(ctx, 10); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1", n, err)
	}
	if _, err := exec.DoTx(ctx, r, action); !errors.Is(err, idempotency.ErrExpired) || runs != 1 {
		t.Fatalf("after the prune: %v, %d run(s); want ErrExpired and 1 run", err, runs)
	}
}
