// Package ledgerbench measures the ledger against itself in one run:
// posting throughput when every entry touches the same two accounts (the
// provider cash accounts every charge credits) against the same load on
// distinct accounts, and the cost of reading the balance of an account
// with a million postings.
//
// Each measurement creates a schema of its own in the database it is given,
// migrates it, and drops it at the end, so it can run beside other
// benchmarks. The project's bench command calls [Run] and prints
//
//	ratio ledger hot/distinct=0.xx
package ledgerbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/money"
)

// Result is one throughput comparison. Each entry has two postings.
type Result struct {
	Goroutines int
	Duration   time.Duration // measured time per mode

	HotPostingsPerSec      float64 // every entry touches the same two accounts
	DistinctPostingsPerSec float64 // each goroutine has its own two accounts

	HotP50, HotP99           time.Duration // latency of one Post
	DistinctP50, DistinctP99 time.Duration
}

// Ratio is hot throughput over distinct throughput; 1 means hot accounts
// cost nothing.
func (r Result) Ratio() float64 {
	if r.DistinctPostingsPerSec == 0 {
		return 0
	}
	return r.HotPostingsPerSec / r.DistinctPostingsPerSec
}

// String is the line the bench command prints, with the details after it.
func (r Result) String() string {
	return fmt.Sprintf("ratio ledger hot/distinct=%.2f (hot %.0f postings/s p50 %v p99 %v; distinct %.0f postings/s p50 %v p99 %v; %d goroutines, %v per mode)",
		r.Ratio(), r.HotPostingsPerSec, r.HotP50.Round(time.Microsecond), r.HotP99.Round(time.Microsecond),
		r.DistinctPostingsPerSec, r.DistinctP50.Round(time.Microsecond), r.DistinctP99.Round(time.Microsecond), r.Goroutines, r.Duration)
}

// Run posts entries from goroutines goroutines for d in each mode: hot
// (every entry debits provider:stripe and credits customer:payments, EUR)
// and distinct (goroutine i uses its own pair of accounts). After a short
// warm-up the modes alternate in rounds of about a second (hot, distinct,
// distinct, hot, ...), so other load and drift (table growth, checkpoints)
// fall on both alike. It uses a schema of its own in databaseURL, dropped
// at the end.
func Run(ctx context.Context, databaseURL string, goroutines int, d time.Duration) (Result, error) {
	if goroutines < 1 || d <= 0 {
		return Result{}, fmt.Errorf("ledgerbench: need goroutines >= 1 and d > 0, got %d and %v", goroutines, d)
	}
	res := Result{Goroutines: goroutines, Duration: d}
	err := withSchema(ctx, databaseURL, goroutines+2, func(pool *pgxpool.Pool) error {
		l, err := ledger.New(pool, nil)
		if err != nil {
			return err
		}
		hot := make([][2]string, goroutines)
		distinct := make([][2]string, goroutines)
		for g := range goroutines {
			hot[g] = [2]string{ledger.ProviderCash("stripe"), ledger.CustomerPayments}
			distinct[g] = [2]string{fmt.Sprintf("bench:%d:cash", g), fmt.Sprintf("bench:%d:payments", g)}
		}
		for _, pairs := range [][][2]string{hot, distinct} {
			for _, pair := range pairs {
				for _, code := range pair {
					if _, err := l.EnsureAccount(ctx, ledger.EnsureAccountParams{Code: code, Currency: money.EUR}); err != nil {
						return err
					}
				}
			}
		}
		type phase struct {
			pairs [][2]string
			into  *stats
			d     time.Duration
		}
		var hotStats, distinctStats stats
		warm := min(d/10, time.Second)
		phases := []phase{{hot, nil, warm}, {distinct, nil, warm}}
		// Rounds of about a second, ordered hot, distinct, distinct, hot, ...
		// (ABBA), so bursts of other load and slow drift (table growth,
		// checkpoints) fall on both modes alike.
		rounds := max(2, int(d/time.Second))
		for r := range rounds {
			rd := d / time.Duration(rounds)
			if r == rounds-1 {
				rd = d - rd*time.Duration(rounds-1)
			}
			h, dd := phase{hot, &hotStats, rd}, phase{distinct, &distinctStats, rd}
			if r%2 == 0 {
				phases = append(phases, h, dd)
			} else {
				phases = append(phases, dd, h)
			}
		}
		for _, ph := range phases {
			s, err := load(ctx, l, ph.pairs, ph.d)
			if err != nil {
				return err
			}
			if ph.into != nil {
				ph.into.add(s)
			}
		}
		res.HotPostingsPerSec, res.HotP50, res.HotP99 = hotStats.summary()
		res.DistinctPostingsPerSec, res.DistinctP50, res.DistinctP99 = distinctStats.summary()
		return nil
	})
	return res, err
}

