// Command prunebench measures the pruner on a large idempotency_store
// (BENCHMARKS-prune.md):
//
//	go run ./lab/cmd/withpg -durable -var BENCH_DATABASE_URL -- go run ./lab/cmd/prunebench
//
// It fills a fresh schema with PRUNE_ROWS rows (default 5,000,000), of which
// PRUNE_EXPIRED_PCT percent (default 60) are expired COMPLETED or FAILED
// records (a backlog spread over the last day) and the rest live, expiring
// at the rate of PRUNE_KEYS_PER_DAY (default 10,000,000 a day: 116 a
// second), in expiry order as a real table grows. A thousandth of the rows
// are PROCESSING, which the pruner must leave. Then:
//
//	(a)  claim latency: pgstore's Do of new keys, 8 goroutines, no pruning;
//	(b)  the same while a Pruner with the defaults (1000 rows, 10ms pause)
//	     works through the backlog, on its own pool as another instance
//	     would; (b2) with an aggressive Pruner (5000 rows, no pause);
//	(c)  deletion rate of the default Pruner alone, and (c2) of the
//	     aggressive one until the backlog is drained, with batch latencies
//	     and WAL per row;
//	(d)  the VACUUM that the deletions leave to autovacuum;
//	(e)  steady state: claims for PRUNE_STEADY_SECONDS (default 130) while a
//	     Pruner runs on its default schedule (@every 1m) and deletes what
//	     expires meanwhile; claims that overlapped a batch are compared
//	     with the others of the same window.
//
// (a), (b) and (b2) run in PRUNE_ROUNDS (default 3) interleaved rounds, and
// the median round is reported: the backlog shrinks under them and other
// work on the machine comes and goes. Each claim window lasts PRUNE_SECONDS
// (default 10) and starts after a CHECKPOINT. The load average and the
// table's dead rows and vacuums are printed before every window.
package main

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest/localpg"
)

const (
	clients = 8
	schema  = "payonce_prunebench"
	scopes  = 50_000
)

