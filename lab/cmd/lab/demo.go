package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/internal/cli"
	"github.com/payonce/payonce/pgtest/localpg"
)

// newCoreDemoCmd is lab demo core; dbURL is lab demo's --database-url.
func newCoreDemoCmd(dbURL *string) *cobra.Command {
	var nKeys, clients int
	cmd := &cobra.Command{
		Use:   "core",
		Short: "concurrent duplicates through the idempotency core",
		Long: `Storms the idempotency core with concurrent duplicate requests: for each
key, many impatient clients send the same request at once and retry on
"in progress"; some first attempts fail transiently and are retried; one
holder crashes mid-action and its key is reclaimed after the lock timeout.
It prints a table per key and exits 1 if any key executed more than once.

Without --database-url or DATABASE_URL it starts a throwaway PostgreSQL.
The demo works in its own schema, payonce_demo, dropped first.`,
		Example: `  lab demo core
  lab demo core --keys 20 --clients 100`,
		Args: cli.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if nKeys < 1 || clients < 1 {
				return cli.Usage("demo core: --keys and --clients must be at least 1")
			}
			return runCoreDemo(*dbURL, nKeys, clients)
		},
	}
	cmd.Flags().IntVar(&nKeys, "keys", 8, "distinct idempotency keys")
	cmd.Flags().IntVar(&clients, "clients", 40, "concurrent clients per key")
	return cmd
}

type keyStats struct {
	attempts, replays, inProgress, transient atomic.Int64
	// flaky: the key's first execution fails transiently.
	flaky atomic.Bool
}

func runCoreDemo(dbURL string, nKeys, clients int) error {
	ctx := context.Background()
	u := dbURL
	if u == "" {
		u = os.Getenv("DATABASE_URL")
	}
	if u == "" {
		fmt.Println("starting a throwaway PostgreSQL ...")
		c, err := localpg.Start(ctx, localpg.Options{Fast: true})
		if err != nil {
			return err
		}
		defer c.Stop()
		u = c.URL
	}
	pool, err := demoSchema(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()

	store, err := pgstore.New(pool, nil)
	if err != nil {
		return err
	}
	const lockTimeout = 2 * time.Second
	exec, err := pgstore.NewExecutor(store, &idempotency.Config{LockTimeout: lockTimeout, Retention: 24 * time.Hour})
	if err != nil {
		return err
	}

	keys := make([]string, nKeys)
	stats := make([]*keyStats, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("order-%03d", i+1)
		stats[i] = &keyStats{}
		stats[i].flaky.Store(i%3 == 0)
	}
	// The last key's first holder "crashes": it claims and never finishes.
	crashKey := len(keys) - 1
	crashed, err := store.Claim(ctx, idempotency.ClaimParams{
		Scope: "usr_demo", Key: mustKey(keys[crashKey]), Fingerprint: demoFP(keys[crashKey]),
		LockTimeout: lockTimeout, Retention: 24 * time.Hour,
	})
	if err != nil || crashed.State != idempotency.ClaimAcquired {
		return fmt.Errorf("demo: crash setup: %v %v", crashed.State, err)
	}

	fmt.Printf("%d keys x %d concurrent clients, lock timeout %s; key %s starts with a crashed holder\n\n",
		len(keys), clients, lockTimeout, keys[crashKey])
	start := time.Now()
	var wg sync.WaitGroup
	var failures atomic.Int64
	for i, k := range keys {
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func(i, c int, k string) {
				defer wg.Done()
				if err := client(ctx, exec, pool, k, stats[i]); err != nil {
					failures.Add(1)
					fmt.Fprintf(os.Stderr, "client %s/%d: %v\n", k, c, err)
				}
			}(i, c, k)
		}
	}
	wg.Wait()
	elapsed := time.Since(start)

	// Executions are counted where the effect lands: the orders table.
	rows, err := pool.Query(ctx, `SELECT key, count(*) FROM demo_orders GROUP BY key`)
	if err != nil {
		return err
	}
	effects := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return err
		}
		effects[k] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}

	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "key\tattempts\texecutions\treplays\tin progress\ttransient errors\t")
	bad := 0
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	sort.Ints(order)
	for _, i := range order {
		s := stats[i]
		n := effects[mustKey(keys[i])]
		if n != 1 {
			bad++
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t\n", keys[i], s.attempts.Load(), n, s.replays.Load(), s.inProgress.Load(), s.transient.Load())
	}
	w.Flush()
	fmt.Printf("\nwall time %s; keys executed more than once: %d; keys not executed: %d\n",
		elapsed.Round(time.Millisecond), countIf(effects, keys, func(n int64) bool { return n > 1 }),
		countIf(effects, keys, func(n int64) bool { return n == 0 }))
	if bad > 0 || failures.Load() > 0 {
		return fmt.Errorf("demo failed: %d key(s) without exactly one execution, %d client failure(s)", bad, failures.Load())
	}
	fmt.Println("every key executed exactly once")
	return nil
}

func countIf(effects map[string]int64, keys []string, f func(int64) bool) int {
	n := 0
	for _, k := range keys {
		if f(effects[mustKey(k)]) {
			n++
		}
	}
	return n
}

var errFlaky = errors.New("payment gateway timeout (simulated)")

// client sends one request and retries, like an impatient browser, until it
// gets the outcome.
func client(ctx context.Context, exec *pgstore.Executor, pool *pgxpool.Pool, intent string, s *keyStats) error {
	req := idempotency.Request{Scope: "usr_demo", Key: mustKey(intent), Fingerprint: demoFP(intent)}
	time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // double clicks, not lockstep
	for attempt := 0; attempt < 200; attempt++ {
		s.attempts.Add(1)
		res, err := exec.Do(ctx, req, func(ctx context.Context) (idempotency.Response, error) {
			if s.flaky.CompareAndSwap(true, false) {
				return idempotency.Response{}, errFlaky
			}
			var id int64
			if err := pool.QueryRow(ctx, `INSERT INTO demo_orders (key) VALUES ($1) RETURNING id`, req.Key).Scan(&id); err != nil {
				return idempotency.Response{}, err
			}
			time.Sleep(time.Duration(50+rand.IntN(150)) * time.Millisecond) // the slow part of the work
			return idempotency.Response{Code: 201, Body: []byte(fmt.Sprintf(`{"order_id":%d}`, id))}, nil
		})
		var ip *idempotency.InProgressError
		switch {
		case err == nil:
			if res.Replayed {
				s.replays.Add(1)
			}
			return nil
		case errors.As(err, &ip):
			s.inProgress.Add(1)
			time.Sleep(min(ip.RetryAfter, 100*time.Millisecond) + time.Duration(rand.IntN(20))*time.Millisecond)
		case errors.Is(err, errFlaky):
			s.transient.Add(1)
		default:
			return err
		}
	}
	return fmt.Errorf("no outcome after 200 attempts")
}

func mustKey(intent string) string {
	k, err := idempotency.ComposeKey("usr_demo", "createOrder", intent)
	if err != nil {
		panic(err)
	}
	return k
}

func demoFP(intent string) idempotency.Fingerprint {
	f, err := idempotency.NewFingerprint().String("sku", "sku_"+intent).Int("qty", 1).Decimal("amount", "49.99").String("currency", "EUR").Sum()
	if err != nil {
		panic(err)
	}
	return f
}

// demoSchema (re)creates the schema payonce_demo and returns a pool on it.
func demoSchema(ctx context.Context, base string) (*pgxpool.Pool, error) {
	u, err := localpg.FreshSchema(ctx, base, "payonce_demo")
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE demo_orders (id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}
