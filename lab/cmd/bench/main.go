// Command bench measures payonce against the physical limit of the same
// PostgreSQL in the same run (make bench). Every figure is the median of
// interleaved rounds, with min and max.
//
//	(a) raw claim+complete: pgbench running pgstore's own claim and complete
//	    statements as two autocommit statements (8 clients, prepared);
//	(b) sdk claim+complete: pgstore's Do cycle, 8 goroutines, against (a);
//	(c) replay: Do of an already completed key, with the executor's replay
//	    cache and without it, against pgbench's primary-key SELECT of one
//	    row of the same table;
//	(d) one_tx: DoTx (claim, the action's insert, completion, one commit),
//	    8 goroutines, against pgbench running the same transaction
//	    (BEGIN, pgstore's claim, the insert, pgstore's complete, COMMIT),
//	    and against the two-phase path (Do whose action inserts in its own
//	    transaction);
//	(p) peers: replicas of other designs (peers.go) on the same table
//	    shape, claim+complete and replay;
//	(e) ledger: postings per second with every entry on the same two
//	    accounts against entries on distinct accounts (ledgerbench.Run);
//	(k) recovery: holders SIGKILLed mid-action and restarted at once under
//	    their instance names; time from the kill until a retry finished
//	    each key, beside the lease in force (recovery.go);
//	(r) redis, (y) dynamo: the Redis and DynamoDB stores' claim+complete
//	    and replay against the raw limit of the same engine (stores.go),
//	    on servers the bench starts and stops.
//
// It reads BENCH_DATABASE_URL (make bench starts a durable throwaway
// cluster), BENCH_SECONDS (default 5) and BENCH_ROUNDS (default 3).
// BENCH_ONLY=stores runs (r) and (y) alone, without PostgreSQL;
// BENCH_ONLY=claim_complete runs (a), (b), the peers' cycles and (h);
// BENCH_ONLY=replay runs (c) and the peers' replays;
// BENCH_STORES=redis or dynamo runs only that store of the two, and
// BENCH_STORES=cluster only the Redis Cluster lines.
// BENCH_ONLY=recovery runs (k) alone.
// BENCH_ONLY=statements runs (s) alone: the cycle's SQL from pgbench,
// pgstore's with and without the table's triggers and the upsert peer's
// (statements.go).
// BENCH_CPUPROFILE=file writes the bench process's CPU profile there (go
// tool pprof file); the paths measured in turn carry the label path=<the
// line's name> (go tool pprof -tags file lists them; -tagfocus picks one).
package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/ledger/ledgerbench"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/pgtest/localpg"
)

const (
	clients = 8
	// manyCallers is the (h) paths' number of goroutines on the pool of
	// clients connections.
	manyCallers = 64
	scope       = "bench"
	replayKeys  = 100_000
)

var body = []byte(`{"order_id":"ord_4f9c2a","status":"created","amount":"49.99","currency":"EUR"}`)