var (
	meta = []byte(`{"header":{"Content-Type":["application/json"]}}`)
	body = []byte(`{"order_id":"ord_4f9c2a","status":"created","amount":"49.99","currency":"EUR"}`)
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "prunebench:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	base := os.Getenv("BENCH_DATABASE_URL")
	if base == "" {
		return fmt.Errorf("BENCH_DATABASE_URL is not set: run it under lab/cmd/withpg -durable -var BENCH_DATABASE_URL")
	}
	rows, pct, seconds := envInt("PRUNE_ROWS", 5_000_000), envInt("PRUNE_EXPIRED_PCT", 60), envInt("PRUNE_SECONDS", 10)
	rounds := envInt("PRUNE_ROUNDS", 3)
	perDay, steady := envInt("PRUNE_KEYS_PER_DAY", 10_000_000), envInt("PRUNE_STEADY_SECONDS", 130)
	window := time.Duration(seconds) * time.Second
	expired := rows * pct / 100

	dbURL, err := prepare(ctx, base)
	if err != nil {
		return err
	}
	claimPool, err := newPool(ctx, dbURL, clients)
	if err != nil {
		return err
	}
	defer claimPool.Close()
	prunePool, err := newPool(ctx, dbURL, 2)
	if err != nil {
		return err
	}
	defer prunePool.Close()

	var version string
	_ = claimPool.QueryRow(ctx, `SELECT version()`).Scan(&version)
	fmt.Printf("machine: %d cores, %s\n", runtime.NumCPU(), version)
	fmt.Printf("load average before the fill: %s\n", loadavg())

	t0 := time.Now()
	if err := fill(ctx, claimPool, rows, expired, perDay); err != nil {
		return err
	}
	var tableSize, indexSize string
	_ = claimPool.QueryRow(ctx, `SELECT pg_size_pretty(pg_table_size('idempotency_store')), pg_size_pretty(pg_indexes_size('idempotency_store'))`).Scan(&tableSize, &indexSize)
	fmt.Printf("filled %d rows (%d expired, the live ones expiring at %d a day) in %s: table %s, indexes %s\n\n",
		rows, expired, perDay, time.Since(t0).Round(time.Second), tableSize, indexSize)

	if err := explainPrune(ctx, claimPool); err != nil {
		return err
	}

	store, err := pgstore.New(claimPool, nil)
	if err != nil {
		return err
	}
	exec, err := pgstore.NewExecutor(store, &idempotency.Config{LockTimeout: 30 * time.Second, Retention: 24 * time.Hour})
	if err != nil {
		return err
	}
	fp, err := idempotency.NewFingerprint().Decimal("amount", "49.99").String("currency", "EUR").Sum()
	if err != nil {
		return err
	}
	// checkpoint starts each measured window without a checkpoint that
	// the previous one left, and says what else is going on: the load
	// average, and the table's dead rows and (auto)vacuums.
	checkpoint := func() error {
		_, err := claimPool.Exec(ctx, `CHECKPOINT`)
		var live, dead, vacuums, running int64
		_ = claimPool.QueryRow(ctx, `SELECT n_live_tup, n_dead_tup, autovacuum_count + vacuum_count,
				(SELECT count(*) FROM pg_stat_progress_vacuum WHERE relid = 'idempotency_store'::regclass)
			FROM pg_stat_user_tables WHERE relid = 'idempotency_store'::regclass`).Scan(&live, &dead, &vacuums, &running)
		fmt.Printf("  [load %s; table: %d live, %d dead rows, %d vacuums done, %d running]\n", loadavg(), live, dead, vacuums, running)
		return err
	}
	// walPerClaim measures the WAL that claims write.
	walPerClaim := func(f func() []claimRec) ([]claimRec, string) {
		var lsn0 string
		_ = claimPool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn0)
		recs := f()
		var wal float64
		_ = claimPool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)`, lsn0).Scan(&wal)
		if len(recs) == 0 {
			return recs, ""
		}
		return recs, fmt.Sprintf("  WAL %.1f kB/claim", wal/float64(len(recs))/1024)
	}
	claims(exec, fp, 2*time.Second) // warm-up, unmeasured

	// (a), (b), (b2): interleaved rounds, so that the table's state (the
	// backlog shrinks) and the machine's load weigh on all three alike.
	defaults := &idempotency.PrunerConfig{}
	aggressive := &idempotency.PrunerConfig{BatchSize: 5000, Pause: -1} // no pause
	phases := []struct {
		name string
		cfg  *idempotency.PrunerConfig
		runs []round
	}{
		{name: "(a)  claims, no pruning"},
		{name: "(b)  claims + default pruner (1000 rows, 10ms)", cfg: defaults},
		{name: "(b2) claims + aggressive pruner (5000 rows, 0ms)", cfg: aggressive},
	}
	for r := range rounds {
		for i := range phases {
			ph := &phases[i]
			if err := checkpoint(); err != nil {
				return err
			}
			var stop func()
			var ps *timedStore
			if ph.cfg != nil {
				if ps, err = newTimedStore(prunePool); err != nil {
					return err
				}
				if stop, err = startBacklogPruner(ps, ph.cfg); err != nil {
					return err
				}
			}
			recs, wal := walPerClaim(func() []claimRec { return claims(exec, fp, window) })
			rd := round{claims: summarize(recs), wal: wal}
			if stop != nil {
				stop()
				rd.pruner = ps.summary(window)
				rd.deleted = float64(ps.deleted.Load()) / window.Seconds()
			}
			ph.runs = append(ph.runs, rd)
			fmt.Printf("round %d %-50s %s%s\n", r+1, ph.name+":", rd.claims, wal)
			if rd.pruner != "" {
				fmt.Printf("        pruner meanwhile: %s\n", rd.pruner)
			}
		}
	}
	fmt.Printf("\nmedians of %d rounds (claims/s range over the rounds):\n", rounds)
	for _, ph := range phases {
		m, lo, hi := median(ph.runs)
		fmt.Printf("%-50s %s [%0.f .. %0.f]%s\n", ph.name+":", m.claims, lo, hi, m.wal)
		if m.pruner != "" {
			fmt.Printf("     pruner meanwhile (median deletion round): %s\n", medianPruner(ph.runs))
		}
	}
	fmt.Println()

	// (c) deletion rate alone: the default pruner for 3 windows, then the
	// aggressive one until the backlog is gone.
	if err := checkpoint(); err != nil {
		return err
	}
	for _, c := range []struct {
		name  string
		cfg   *idempotency.PrunerConfig
		limit time.Duration
	}{{"(c)  default pruner alone", defaults, 3 * window}, {"(c2) aggressive pruner alone, until drained", aggressive, 0}} {
		ps, err := newTimedStore(prunePool)
		if err != nil {
			return err
		}
		p, err := idempotency.NewPruner(ps, c.cfg)
		if err != nil {
			return err
		}
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if c.limit > 0 {
			pctx, cancel = context.WithTimeout(ctx, c.limit)
		}
		var lsn0, wal string
		_ = claimPool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn0)
		rep, err := p.RunOnce(pctx)
		cancel()
		if err != nil && pctx.Err() == nil {
			return err
		}
		var walBytes float64
		_ = claimPool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)`, lsn0).Scan(&walBytes)
		if rep.Deleted > 0 {
			wal = fmt.Sprintf("WAL %.0f bytes/row", walBytes/float64(rep.Deleted))
		}
		fmt.Printf("%s: %d rows in %d batches, %s: %.0f rows/s; %s; %s\n", c.name, rep.Deleted, rep.Batches,
			rep.Duration.Round(time.Millisecond), float64(rep.Deleted)/rep.Duration.Seconds(), ps.batchLatency(), wal)
	}
	var left int
	if err := claimPool.QueryRow(ctx, `SELECT count(*) FROM idempotency_store WHERE status <> 'PROCESSING' AND expires_at <= now()`).Scan(&left); err != nil {
		return err
	}
	fmt.Printf("expired rows left: %d (expiring meanwhile at %.0f/s)\n", left, float64(perDay)/86400)

	// (d) what autovacuum will have to do after such a backlog.
	t0 = time.Now()
	if _, err := claimPool.Exec(ctx, `VACUUM idempotency_store`); err != nil {
		return err
	}
	fmt.Printf("(d)  VACUUM after the deletions: %s\n", time.Since(t0).Round(time.Millisecond))

	// (e) steady state: the default Pruner on its default schedule.
	if err := checkpoint(); err != nil {
		return err
	}
	ps, err := newTimedStore(prunePool)
	if err != nil {
		return err
	}
	p, err := idempotency.NewPruner(ps, defaults)
	if err != nil {
		return err
	}
	p.Start()
	recs, wal := walPerClaim(func() []claimRec { return claims(exec, fp, time.Duration(steady)*time.Second) })
	if err := p.Stop(ctx); err != nil {
		return err
	}
	during, outside := ps.split(recs)
	fmt.Printf("(e)  steady state, %ds of claims, pruner @every 1m: %s\n", steady, ps.passes())
	fmt.Printf("     claims overlapping a batch (%6d): %s\n", len(during), latencies(during))
	fmt.Printf("     other claims           (%6d): %s\n", len(outside), latencies(outside))
	fmt.Printf("     all claims             (%6d): %s%s\n", len(recs), summarize(recs), wal)
	if err := checkpoint(); err != nil {
		return err
	}
	return nil
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