type stats struct {
	postings  int
	elapsed   time.Duration
	latencies []time.Duration
}

func (s *stats) add(o stats) {
	s.postings += o.postings
	s.elapsed += o.elapsed
	s.latencies = append(s.latencies, o.latencies...)
}

func (s *stats) summary() (perSec float64, p50, p99 time.Duration) {
	if s.elapsed <= 0 || len(s.latencies) == 0 {
		return 0, 0, 0
	}
	slices.Sort(s.latencies)
	at := func(q float64) time.Duration { return s.latencies[int(q*float64(len(s.latencies)-1))] }
	return float64(s.postings) / s.elapsed.Seconds(), at(0.50), at(0.99)
}

var runID = func() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// load runs one goroutine per pair, each posting two-posting entries
// between its pair's accounts until d has passed.
func load(ctx context.Context, l *ledger.Ledger, pairs [][2]string, d time.Duration) (stats, error) {
	one := money.MustParse("0.01", money.EUR)
	var (
		mu    sync.Mutex
		total stats
		errs  []error
		wg    sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	phase := start.UnixNano()
	for g, pair := range pairs {
		wg.Go(func() {
			var local stats
			for i := 0; time.Now().Before(deadline); i++ {
				p := ledger.PostParams{
					Key:      fmt.Sprintf("bench_%s_%d_%d_%d", runID, phase, g, i),
					Step:     ledger.StepCharge,
					Postings: []ledger.Posting{ledger.Debit(pair[0], one), ledger.Credit(pair[1], one)},
				}
				t0 := time.Now()
				if _, err := l.Post(ctx, p); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				local.latencies = append(local.latencies, time.Since(t0))
				local.postings += 2
			}
			mu.Lock()
			total.postings += local.postings
			total.latencies = append(total.latencies, local.latencies...)
			mu.Unlock()
		})
	}
	wg.Wait()
	total.elapsed = time.Since(start)
	return total, errors.Join(errs...)
}

// BalanceReadResult is the cost of reading the balance of one account with
// Postings postings.
type BalanceReadResult struct {
	Postings int           // postings of the account read
	Load     time.Duration // bulk-loading them (not a ledger figure)

	// Cold is a read with no snapshot: it sums every posting. Only the
	// first read of an account that has never been read pays it.
	Cold time.Duration
	// Snapshot is recording the snapshot that read triggers.
	Snapshot time.Duration
	// Tail postings were then posted through Ledger.Post after the
	// snapshot: the most a read sums with the default
	// Config.SnapshotEvery before it records the next snapshot.
	Tail int
	// WarmP50 and WarmP99 are Ledger.Balance over Reads reads with that
	// tail: the steady state.
	Reads            int
	WarmP50, WarmP99 time.Duration
}

func (r BalanceReadResult) String() string {
	return fmt.Sprintf("ledger balance read, %d postings: warm p50 %v p99 %v (tail %d, %d reads); cold %v; snapshot %v; load %v",
		r.Postings, r.WarmP50.Round(time.Microsecond), r.WarmP99.Round(time.Microsecond), r.Tail, r.Reads,
		r.Cold.Round(time.Microsecond), r.Snapshot.Round(time.Microsecond), r.Load.Round(time.Millisecond))
}

// defaultSnapshotEvery is ledger's default Config.SnapshotEvery.
const defaultSnapshotEvery = 500

// Bulk load, in the benchmark's own schema only: with the ledger's
// triggers disabled for speed, so the rows carry what the triggers would
// have set (the transaction's xid, the entry's time), and balanced entries
// of two postings, account 1 debited and account 2 credited. Posting
// times are spread over the past days, oldest first.
const (
	sqlBulkEntries = `
INSERT INTO ledger_entries (id, key, step, posted_at, xid)
OVERRIDING SYSTEM VALUE
SELECT i, 'bulk-' || i, 'bulk', now() - make_interval(secs => ($1 - i) * 0.1), pg_current_xact_id()
FROM generate_series(1, $1) i`
	sqlBulkPostings = `
INSERT INTO ledger_postings (entry_id, n, account_id, currency, amount, posted_at, xid)
SELECT e.id, s.n, s.account, 'EUR', s.amount, e.posted_at, e.xid
FROM ledger_entries e
CROSS JOIN (VALUES (1, $1::bigint, 0.01), (2, $2::bigint, -0.01)) s(n, account, amount)
WHERE e.step = 'bulk'`
)

// BalanceRead loads an account with postings postings and measures
// reading its balance through Ledger.Balance, in a schema of its own in
// databaseURL, dropped at the end.
func BalanceRead(ctx context.Context, databaseURL string, postings int) (BalanceReadResult, error) {
	if postings < 1 {
		return BalanceReadResult{}, fmt.Errorf("ledgerbench: need postings >= 1, got %d", postings)
	}
	res := BalanceReadResult{Postings: postings, Tail: defaultSnapshotEvery, Reads: 200}
	err := withSchema(ctx, databaseURL, 4, func(pool *pgxpool.Pool) error {
		// SnapshotEvery above the load: the cold read records no snapshot.
		cold, err := ledger.New(pool, &ledger.Config{SnapshotEvery: postings + 1})
		if err != nil {
			return err
		}
		l, err := ledger.New(pool, nil)
		if err != nil {
			return err
		}
		var ids [2]int64
		for i, code := range []string{"hot:cash", "hot:payments"} {
			if _, err := l.EnsureAccount(ctx, ledger.EnsureAccountParams{Code: code, Currency: money.EUR}); err != nil {
				return err
			}
			if err := pool.QueryRow(ctx, `SELECT id FROM ledger_accounts WHERE code = $1`, code).Scan(&ids[i]); err != nil {
				return err
			}
		}

		t0 := time.Now()
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for _, s := range []string{
				`ALTER TABLE ledger_entries DISABLE TRIGGER USER`,
				`ALTER TABLE ledger_postings DISABLE TRIGGER USER`,
			} {
				if _, err := tx.Exec(ctx, s); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, sqlBulkEntries, postings); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, sqlBulkPostings, ids[0], ids[1]); err != nil {
				return err
			}
			for _, s := range []string{
				`ALTER TABLE ledger_entries ENABLE TRIGGER USER`,
				`ALTER TABLE ledger_postings ENABLE TRIGGER USER`,
				`SELECT setval(pg_get_serial_sequence('ledger_entries', 'id'), (SELECT max(id) FROM ledger_entries))`,
			} {
				if _, err := tx.Exec(ctx, s); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("ledgerbench: bulk load: %w", err)
		}
		if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) ledger_postings, ledger_entries`); err != nil {
			return err
		}
		res.Load = time.Since(t0)

		want := money.MustParse(fmt.Sprintf("%d.%02d", postings/100, postings%100), money.EUR)
		t0 = time.Now()
		got, err := cold.Balance(ctx, "hot:cash", money.EUR)
		res.Cold = time.Since(t0)
		if err != nil {
			return err
		}
		if !got.Equal(want) {
			return fmt.Errorf("ledgerbench: cold balance %v, want %v", got, want)
		}

		t0 = time.Now()
		if _, err := pool.Exec(ctx, `INSERT INTO ledger_balance_snapshots (account_id) VALUES ($1)`, ids[0]); err != nil {
			return err
		}
		res.Snapshot = time.Since(t0)

		one := money.MustParse("0.01", money.EUR)
		for i := range res.Tail {
			p := ledger.PostParams{Key: fmt.Sprintf("tail-%d", i), Step: ledger.StepCharge,
				Postings: []ledger.Posting{ledger.Debit("hot:cash", one), ledger.Credit("hot:payments", one)}}
			if _, err := l.Post(ctx, p); err != nil {
				return err
			}
		}
		want = money.MustParse(fmt.Sprintf("%d.%02d", (postings+res.Tail)/100, (postings+res.Tail)%100), money.EUR)
		// Reads through a ledger that does not snapshot, so every read
		// sums the whole tail.
		lat := make([]time.Duration, res.Reads)
		for i := range lat {
			t0 := time.Now()
			got, err := cold.Balance(ctx, "hot:cash", money.EUR)
			lat[i] = time.Since(t0)
			if err != nil {
				return err
			}
			if !got.Equal(want) {
				return fmt.Errorf("ledgerbench: balance %v, want %v", got, want)
			}
		}
		slices.Sort(lat)
		res.WarmP50, res.WarmP99 = lat[len(lat)/2], lat[len(lat)*99/100]
		return nil
	})
	return res, err
}

// withSchema creates a schema of its own in databaseURL, migrates it, runs
// fn with a pool whose search_path selects it, and drops it.
func withSchema(ctx context.Context, databaseURL string, maxConns int, fn func(*pgxpool.Pool) error) (err error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("ledgerbench: database URL: %w", err)
	}
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("ledgerbench: connect: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "ledgerbench_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return fmt.Errorf("ledgerbench: create schema: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, derr := admin.Exec(dctx, "DROP SCHEMA "+schema+" CASCADE"); derr != nil && err == nil {
			err = fmt.Errorf("ledgerbench: drop schema: %w", derr)
		}
	}()
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = int32(maxConns)
	cfg.MinConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("ledgerbench: connect: %w", err)
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("ledgerbench: %w", err)
	}
	return fn(pool)
}