func main() {
	if path := os.Getenv("BENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: BENCH_CPUPROFILE:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if runRecoveryChild() {
		return
	}
	if err := run(); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type sample struct {
	tps      float64
	p50, p99 time.Duration
	// client and server: CPU per operation in this process and in the
	// server's processes (zero when not measured; see cpu.go).
	client, server time.Duration
	// wal and fpi: WAL bytes and full-page images per operation, from
	// pg_stat_wal (zero when not measured; see cpu.go).
	wal, fpi float64
}

type series struct {
	name    string
	samples []sample
}

func (s *series) median() sample {
	tps := make([]float64, len(s.samples))
	for i, x := range s.samples {
		tps[i] = x.tps
	}
	slices.Sort(tps)
	m := tps[len(tps)/2]
	for _, x := range s.samples {
		if x.tps == m {
			return x
		}
	}
	return s.samples[0]
}

func (s *series) String() string {
	m := s.median()
	lo, hi := s.samples[0].tps, s.samples[0].tps
	for _, x := range s.samples {
		lo, hi = min(lo, x.tps), max(hi, x.tps)
	}
	return fmt.Sprintf("%-34s %9.0f/s  [%7.0f .. %7.0f]  p50 %7s  p99 %7s", s.name, m.tps, lo, hi,
		m.p50.Round(time.Microsecond), m.p99.Round(time.Microsecond))
}

func run() error {
	ctx := context.Background()
	seconds, rounds := envInt("BENCH_SECONDS", 5), envInt("BENCH_ROUNDS", 3)
	d := time.Duration(seconds) * time.Second
	// The paths compared with one another at 8 callers (pgbench's limits
	// among them) run in turn, in slices of a second (measureInterleaved).
	slices := seconds
	if os.Getenv("BENCH_ONLY") == "stores" {
		fmt.Printf("machine: %d cores (GOMAXPROCS %d)\n", runtime.NumCPU(), runtime.GOMAXPROCS(0))
		fmt.Printf("%d rounds of %s per path, %d clients, interleaved\n", rounds, d, clients)
		return benchStores(ctx, d, rounds)
	}
	base := os.Getenv("BENCH_DATABASE_URL")
	if base == "" {
		return fmt.Errorf("BENCH_DATABASE_URL is not set: run `make bench`, which starts a throwaway PostgreSQL")
	}
	bin, err := localpg.BinDir()
	if err != nil {
		return err
	}

	dbURL, err := prepare(ctx, base)
	if err != nil {
		return err
	}
	if os.Getenv("BENCH_ONLY") == "recovery" {
		return benchRecovery(ctx, dbURL, rounds)
	}
	pool, err := newPool(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	watchServer(ctx, pool)
	watchWAL(pool)
	store, err := pgstore.New(pool, nil)
	if err != nil {
		return err
	}
	exec, err := pgstore.NewExecutor(store, &idempotency.Config{LockTimeout: 30 * time.Second, Retention: 24 * time.Hour})
	if err != nil {
		return err
	}
	fp, err := benchFingerprint()
	if err != nil {
		return err
	}
	if os.Getenv("BENCH_ONLY") == "statements" {
		tmp, err := os.MkdirTemp("", "payonce-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		fmt.Printf("%d rounds of %s per path, pgbench with %d clients, in turn, in slices of 1s\n", rounds, d, clients)
		return benchStatements(ctx, base, pgbench{bin: filepath.Join(bin, "pgbench"), dir: tmp, fp: string(fp)}, fp, d, slices, rounds)
	}
	if err := seedReplays(ctx, pool, fp); err != nil {
		return err
	}
	if err := preparePeers(ctx, pool); err != nil {
		return err
	}
	// The claim+complete paths that are compared with one another each
	// write to a table of their own, seeded as the replays' table is:
	// tables that all start at the same size and grow only by their own
	// path's writes. Shared, the table of payonce's paths grew by those of
	// five paths (pgbench's, both Do stores', at 8 and 64 callers) while
	// each peer's grew by its own two, and paid for it in larger indexes
	// and more frequent, longer autovacuums during its measurements.
	cycleT, err := newCycleSchema(ctx, base, "payonce_bench_cycle", fp, true)
	if err != nil {
		return err
	}
	defer cycleT.pool.Close()
	cyclePlainT, err := newCycleSchema(ctx, base, "payonce_bench_cycle_nogroup", fp, false)
	if err != nil {
		return err
	}
	defer cyclePlainT.pool.Close()
	manyT, err := newCycleSchema(ctx, base, "payonce_bench_many", fp, true)
	if err != nil {
		return err
	}
	defer manyT.pool.Close()
	manyPlainT, err := newCycleSchema(ctx, base, "payonce_bench_many_nogroup", fp, false)
	if err != nil {
		return err
	}
	defer manyPlainT.pool.Close()
	rawT, err := newCycleSchema(ctx, base, "payonce_bench_raw", fp, false)
	if err != nil {
		return err
	}
	defer rawT.pool.Close()
	noGroup := &pgstore.Config{NoGroupCommit: true}
	cycleExec, err := newExecutor(cycleT.pool, nil)
	if err != nil {
		return err
	}
	plainExec, err := newExecutor(cyclePlainT.pool, noGroup)
	if err != nil {
		return err
	}
	manyExec, err := newExecutor(manyT.pool, nil)
	if err != nil {
		return err
	}
	manyPlainExec, err := newExecutor(manyPlainT.pool, noGroup)
	if err != nil {
		return err
	}
	cached, err := pgstore.NewExecutor(store, &idempotency.Config{LockTimeout: 30 * time.Second, Retention: 24 * time.Hour,
		// MaxAge above the run: the cache is warmed once, and the store's
		// change reports (none come) keep its entries exact meanwhile.
		ReplayCache: &idempotency.ReplayCache{Size: 2 * replayKeys, MaxAge: 24 * time.Hour}})
	if err != nil {
		return err
	}
	defer cached.Close()
	tmp, err := os.MkdirTemp("", "payonce-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cycle, sel, oneTx, err := writeScripts(tmp)
	if err != nil {
		return err
	}
	pgb := pgbench{bin: filepath.Join(bin, "pgbench"), url: libpqURL(dbURL), dir: tmp, fp: string(fp)}
	pgbRaw := pgb
	pgbRaw.url = libpqURL(rawT.url)

	var version, settings string
	_ = pool.QueryRow(ctx, `SELECT version()`).Scan(&version)
	_ = pool.QueryRow(ctx, `SELECT string_agg(name || '=' || setting, ' ') FROM pg_settings
		WHERE name IN ('fsync','synchronous_commit','shared_buffers','wal_level','max_connections')`).Scan(&settings)
	fmt.Printf("machine: %d cores (GOMAXPROCS %d), %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), version)
	fmt.Printf("server settings: %s\n", settings)
	fmt.Printf("%d rounds of %s per path, %d clients; the paths at %d callers (pgbench's among them) in turn, in slices of %s\n\n", rounds, d, clients, clients, d/time.Duration(slices))

	// Each measured run starts right after a checkpoint, so that none of
	// them pays for a checkpoint the previous one left (full-page writes,
	// fsync storms): without it, figures on this machine swing by 2-3x.
	checkpoint := checkpointer(ctx, pool)
	rawCycle := &series{name: "(a) raw claim+complete (pgbench)"}
	sdkCycle := &series{name: "(b) sdk claim+complete (Do)"}
	sdkCyclePlain := &series{name: "(b) sdk claim+complete, NoGroupCommit"}
	rawRead := &series{name: "(c) raw primary-key SELECT (pgbench)"}
	pgxRead := &series{name: "(c) plain pgx SELECT (Go ceiling)"}
	sdkReplay := &series{name: "(c) sdk replay, replay cache (Do)"}
	sdkReplayUncached := &series{name: "(c) sdk replay, no cache (Do)"}
	rawOneTx := &series{name: "(d) raw one transaction (pgbench)"}
	sdkOneTx := &series{name: "(d) sdk one transaction (DoTx)"}
	sdkTwoPhase := &series{name: "(d) sdk two-phase (Do + own tx)"}
	peerList := peers()
	peerCycle := make([]*series, len(peerList))
	peerReplay := make([]*series, len(peerList))
	for i, p := range peerList {
		peerCycle[i] = &series{name: "(p) claim+complete: " + p.name}
		peerReplay[i] = &series{name: "(p) replay: " + p.name}
	}
	// (h): the same cycles from many more callers than the pool has
	// connections, as a busy service makes them.
	manyCycle := &series{name: fmt.Sprintf("(h) sdk claim+complete, %d callers", manyCallers)}
	manyCyclePlain := &series{name: fmt.Sprintf("(h) sdk, NoGroupCommit, %d callers", manyCallers)}
	manyPeer := make([]*series, len(peerList))
	for i, p := range peerList {
		manyPeer[i] = &series{name: fmt.Sprintf("(h) %s, %d callers", p.name, manyCallers)}
	}
	cycles := func(r int) error {
		// The paths at 8 callers, compared with one another and with
		// pgbench's, in turn.
		ws := []worker{newKeyWorker(cycleExec, fp, fmt.Sprintf("c%d", r)), newKeyWorker(plainExec, fp, fmt.Sprintf("n%d", r))}
		for _, p := range peerList {
			ws = append(ws, p.cycleWorker(cycleT.pool, fp, fmt.Sprintf("q%d", r)))
		}
		ts := append([]timed{{rawCycle, pgbRaw.path(ctx, cycle)}}, goTimed(append([]*series{sdkCycle, sdkCyclePlain}, peerCycle...), ws)...)
		if err := measureInterleaved(d, slices, checkpoint, ts...); err != nil {
			return err
		}
		checkpoint()
		manyCycle.samples = append(manyCycle.samples, measureN(d, manyCallers, newKeyWorker(manyExec, fp, fmt.Sprintf("hc%d", r))))
		checkpoint()
		manyCyclePlain.samples = append(manyCyclePlain.samples, measureN(d, manyCallers, newKeyWorker(manyPlainExec, fp, fmt.Sprintf("hn%d", r))))
		for i, p := range peerList {
			checkpoint()
			manyPeer[i].samples = append(manyPeer[i].samples, measureN(d, manyCallers, p.cycleWorker(manyT.pool, fp, fmt.Sprintf("hq%d", r))))
		}
		return nil
	}
	// replays measures (c) and the peers' replays, one round.
	replays := func() error {
		ws := []worker{selectWorker(pool), replayWorker(cached, fp), replayWorker(exec, fp)}
		for _, p := range peerList {
			ws = append(ws, p.replayWorker(pool, fp))
		}
		ts := append([]timed{{rawRead, pgb.path(ctx, sel)}}, goTimed(append([]*series{pgxRead, sdkReplay, sdkReplayUncached}, peerReplay...), ws)...)
		return measureInterleaved(d, slices, nil, ts...)
	}
	onlyCycles := os.Getenv("BENCH_ONLY") == "claim_complete"
	onlyReplays := os.Getenv("BENCH_ONLY") == "replay"

	// Warm up caches and prepared statements, unmeasured.
	if _, err := pgb.exec(ctx, cycle, 2*time.Second); err != nil {
		return err
	}
	_ = measure(2*time.Second, newKeyWorker(exec, fp, "w"))
	// The replay cache fills from replays the store answered: one pass
	// over every replay key, unmeasured.
	if err := warmCache(cached, fp); err != nil {
		return err
	}

	for r := 0; r < rounds; r++ {
		fmt.Fprintf(os.Stderr, "round %d/%d\n", r+1, rounds)
		if onlyReplays {
			if err := replays(); err != nil {
				return err
			}
			continue
		}
		if err := cycles(r); err != nil {
			return err
		}
		if onlyCycles {
			continue
		}
		if err := replays(); err != nil {
			return err
		}
		err := measureInterleaved(d, slices, checkpoint, timed{rawOneTx, pgb.path(ctx, oneTx)},
			timed{sdkOneTx, goPath(oneTxWorker(exec, fp, fmt.Sprintf("t%d", r)))},
			timed{sdkTwoPhase, goPath(twoPhaseWorker(exec, pool, fp, fmt.Sprintf("p%d", r)))})
		if err != nil {
			return err
		}
	}

	// Every claim, pgbench's included, must have been completed: a
	// completion that matched no row would make the raw cycle cheaper than
	// the real one.
	for _, t := range []cycleSchema{{pool: pool, peers: true}, cycleT, cyclePlainT, manyT, manyPlainT, rawT} {
		open, err := openClaims(ctx, t.pool, "idempotency_store")
		if err != nil {
			return err
		}
		if open != 0 {
			return fmt.Errorf("%d claims were never completed: the benchmark's statements are wrong", open)
		}
		if !t.peers {
			continue
		}
		for _, p := range peerList {
			if n, err := p.open(ctx, t.pool); err != nil || n != 0 {
				return fmt.Errorf("peer %s: %d claims never completed (%v)", p.name, n, err)
			}
		}
	}

	if onlyReplays {
		for _, s := range append([]*series{rawRead, pgxRead, sdkReplay, sdkReplayUncached}, peerReplay...) {
			fmt.Println(s)
		}
		cpuLine(sdkReplayUncached, peerReplay[plainPeer(peerList)])
		fmt.Printf("ratio replay sdk/raw=%.2f\n", sdkReplay.median().tps/rawRead.median().tps)
		fmt.Printf("ratio replay_uncached sdk/raw=%.2f\n", sdkReplayUncached.median().tps/rawRead.median().tps)
		fmt.Printf("ratio replay_uncached vs_plain_pgx_peer=%.2f\n", sdkReplayUncached.median().tps/peerReplay[plainPeer(peerList)].median().tps)
		return nil
	}
	best := func(ss []*series) *series {
		b := ss[0]
		for _, s := range ss[1:] {
			if s.median().tps > b.median().tps {
				b = s
			}
		}
		return b
	}
	bestMany := best(manyPeer)
	lead := func() {
		fmt.Printf("\nat %d callers on the %d-connection pool: best peer %s; payonce's lead %+.0f%% (without group commit %+.0f%%)\n",
			manyCallers, clients, bestMany.name, 100*(manyCycle.median().tps/bestMany.median().tps-1),
			100*(manyCyclePlain.median().tps/bestMany.median().tps-1))
	}
	if onlyCycles {
		for _, s := range append(append([]*series{rawCycle, sdkCycle, sdkCyclePlain}, peerCycle...), append([]*series{manyCycle, manyCyclePlain}, manyPeer...)...) {
			fmt.Println(s)
		}
		cpuLine(append([]*series{rawCycle, sdkCycle, sdkCyclePlain}, peerCycle...)...)
		fmt.Printf("ratio claim_complete sdk/raw=%.2f\n", sdkCycle.median().tps/rawCycle.median().tps)
		fmt.Printf("ratio peer_best claim_complete=%.2f\n", sdkCycle.median().tps/best(peerCycle).median().tps)
		lead()
		return nil
	}
	all := []*series{rawCycle, sdkCycle, sdkCyclePlain, rawRead, pgxRead, sdkReplay, sdkReplayUncached, rawOneTx, sdkOneTx, sdkTwoPhase}
	all = append(append(all, peerCycle...), peerReplay...)
	all = append(append(all, manyCycle, manyCyclePlain), manyPeer...)
	for _, s := range all {
		fmt.Println(s)
	}
	fmt.Println()
	cpuLine(append([]*series{rawCycle, sdkCycle, sdkCyclePlain}, peerCycle...)...)
	cpuLine(sdkReplayUncached, peerReplay[plainPeer(peerList)])
	bestCycle, bestReplay := best(peerCycle), best(peerReplay)
	fmt.Printf("\nbest peer: %s; %s\n", bestCycle.name, bestReplay.name)
	fmt.Printf("payonce's lead over the best peer: claim+complete %+.0f%%, replay %+.0f%% (without the replay cache %+.0f%%)\n",
		100*(sdkCycle.median().tps/bestCycle.median().tps-1), 100*(sdkReplay.median().tps/bestReplay.median().tps-1),
		100*(sdkReplayUncached.median().tps/bestReplay.median().tps-1))
	lead()
	fmt.Println()
	fmt.Printf("ratio claim_complete sdk/raw=%.2f\n", sdkCycle.median().tps/rawCycle.median().tps)
	fmt.Printf("ratio replay sdk/raw=%.2f\n", sdkReplay.median().tps/rawRead.median().tps)
	fmt.Printf("ratio replay_uncached sdk/raw=%.2f\n", sdkReplayUncached.median().tps/rawRead.median().tps)
	fmt.Printf("ratio one_tx sdk/raw=%.2f\n", sdkOneTx.median().tps/rawOneTx.median().tps)
	fmt.Printf("ratio one_tx vs_two_phase=%.2f\n", sdkOneTx.median().tps/sdkTwoPhase.median().tps)
	fmt.Printf("ratio peer_best claim_complete=%.2f\n", sdkCycle.median().tps/bestCycle.median().tps)
	fmt.Printf("ratio peer_best replay=%.2f\n", sdkReplay.median().tps/bestReplay.median().tps)
	fmt.Printf("ratio replay_uncached vs_plain_pgx_peer=%.2f\n", sdkReplayUncached.median().tps/peerReplay[plainPeer(peerList)].median().tps)

	if err := benchRecovery(ctx, dbURL, rounds); err != nil {
		return err
	}

	// The ledger: postings on two hot accounts against distinct accounts,
	// interleaved in rounds inside Run.
	fmt.Fprintln(os.Stderr, "ledger hot/distinct")
	lr, err := ledgerbench.Run(ctx, base, clients, time.Duration(rounds)*d)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	fmt.Printf("\nledger: hot %.0f postings/s (p50 %s, p99 %s); distinct %.0f postings/s (p50 %s, p99 %s)\n",
		lr.HotPostingsPerSec, lr.HotP50.Round(time.Microsecond), lr.HotP99.Round(time.Microsecond),
		lr.DistinctPostingsPerSec, lr.DistinctP50.Round(time.Microsecond), lr.DistinctP99.Round(time.Microsecond))
	fmt.Printf("ratio ledger hot/distinct=%.2f\n", lr.Ratio())

	// The Redis and DynamoDB stores, after every PostgreSQL line.
	fmt.Fprintln(os.Stderr, "stores: redis, dynamo")
	return benchStores(ctx, d, rounds)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func newPool(ctx context.Context, u string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = clients
	return pgxpool.NewWithConfig(ctx, cfg)
}

// prepare creates a fresh, migrated schema payonce_bench with the table
// the one-transaction action writes to; it returns a URL that selects it.
func prepare(ctx context.Context, base string) (string, error) {
	u, err := localpg.FreshSchema(ctx, base, "payonce_bench")
	if err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE bench_orders (id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL, amount NUMERIC NOT NULL)`)
	return u, err
}

// cycleSchema is a schema of its own for claim+complete paths: a migrated
// idempotency_store seeded like the replays' table and, with peers, the
// peers' tables seeded the same way, behind a pool of clients connections.
// It has the idempotency line alone, as a service whose executors keep no
// replay cache (the paths measured on it keep none): its table has no
// change triggers (the replaycache line's), like the peers' tables.
type cycleSchema struct {
	url   string
	pool  *pgxpool.Pool
	peers bool
}

// newCycleSchema creates schema afresh (see cycleSchema).
func newCycleSchema(ctx context.Context, base, schema string, fp idempotency.Fingerprint, peers bool) (cycleSchema, error) {
	return newCycleSchemaLines(ctx, base, schema, fp, peers, migrations.LineIdempotency)
}

// newCycleSchemaLines is newCycleSchema with the given migration lines.
func newCycleSchemaLines(ctx context.Context, base, schema string, fp idempotency.Fingerprint, peers bool, lines ...migrations.Line) (cycleSchema, error) {
	u, err := localpg.FreshSchemaLines(ctx, base, schema, lines...)
	if err != nil {
		return cycleSchema{}, err
	}
	pool, err := newPool(ctx, u)
	if err != nil {
		return cycleSchema{}, err
	}
	t := cycleSchema{url: u, pool: pool, peers: peers}
	if err = seedReplays(ctx, pool, fp); err == nil && peers {
		err = preparePeers(ctx, pool)
	}
	if err != nil {
		pool.Close()
		return cycleSchema{}, fmt.Errorf("schema %s: %w", schema, err)
	}
	return t, nil
}

// checkpointer returns what runs before each measured write run: a
// CHECKPOINT on pool, or a warning that the figures will be noisier when
// the server refuses it.
func checkpointer(ctx context.Context, pool *pgxpool.Pool) func() {
	return func() {
		if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
			fmt.Fprintln(os.Stderr, "bench: CHECKPOINT refused (not a superuser?); figures will be noisier:", err)
		}
	}
}

// newExecutor is the bench's executor over a pgstore store on pool with
// cfg: a 30 s lease, a day's retention.
func newExecutor(pool *pgxpool.Pool, cfg *pgstore.Config) (*pgstore.Executor, error) {
	store, err := pgstore.New(pool, cfg)
	if err != nil {
		return nil, err
	}
	return pgstore.NewExecutor(store, &idempotency.Config{LockTimeout: 30 * time.Second, Retention: 24 * time.Hour})
}

// libpqURL turns pgx's search_path parameter into libpq's options.
func libpqURL(u string) string {
	p, _ := url.Parse(u)
	q := p.Query()
	if sp := q.Get("search_path"); sp != "" {
		q.Del("search_path")
		q.Set("options", "-csearch_path="+sp)
	}
	p.RawQuery = q.Encode()
	return p.String()
}

func benchFingerprint() (idempotency.Fingerprint, error) {
	return idempotency.NewFingerprint().Decimal("amount", "49.99").String("currency", "EUR").
		String("sku", "sku_123").Int("qty", 1).Sum()
}

// seedReplays stores completed records under the keys "1".."100000", with
// the response Do would have stored, so that Do replays them and pgbench
// selects them.
func seedReplays(ctx context.Context, pool *pgxpool.Pool, fp idempotency.Fingerprint) error {
	if _, err := pool.Exec(ctx, `INSERT INTO idempotency_store
		(idempotency_key, user_id, fingerprint, status, response_code, response_body, response_raw, lock_version, completed_at, expires_at)
		SELECT g::text, $1, $2, 'COMPLETED', 201, $3, $4, 0, now(), now() + interval '1 day'
		  FROM generate_series(1, $5::int) g`,
		scope, string(fp), []byte(`{"header":{"Content-Type":["application/json"]}}`), body, replayKeys); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, `VACUUM ANALYZE idempotency_store`)
	return err
}

// benchResponse is what every benchmarked action returns, built once: the
// peers complete with constant bytes (body, and the header's JSON), so an
// action that built a header map for each call would charge Do for work
// that is the caller's, not the idempotency layer's. Do still encodes the
// header for every completion, as it must. Nothing on these paths writes
// to the map: the executor and the stores read it.
var benchResponse = idempotency.Response{Code: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: body}

func response() idempotency.Response { return benchResponse }

type worker func(ctx context.Context, rng *rand.Rand, i int) error

func newKeyWorker(exec *pgstore.Executor, fp idempotency.Fingerprint, prefix string) worker {
	return func(ctx context.Context, rng *rand.Rand, i int) error {
		r := idempotency.Request{Scope: scope, Key: fmt.Sprintf("%s%d", prefix, rng.Uint64()), Fingerprint: fp}
		_, err := exec.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) { return response(), nil })
		return err
	}
}

func replayWorker(exec *pgstore.Executor, fp idempotency.Fingerprint) worker {
	return func(ctx context.Context, rng *rand.Rand, i int) error {
		r := idempotency.Request{Scope: scope, Key: strconv.Itoa(1 + rng.IntN(replayKeys)), Fingerprint: fp}
		res, err := exec.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) {
			return idempotency.Response{}, fmt.Errorf("a replay executed")
		})
		if err == nil && !res.Replayed {
			return fmt.Errorf("not a replay")
		}
		return err
	}
}

// selectWorker is the plain pgx client reading what a replay reads: the
// ceiling of any Go client on this machine, for context.
func selectWorker(pool *pgxpool.Pool) worker {
	return func(ctx context.Context, rng *rand.Rand, i int) error {
		var (
			fp, status string
			code       int32
			meta, raw  []byte
			version    int32
			locked     *time.Time
			expires    time.Time
		)
		return pool.QueryRow(ctx, `SELECT fingerprint, status, response_code, response_body, response_raw, lock_version, locked_until, expires_at
			FROM idempotency_store WHERE idempotency_key = $1 AND user_id = $2`, strconv.Itoa(1+rng.IntN(replayKeys)), scope).
			Scan(&fp, &status, &code, &meta, &raw, &version, &locked, &expires)
	}
}

// twoPhaseWorker is what a user writes without DoTx: Do, whose action
// inserts the order in a transaction of its own, then the completion.
func twoPhaseWorker(exec *pgstore.Executor, pool *pgxpool.Pool, fp idempotency.Fingerprint, prefix string) worker {
	return func(ctx context.Context, rng *rand.Rand, i int) error {
		r := idempotency.Request{Scope: scope, Key: fmt.Sprintf("%s%d", prefix, rng.Uint64()), Fingerprint: fp}
		_, err := exec.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) {
			_, err := pool.Exec(ctx, `INSERT INTO bench_orders (key, amount) VALUES ($1, $2)`, r.Key, "49.99")
			return response(), err
		})
		return err
	}
}

// warmCache replays every replay key once through exec, 8 at a time.
func warmCache(exec *pgstore.Executor, fp idempotency.Fingerprint) error {
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 1 + c; k <= replayKeys; k += clients {
				r := idempotency.Request{Scope: scope, Key: strconv.Itoa(k), Fingerprint: fp}
				if _, err := exec.Do(ctx, r, func(context.Context) (idempotency.Response, error) {
					return idempotency.Response{}, fmt.Errorf("a replay executed")
				}); err != nil {
					errs[c] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func oneTxWorker(exec *pgstore.Executor, fp idempotency.Fingerprint, prefix string) worker {
	return func(ctx context.Context, rng *rand.Rand, i int) error {
		r := idempotency.Request{Scope: scope, Key: fmt.Sprintf("%s%d", prefix, rng.Uint64()), Fingerprint: fp}
		_, err := exec.DoTx(ctx, r, func(ctx context.Context, tx pgx.Tx) (idempotency.Response, error) {
			_, err := tx.Exec(ctx, `INSERT INTO bench_orders (key, amount) VALUES ($1, $2)`, r.Key, "49.99")
			return response(), err
		})
		return err
	}
}

// measure runs w on clients goroutines for d and returns throughput and
// latency percentiles.
func measure(d time.Duration, w worker) sample { return measureN(d, clients, w) }

// measureN is measure with callers goroutines sharing the pool's clients
// connections.
func measureN(d time.Duration, callers int, w worker) sample {
	var r rawRun
	r.add(runFor(d, callers, w))
	return r.sample()
}

// rawRun is what one or more measured runs of a path did: operations,
// time, latencies, and the client's and server's CPU and the WAL written
// over them.
type rawRun struct {
	ops            int
	elapsed        time.Duration
	lat            []time.Duration
	client, server time.Duration
	wal            walCounters
}

func (r *rawRun) add(x rawRun) {
	r.ops += x.ops
	r.elapsed += x.elapsed
	r.lat = append(r.lat, x.lat...)
	r.client += x.client
	r.server += x.server
	r.wal.bytes += x.wal.bytes
	r.wal.fpi += x.wal.fpi
}

// sample summarizes r: throughput over its whole time, percentiles of
// all its latencies, CPU and WAL per operation.
func (r *rawRun) sample() sample {
	sm := summarize(r.lat, r.elapsed)
	if n := time.Duration(r.ops); n > 0 {
		sm.client = r.client / n
		if serverCPU != nil {
			sm.server = r.server / n
		}
		sm.wal, sm.fpi = float64(r.wal.bytes)/float64(n), float64(r.wal.fpi)/float64(n)
	}
	return sm
}

// runFor runs w on callers goroutines for d.
func runFor(d time.Duration, callers int, w worker) rawRun {
	ctx := context.Background()
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	srv, c0 := serverNow(), clientCPU()
	start := time.Now()
	deadline := start.Add(d)
	var failed error
	var mu sync.Mutex
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(c)))
			for i := 0; ; i++ {
				t0 := time.Now()
				if t0.After(deadline) {
					return
				}
				if err := w(ctx, rng, i); err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		}(c)
	}
	wg.Wait()
	if failed != nil {
		fmt.Fprintln(os.Stderr, "bench: worker failed:", failed)
		os.Exit(1)
	}
	r := rawRun{elapsed: time.Since(start), client: clientCPU() - c0}
	srv.since(&r)
	for _, l := range lat {
		r.lat = append(r.lat, l...)
	}
	r.ops = len(r.lat)
	return r
}

// path is one path that measureInterleaved measures: it runs for d and
// returns what it did.
type path func(d time.Duration) (rawRun, error)

// goPath is w on clients goroutines of this process.
func goPath(w worker) path {
	return func(d time.Duration) (rawRun, error) { return runFor(d, clients, w), nil }
}

// timed is a path and the series its samples go to.
type timed struct {
	s *series
	p path
}

// goTimed pairs each series with its worker, run by goPath.
func goTimed(ss []*series, ws []worker) []timed {
	if len(ss) != len(ws) {
		panic(fmt.Sprintf("bench: %d workers for %d series", len(ws), len(ss)))
	}
	ts := make([]timed, len(ws))
	for i, w := range ws {
		ts[i] = timed{ss[i], goPath(w)}
	}
	return ts
}

// measureInterleaved measures each path for d, in slices of d/slices
// taken in turn (each slice after before, when set; in each round of
// slices, the paths run in the order of the next row of a balanced design,
// balancedOrder), and adds one sample to each path's series.
// This machine's speed drifts by a tenth or more within a minute (other
// tenants of the host); paths measured one after the other for their
// whole time each see a different machine, paths measured in turn in
// short slices see the same one. pgbench's paths (the physical limits)
// take their turns too: measured in a window of their own, the raw limit
// once ran at 2,959/s and once at 4,820/s while Do ran at 3,352/s and
// 3,760/s, and the sdk/raw ratios followed the machine rather than the
// code.
//
// The order is balanced because a path pays for some of what the path
// before it left: the order used to rotate (path i+1 ran right after path
// i in every round but one), and the path right after pgbench's ran 1-5 %
// slower than an identical one right after it (A/A runs: the same kind of
// executor in both places, BENCHMARKS.md, eleventh session).
//
// Each slice runs under the CPU profiler's label path=<its series' name>,
// which the goroutines it starts inherit: with BENCH_CPUPROFILE, go tool
// pprof -tagfocus 'path=(b) sdk claim+complete (Do)' shows one path.
func measureInterleaved(d time.Duration, slices int, before func(), ts ...timed) error {
	runs := make([]rawRun, len(ts))
	for range slices {
		order := balancedOrder(len(ts), roundsRun)
		roundsRun++
		for _, i := range order {
			if before != nil {
				before()
			}
			var r rawRun
			var err error
			pprof.Do(context.Background(), pprof.Labels("path", ts[i].s.name), func(context.Context) {
				r, err = ts[i].p(d / time.Duration(slices))
			})
			if err != nil {
				return err
			}
			runs[i].add(r)
		}
	}
	for i, t := range ts {
		t.s.samples = append(t.s.samples, runs[i].sample())
	}
	return nil
}

// roundsRun counts the rounds of slices measureInterleaved ran: the next
// takes the next row of the balanced design.
var roundsRun int

// balancedOrder returns row k of a Williams design for n paths: the order
// in which one round of slices runs them. Over any n consecutive rows (2n
// when n is odd), each path runs first once, and right after each other
// path once (twice when n is odd): no path always follows the same one.
func balancedOrder(n, k int) []int {
	// The first row is 0, 1, n-1, 2, n-2, ...; its steps from one path to
	// the next are all different modulo n (for an even n), so that adding
	// r to every entry gives rows in which every ordered pair of paths is
	// adjacent once. An odd n needs each row reversed too.
	first := make([]int, n)
	lo, hi := 1, n-1
	for j := 1; j < n; j++ {
		if j%2 == 1 {
			first[j], lo = lo, lo+1
		} else {
			first[j], hi = hi, hi-1
		}
	}
	rows := n
	if n%2 == 1 {
		rows = 2 * n
	}
	r := k % rows
	order := make([]int, n)
	for j, p := range first {
		order[j] = (p + r) % n
	}
	if r >= n {
		slices.Reverse(order)
	}
	return order
}

func summarize(all []time.Duration, elapsed time.Duration) sample {
	slices.Sort(all)
	if len(all) == 0 {
		return sample{}
	}
	return sample{
		tps: float64(len(all)) / elapsed.Seconds(),
		p50: all[len(all)/2],
		p99: all[len(all)*99/100],
	}
}

// toPgbench is sql as a line of a pgbench script: each $n replaced by the
// pgbench variable vars[n-1].
func toPgbench(sql string, vars ...string) string {
	for i := len(vars); i >= 1; i-- { // $10 before $1
		sql = strings.ReplaceAll(sql, fmt.Sprintf("$%d", i), ":"+vars[i-1])
	}
	return strings.Join(strings.Fields(sql), " ") + ";\n"
}

// pgbench scripts: pgstore's own statements, with each $n replaced by a
// pgbench variable of the same meaning.
func writeScripts(dir string) (cycle, sel, oneTx string, err error) {
	st := pgstore.Statements()
	// The claim a new key gets from the default (adaptive) store, the lean
	// insert; its lock version (random) feeds the completion, as in Do.
	claim := strings.TrimSuffix(toPgbench(st["claim_new"], "k", "s", "fp", "lock", "ret", "rh", "inst", "inc"), ";\n") + " \\gset c_\n"
	// A store without Config.Instance: no lease holder (an empty name;
	// pgbench refuses an empty -D value, so it is written in the script).
	claim = strings.ReplaceAll(claim, ":inst", "''")
	complete := toPgbench(st["complete"], "k", "s", "c_lock_version", "st", "code", "meta", "body", "ret")
	cycle = filepath.Join(dir, "cycle.sql")
	script := "\\set k random(1000000000, 9000000000000000000)\n" + claim + complete
	if err := os.WriteFile(cycle, []byte(script), 0o644); err != nil {
		return "", "", "", err
	}
	// The same cycle in one transaction with the action's insert, as DoTx
	// runs it.
	oneTx = filepath.Join(dir, "one_tx.sql")
	script = "\\set k random(1000000000, 9000000000000000000)\nBEGIN ISOLATION LEVEL READ COMMITTED;\n" + claim +
		"INSERT INTO bench_orders (key, amount) VALUES (:k, 49.99);\n" + complete + "COMMIT;\n"
	if err := os.WriteFile(oneTx, []byte(script), 0o644); err != nil {
		return "", "", "", err
	}
	sel = filepath.Join(dir, "select.sql")
	script = fmt.Sprintf("\\set k random(1, %d)\n", replayKeys) +
		"SELECT fingerprint, status, response_code, response_body, response_raw, lock_version, locked_until, expires_at FROM idempotency_store WHERE idempotency_key = :k AND user_id = :s;\n"
	if err := os.WriteFile(sel, []byte(script), 0o644); err != nil {
		return "", "", "", err
	}
	return cycle, sel, oneTx, nil
}

type pgbench struct {
	bin, url, dir, fp string
	n                 int
}

// path is script as a path of measureInterleaved. pgbench counts time in
// whole seconds: a slice shorter than one runs for one.
func (p *pgbench) path(ctx context.Context, script string) path {
	return func(d time.Duration) (rawRun, error) {
		d = max(d, time.Second)
		srv := serverNow()
		lats, err := p.exec(ctx, script, d)
		if err != nil {
			return rawRun{}, err
		}
		// Every transaction is in the latency log: its count over the
		// run's time is the rate pgbench reports (without its connection
		// time), and slices add up as the Go paths' do. The server's CPU
		// includes starting pgbench's backends for each run (their exit
		// is counted in the postmaster's children's time), which the Go
		// paths' pooled connections do not pay: a few µs a cycle in a
		// slice of one second, the same for every pgbench path.
		r := rawRun{ops: len(lats), elapsed: time.Duration(int(d.Seconds())) * time.Second, lat: lats}
		srv.since(&r)
		return r, nil
	}
}

// exec runs script for d (whole seconds) and returns each transaction's
// latency.
func (p *pgbench) exec(ctx context.Context, script string, d time.Duration) ([]time.Duration, error) {
	p.n++
	prefix := filepath.Join(p.dir, fmt.Sprintf("log%d", p.n))
	args := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-j", "2",
		"-T", strconv.Itoa(int(d.Seconds())), "-f", script, "-l", "--log-prefix=" + prefix,
		"-D", "s=" + scope, "-D", "fp=" + p.fp, "-D", "lock=30", "-D", "ret=86400", "-D", "rf=false", "-D", "rh=0",
		"-D", "inc=0",
		// The completion stores the same response Do stores.
		"-D", "st=COMPLETED", "-D", "code=201",
		"-D", `meta={"header":{"Content-Type":["application/json"]}}`, "-D", "body=" + string(body),
		p.url}
	cmd := exec.CommandContext(ctx, p.bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pgbench: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`tps = [0-9.]+ \(without initial connection time\)`).Match(out) {
		return nil, fmt.Errorf("pgbench: no tps in output:\n%s", out)
	}
	var lats []time.Duration
	logs, _ := filepath.Glob(prefix + ".*")
	for _, l := range logs {
		f, err := os.Open(l)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 3 {
				us, _ := strconv.ParseInt(fields[2], 10, 64)
				lats = append(lats, time.Duration(us)*time.Microsecond)
			}
		}
		f.Close()
		os.Remove(l)
	}
	return lats, nil
}
