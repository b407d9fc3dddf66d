package pgstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/pgtest"
)

// seedPrune inserts n rows of one kind: "expired" (COMPLETED and FAILED,
// past their expiry), "processing" (PROCESSING past both its lease and its
// expiry: an orphan, which only a reclaim may resolve) or "live"
// (COMPLETED, expiring tomorrow). Keys are "<kind>_<i>".
func seedPrune(t *testing.T, b bundle, kind string, n int) {
	t.Helper()
	sql := map[string]string{
		"expired": `INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, response_code,
				response_raw, completed_at, created_at, expires_at)
			SELECT 'expired_' || g, 'usr_' || (g % 97), md5(g::text) || md5(g::text),
			       CASE WHEN g % 3 = 0 THEN 'FAILED' ELSE 'COMPLETED' END, 201, '\x7b7d'::bytea,
			       now() - interval '2 days', now() - interval '2 days', now() - make_interval(secs => g)
			  FROM generate_series(1, $1::int) g`,
		"processing": `INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, lock_version,
				locked_until, created_at, expires_at)
			SELECT 'processing_' || g, 'usr_' || (g % 97), md5(g::text) || md5(g::text), 'PROCESSING', 1,
			       now() - interval '1 day', now() - interval '2 days', now() - make_interval(secs => g)
			  FROM generate_series(1, $1::int) g`,
		"live": `INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, response_code,
				response_raw, completed_at, expires_at)
			SELECT 'live_' || g, 'usr_' || (g % 97), md5(g::text) || md5(g::text), 'COMPLETED', 201, '\x7b7d'::bytea,
			       now(), now() + interval '1 day'
			  FROM generate_series(1, $1::int) g`,
	}[kind]
	if _, err := b.pool.Exec(context.Background(), sql, n); err != nil {
		t.Fatalf("seed %s: %v", kind, err)
	}
}

func countWhere(t *testing.T, b bundle, where string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_store WHERE `+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Several pruners on separate pools (as on separate instances) prune one
// table at once: every expired row is deleted exactly once in total, and
// no PROCESSING or live row is touched.
func TestPrunersRunConcurrently(t *testing.T) {
	t.Parallel()
	const pruners, expired, processing, live = 4, 20_000, 300, 1_000
	b := setup(t)
	seedPrune(t, b, "expired", expired)
	seedPrune(t, b, "processing", processing)
	seedPrune(t, b, "live", live)
	if _, err := b.pool.Exec(context.Background(), `ANALYZE idempotency_store`); err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	reports := make([]idempotency.PruneReport, pruners)
	errs := make([]error, pruners)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range pruners {
		p := newPgPruner(t, pgtest.PoolURL(t, b.url), mp, &idempotency.PrunerConfig{BatchSize: 250, Pause: time.Millisecond})
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			reports[i], errs[i] = p.RunOnce(context.Background())
		}()
	}
	close(start)
	wg.Wait()

	total, busy := 0, 0
	for i, r := range reports {
		if errs[i] != nil {
			t.Fatalf("pruner %d: %v", i, errs[i])
		}
		if !r.Drained {
			t.Errorf("pruner %d did not drain: %+v", i, r)
		}
		if r.Deleted > 0 {
			busy++
		}
		total += r.Deleted
	}
	t.Logf("%d of %d pruners deleted rows: %+v", busy, pruners, reports)
	if total != expired {
		t.Fatalf("the pruners report %d deletions in total, want exactly %d", total, expired)
	}
	if n := countWhere(t, b, `status <> 'PROCESSING' AND expires_at <= now()`); n != 0 {
		t.Fatalf("%d expired rows left", n)
	}
	if n := countWhere(t, b, `idempotency_key LIKE 'processing\_%' AND status = 'PROCESSING'`); n != processing {
		t.Fatalf("%d PROCESSING rows left, want all %d", n, processing)
	}
	if n := countWhere(t, b, `idempotency_key LIKE 'live\_%'`); n != live {
		t.Fatalf("%d live rows left, want all %d", n, live)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var pruned int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == idempotency.MetricPrunedRecords {
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					pruned += p.Value
				}
			}
		}
	}
	if pruned != expired {
		t.Fatalf("%s = %d, want %d", idempotency.MetricPrunedRecords, pruned, expired)
	}
}

// A pruner never waits for a row another transaction holds (a claim
// renewing that expired key, another pruner's batch): it skips it, and a
// later pass deletes it once it is free.
func TestPrunerSkipsLockedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	seedPrune(t, b, "expired", 50)
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM idempotency_store WHERE idempotency_key IN ('expired_1', 'expired_2') FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	p := newPgPruner(t, b.pool, nil, &idempotency.PrunerConfig{BatchSize: 20})
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rep, err := p.RunOnce(pctx)
	if err != nil || rep.Deleted != 48 || !rep.Drained {
		t.Fatalf("pass beside a held lock: %+v %v, want 48 deleted without waiting", rep, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if rep, err := p.RunOnce(pctx); err != nil || rep.Deleted != 2 {
		t.Fatalf("pass after the lock was released: %+v %v", rep, err)
	}
}

func newPgPruner(t *testing.T, pool *pgxpool.Pool, mp metric.MeterProvider, cfg *idempotency.PrunerConfig) *idempotency.Pruner {
	t.Helper()
	c := *cfg
	c.MeterProvider = mp
	p, err := idempotency.NewPruner(mustStore(t, pool, nil), &c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