func newPool(ctx context.Context, u string, n int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = n
	return pgxpool.NewWithConfig(ctx, cfg)
}

// prepare creates a fresh, migrated schema and returns a URL selecting it.
func prepare(ctx context.Context, base string) (string, error) {
	return localpg.FreshSchema(ctx, base, schema)
}

// fill loads the rows with the table's indexes dropped, then rebuilds
// them exactly as the migrations define them: a bulk load, not a
// benchmark of inserts. Rows go in expiry order (as a table written over
// time holds them); keys are random, as clients' keys are. A thousandth of
// the rows are PROCESSING (orphans among the expired), which the pruner
// must skip.
func fill(ctx context.Context, pool *pgxpool.Pool, rows, expired, perDay int) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var pk, pkDef string
	if err := conn.QueryRow(ctx, `SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid = 'idempotency_store'::regclass AND contype = 'p'`).Scan(&pk, &pkDef); err != nil {
		return fmt.Errorf("read primary key: %w", err)
	}
	r, err := conn.Query(ctx, `SELECT indexname, indexdef FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename = 'idempotency_store' AND indexname <> $1`, pk)
	if err != nil {
		return err
	}
	type index struct{ name, def string }
	idx, err := pgx.CollectRows(r, func(row pgx.CollectableRow) (index, error) {
		var i index
		return i, row.Scan(&i.name, &i.def)
	})
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `ALTER TABLE idempotency_store DROP CONSTRAINT `+pk); err != nil {
		return err
	}
	for _, i := range idx {
		if _, err := conn.Exec(ctx, `DROP INDEX `+i.name); err != nil {
			return err
		}
	}
	// Expired rows expired evenly over the last day; live ones expire one
	// after the other at perDay a day from now on.
	const chunk = 500_000
	for lo := 1; lo <= rows; lo += chunk {
		hi := min(lo+chunk-1, rows)
		_, err := conn.Exec(ctx, `INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status,
				response_code, response_body, response_raw, lock_version, locked_until, created_at, completed_at, expires_at)
			SELECT 'usr_' || (g % $4) || '_createOrder_' || md5(g::text), 'usr_' || (g % $4),
			       md5(g::text || 'fp') || md5(g::text || 'fp2'),
			       st, CASE WHEN st = 'PROCESSING' THEN NULL ELSE 201 END,
			       CASE WHEN st = 'PROCESSING' THEN NULL ELSE $5::jsonb END,
			       CASE WHEN st = 'PROCESSING' THEN NULL ELSE $6::bytea END,
			       floor(random() * 1073741824)::int,
			       CASE WHEN st = 'PROCESSING' THEN exp - interval '1 day' + interval '30 seconds' END,
			       exp - interval '1 day', CASE WHEN st = 'PROCESSING' THEN NULL ELSE exp - interval '1 day' END, exp
			  FROM (SELECT g, CASE WHEN g <= $3::int THEN now() - make_interval(secs => ($3::int - g + 0.5) * 86400.0 / $3::int)
			                       ELSE now() + make_interval(secs => (g - $3::int) * 86400.0 / $7::int) END AS exp,
			               CASE WHEN g % 1000 = 7 THEN 'PROCESSING' WHEN g % 20 = 3 THEN 'FAILED' ELSE 'COMPLETED' END AS st
			          FROM generate_series($1::int, $2::int) g) s`,
			lo, hi, expired, scopes, string(meta), body, perDay)
		if err != nil {
			return fmt.Errorf("fill %d..%d: %w", lo, hi, err)
		}
		fmt.Fprintf(os.Stderr, "filled %d/%d\n", hi, rows)
	}
	if _, err := conn.Exec(ctx, `SET maintenance_work_mem = '1GB'`); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `ALTER TABLE idempotency_store ADD CONSTRAINT `+pk+` `+pkDef); err != nil {
		return err
	}
	for _, i := range idx {
		if _, err := conn.Exec(ctx, i.def); err != nil {
			return err
		}
	}
	_, err = conn.Exec(ctx, `VACUUM ANALYZE idempotency_store`)
	return err
}

