// Command scalebench measures the claim+complete cycle (Executor.Do on new
// keys) from several OS processes against one PostgreSQL, connected
// directly and through PgBouncer in transaction pooling mode (make
// scalebench). Each instance is a process of its own with a pool of 8
// connections and 8 goroutines, as an application replica would be; the
// instances start together and run for the same time. It prints, per
// mode and number of instances, the summed throughput, the median of the
// instances' p50 and the worst p99, and how the throughput scales against
// one instance: where adding instances stops adding throughput, the
// database (or the machine it shares with the clients) is saturated.
//
// It reads BENCH_DATABASE_URL (make scalebench starts a durable throwaway
// cluster), SCALE_SECONDS (default 8) and SCALE_INSTANCES (default
// "1,2,4").
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/pgtest/localpg"
)

const (
	goroutines = 8
	database   = "payonce_scale"
)

var body = []byte(`{"order_id":"ord_4f9c2a","status":"created","amount":"49.99","currency":"EUR"}`)

// result is what an instance reports.
type result struct {
	Cycles   int64
	P50, P99 time.Duration
	Errors   int64
}

func main() {
	var err error
	if os.Getenv("SCALE_CHILD") != "" {
		err = child()
	} else {
		err = run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(1)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func run() error {
	ctx := context.Background()
	base := os.Getenv("BENCH_DATABASE_URL")
	if base == "" {
		return errors.New("BENCH_DATABASE_URL is not set: run `make scalebench`, which starts a throwaway PostgreSQL")
	}
	seconds := envInt("SCALE_SECONDS", 8)
	var counts []int
	for _, f := range strings.Split(cmpOr(os.Getenv("SCALE_INSTANCES"), "1,2,4"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("SCALE_INSTANCES=%q: a list of positive counts", os.Getenv("SCALE_INSTANCES"))
		}
		counts = append(counts, n)
	}
	// A database of its own: PgBouncer drops the search_path a schema
	// would need.
	direct, err := freshDatabase(ctx, base)
	if err != nil {
		return err
	}
	bouncer, err := localpg.StartBouncer(ctx, direct)
	if err != nil {
		return err
	}
	defer bouncer.Stop()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("scalebench: Executor.Do claim+complete cycles on new keys, %d goroutines and 8 connections per instance, %ds per run\n",
		goroutines, seconds)
	type row struct {
		mode      string
		instances int
		tps       float64
		p50, p99  time.Duration
	}
	var rows []row
	// direct-exec is a direct connection configured as for a pooler (no
	// prepared statements): it separates the cost of the exec mode from
	// the cost of the extra hop.
	for _, mode := range []struct {
		name, url string
		pooler    bool
	}{{"direct", direct, false}, {"direct-exec", direct, true}, {"pgbouncer", bouncer.URL, true}} {
		for _, n := range counts {
			res, err := instances(exe, mode.url, mode.pooler, n, seconds)
			if err != nil {
				return fmt.Errorf("%s, %d instances: %w", mode.name, n, err)
			}
			var cycles, errs int64
			var p50s []time.Duration
			var p99 time.Duration
			for _, r := range res {
				cycles += r.Cycles
				errs += r.Errors
				p50s = append(p50s, r.P50)
				p99 = max(p99, r.P99)
			}
			if errs > 0 {
				return fmt.Errorf("%s, %d instances: %d cycles failed", mode.name, n, errs)
			}
			slices.Sort(p50s)
			r := row{mode.name, n, float64(cycles) / float64(seconds), p50s[len(p50s)/2], p99}
			rows = append(rows, r)
			fmt.Printf("scale %-11s instances=%d  %8.0f/s  p50 %7s  p99 %7s\n", r.mode, r.instances, r.tps,
				r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond))
		}
	}
	fmt.Println()
	fmt.Println("| mode | instances | throughput | vs 1 instance | p50 (median instance) | p99 (worst instance) |")
	fmt.Println("|---|---|---|---|---|---|")
	one := map[string]float64{}
	for _, r := range rows {
		if r.instances == counts[0] {
			one[r.mode] = r.tps / float64(r.instances)
		}
		fmt.Printf("| %s | %d | %.0f/s | %.2fx | %s | %s |\n", r.mode, r.instances, r.tps, r.tps/one[r.mode],
			r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond))
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// freshDatabase creates (again) the benchmark's database on base's server,
// migrates it, and returns its URL.
func freshDatabase(ctx context.Context, base string) (string, error) {
	admin, err := pgxpool.New(ctx, base)
	if err != nil {
		return "", err
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+database+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+database); err != nil {
		return "", err
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	u.Path = "/" + database
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return "", err
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		return "", err
	}
	return u.String(), nil
}

// instances runs n child processes against dbURL, starts them together
// and collects their results.
func instances(exe, dbURL string, pooler bool, n, seconds int) ([]result, error) {
	type proc struct {
		cmd   *exec.Cmd
		in    io.WriteCloser
		out   *bufio.Reader
		stdio io.ReadCloser
	}
	procs := make([]proc, n)
	for i := range procs {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "SCALE_CHILD=1", "SCALE_URL="+dbURL, "SCALE_SECONDS="+strconv.Itoa(seconds),
			"SCALE_POOLER="+strconv.FormatBool(pooler), "SCALE_INSTANCE="+strconv.Itoa(i))
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		procs[i] = proc{cmd: cmd, in: in, out: bufio.NewReader(out), stdio: out}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	}
	for i, p := range procs {
		if line, err := p.out.ReadString('\n'); err != nil || line != "ready\n" {
			return nil, fmt.Errorf("instance %d: %q %v", i, line, err)
		}
	}
	for _, p := range procs {
		if _, err := io.WriteString(p.in, "go\n"); err != nil {
			return nil, err
		}
	}
	res := make([]result, n)
	for i, p := range procs {
		if err := json.NewDecoder(p.out).Decode(&res[i]); err != nil {
			return nil, fmt.Errorf("instance %d: %w", i, err)
		}
	}
	return res, nil
}

// child is one instance: it connects, warms its pool, says "ready", waits
// for "go", runs cycles for SCALE_SECONDS and prints its result.
func child() error {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("SCALE_URL"))
	if err != nil {
		return err
	}
	cfg.MaxConns, cfg.MinConns = goroutines, goroutines
	pooler := os.Getenv("SCALE_POOLER") == "true"
	scfg := &pgstore.Config{}
	if pooler {
		pgstore.ForTransactionPooler(cfg)
		scfg.Pooler = pgstore.TransactionPooler
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return err
	}
	store, err := pgstore.New(pool, scfg)
	if err != nil {
		return err
	}
	exec, err := pgstore.NewExecutor(store, &idempotency.Config{LockTimeout: 10 * time.Second, Retention: time.Hour})
	if err != nil {
		return err
	}
	fp, err := idempotency.NewFingerprint().String("sku", "book-42").Sum()
	if err != nil {
		return err
	}
	fmt.Println("ready")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		return fmt.Errorf("waiting for go: %q %v", line, err)
	}
	seconds := envInt("SCALE_SECONDS", 8)
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	prefix := fmt.Sprintf("i%s-%d-", os.Getenv("SCALE_INSTANCE"), os.Getpid())
	var cycles, errs, seq atomic.Int64
	lat := make([][]time.Duration, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				key := prefix + strconv.FormatInt(seq.Add(1), 10)
				started := time.Now()
				_, err := exec.Do(ctx, idempotency.Request{Scope: "scale", Key: "scale_create_" + key, Fingerprint: fp},
					func(context.Context) (idempotency.Response, error) {
						return idempotency.Response{Code: 201, Body: body}, nil
					})
				if err != nil {
					errs.Add(1)
					fmt.Fprintln(os.Stderr, "cycle:", err)
					continue
				}
				cycles.Add(1)
				lat[g] = append(lat[g], time.Since(started))
			}
		}()
	}
	wg.Wait()
	all := slices.Concat(lat...)
	slices.Sort(all)
	r := result{Cycles: cycles.Load(), Errors: errs.Load()}
	if len(all) > 0 {
		r.P50, r.P99 = all[len(all)/2], all[len(all)*99/100]
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}