// explainPrune shows how one default batch runs on this table, inside a
// transaction that is rolled back.
func explainPrune(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	sql := strings.ReplaceAll(pgstore.Statements()["prune"], "$1", "1000")
	r, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) `+sql)
	if err != nil {
		return err
	}
	lines, err := pgx.CollectRows(r, pgx.RowTo[string])
	if err != nil {
		return err
	}
	fmt.Println("one batch of 1000 (EXPLAIN ANALYZE, rolled back):")
	for _, l := range lines {
		fmt.Println("    " + l)
	}
	fmt.Println()
	return nil
}

// timedStore counts what its Prune deletes and when each batch ran.
type timedStore struct {
	*pgstore.Store
	deleted atomic.Int64
	mu      sync.Mutex
	batches []batch
}

type batch struct {
	start, end time.Time
	deleted    int
}

func newTimedStore(pool *pgxpool.Pool) (*timedStore, error) {
	s, err := pgstore.New(pool, nil)
	if err != nil {
		return nil, err
	}
	return &timedStore{Store: s}, nil
}

func (s *timedStore) Prune(ctx context.Context, limit int) (int, error) {
	t0 := time.Now()
	n, err := s.Store.Prune(ctx, limit)
	if err == nil {
		s.deleted.Add(int64(n))
		s.mu.Lock()
		s.batches = append(s.batches, batch{start: t0, end: time.Now(), deleted: n})
		s.mu.Unlock()
	}
	return n, err
}

func (s *timedStore) snapshot() []batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batches)
}

func (s *timedStore) batchLatency() string {
	b := s.snapshot()
	if len(b) == 0 {
		return "no batch"
	}
	d := make([]time.Duration, len(b))
	for i, x := range b {
		d[i] = x.end.Sub(x.start)
	}
	slices.Sort(d)
	return fmt.Sprintf("batch p50 %s p99 %s max %s", d[len(d)/2].Round(time.Microsecond),
		d[len(d)*99/100].Round(time.Microsecond), d[len(d)-1].Round(time.Microsecond))
}

func (s *timedStore) summary(d time.Duration) string {
	n := s.deleted.Load()
	return fmt.Sprintf("%d rows deleted, %.0f rows/s; %s", n, float64(n)/d.Seconds(), s.batchLatency())
}

// passes describes the passes of a scheduled pruner: batches less than a
// second apart belong to one pass.
func (s *timedStore) passes() string {
	b := s.snapshot()
	var out []string
	for i := 0; i < len(b); {
		j, n := i, b[i].deleted
		for j+1 < len(b) && b[j+1].start.Sub(b[j].end) < time.Second {
			j++
			n += b[j].deleted
		}
		out = append(out, fmt.Sprintf("%d rows in %d batches, %s", n, j-i+1, b[j].end.Sub(b[i].start).Round(time.Millisecond)))
		i = j + 1
	}
	if len(out) == 0 {
		return "no pass"
	}
	return fmt.Sprintf("%d passes (%s); %s", len(out), strings.Join(out, "; "), s.batchLatency())
}

// split parts claims into those that overlapped a batch and the others.
func (s *timedStore) split(recs []claimRec) (during, outside []claimRec) {
	b := s.snapshot()
	for _, r := range recs {
		end := r.start.Add(r.d)
		if slices.ContainsFunc(b, func(x batch) bool { return r.start.Before(x.end) && end.After(x.start) }) {
			during = append(during, r)
		} else {
			outside = append(outside, r)
		}
	}
	return during, outside
}

// startBacklogPruner runs passes back to back (a backlog that outlasts one
// pass) until stop is called.
func startBacklogPruner(s idempotency.Store, cfg *idempotency.PrunerConfig) (stop func(), err error) {
	p, err := idempotency.NewPruner(s, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if _, err := p.RunOnce(ctx); err != nil && ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "prunebench: pruner:", err)
				return
			}
		}
	}()
	return func() { cancel(); <-done }, nil
}

type claimRec struct {
	start time.Time
	d     time.Duration
}

// stats are the throughput and latency of a set of claims.
type stats struct {
	n                 int
	tps               float64
	p50, p99, max     time.Duration
	withoutThroughput bool
}

func (s stats) String() string {
	if s.n == 0 {
		return "no claims"
	}
	lat := fmt.Sprintf("p50 %8s  p99 %8s  max %8s", s.p50.Round(time.Microsecond), s.p99.Round(time.Microsecond), s.max.Round(time.Microsecond))
	if s.withoutThroughput {
		return lat
	}
	return fmt.Sprintf("%6.0f claims/s  %s", s.tps, lat)
}

// summarize gives throughput over the records' span and latency
// percentiles.
func summarize(recs []claimRec) stats {
	if len(recs) == 0 {
		return stats{}
	}
	d := make([]time.Duration, len(recs))
	first, last := recs[0].start, recs[0].start.Add(recs[0].d)
	for i, r := range recs {
		d[i] = r.d
		if r.start.Before(first) {
			first = r.start
		}
		if e := r.start.Add(r.d); e.After(last) {
			last = e
		}
	}
	slices.Sort(d)
	return stats{n: len(d), tps: float64(len(d)) / last.Sub(first).Seconds(),
		p50: d[len(d)/2], p99: d[len(d)*99/100], max: d[len(d)-1]}
}

// latencies is summarize for a subset of a window's claims, whose
// throughput means nothing.
func latencies(recs []claimRec) stats {
	s := summarize(recs)
	s.withoutThroughput = true
	return s
}

// round is one measured window of a phase.
type round struct {
	claims  stats
	wal     string
	pruner  string
	deleted float64 // rows/s
}

// median returns the round of median throughput, and the range.
func median(rs []round) (m round, lo, hi float64) {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b round) int { return cmp.Compare(a.claims.tps, b.claims.tps) })
	return s[len(s)/2], s[0].claims.tps, s[len(s)-1].claims.tps
}

// medianPruner returns the pruner summary of the round of median deletion
// rate.
func medianPruner(rs []round) string {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b round) int { return cmp.Compare(a.deleted, b.deleted) })
	return s[len(s)/2].pruner
}

// claims runs Do of new keys (claim + complete, as in make bench) on
// clients goroutines for d.
func claims(exec *pgstore.Executor, fp idempotency.Fingerprint, d time.Duration) []claimRec {
	ctx := context.Background()
	recs := make([][]claimRec, clients)
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	var failed atomic.Value
	resp := idempotency.Response{Code: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: body}
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(c)))
			for {
				t0 := time.Now()
				if t0.After(deadline) {
					return
				}
				scope := "usr_" + strconv.Itoa(rng.IntN(scopes))
				key := scope + "_createOrder_" + strconv.FormatUint(rng.Uint64(), 36) + strconv.FormatUint(rng.Uint64(), 36)
				_, err := exec.Do(ctx, idempotency.Request{Scope: scope, Key: key, Fingerprint: fp},
					func(context.Context) (idempotency.Response, error) { return resp, nil })
				if err != nil {
					failed.Store(err)
					return
				}
				recs[c] = append(recs[c], claimRec{start: t0, d: time.Since(t0)})
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		fmt.Fprintln(os.Stderr, "prunebench: claim failed:", err)
		os.Exit(1)
	}
	var all []claimRec
	for _, r := range recs {
		all = append(all, r...)
	}
	return all
}
