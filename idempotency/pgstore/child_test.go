package pgstore_test

// Tests across OS processes: the test binary re-runs itself as a child
// (PGSTORE_CHILD names the role), so that the contenders share nothing
// but the database.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
)

// childSummary is what a contending child reports on stdout.
type childSummary struct {
	Executed, Replayed, InProgress, Errors int
	Bodies                                 map[string]string // key -> body seen (executed or replayed)
}

const effectsDDL = `CREATE TABLE effects (key TEXT NOT NULL, pid INT NOT NULL, at TIMESTAMPTZ NOT NULL DEFAULT now())`

// runChild runs the child role named by PGSTORE_CHILD and reports whether
// this process was a child.
func runChild() bool {
	role := os.Getenv("PGSTORE_CHILD")
	if role == "" {
		return false
	}
	if err := child(role); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

func child(role string) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("PGSTORE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	skew, _ := time.ParseDuration(os.Getenv("PGSTORE_SKEW"))
	lock, _ := time.ParseDuration(os.Getenv("PGSTORE_LOCK"))
	if lock == 0 {
		lock = 5 * time.Second
	}
	strategy, _ := strconv.Atoi(os.Getenv("PGSTORE_STRATEGY"))
	store, err := pgstore.New(pool, &pgstore.Config{ClaimStrategy: pgstore.ClaimStrategy(strategy),
		NoGroupCommit: os.Getenv("PGSTORE_GROUP") == "", Instance: os.Getenv("PGSTORE_INSTANCE")})
	if err != nil {
		return err
	}
	exec, err := pgstore.NewExecutor(store, &idempotency.Config{
		LockTimeout: lock,
		// The application clock is wrong by skew; nothing may depend on it.
		Clock: func() time.Time { return time.Now().Add(skew) },
	})
	if err != nil {
		return err
	}
	pid := os.Getpid()
	switch role {
	case "contend":
		keys, _ := strconv.Atoi(os.Getenv("PGSTORE_KEYS"))
		workers, _ := strconv.Atoi(os.Getenv("PGSTORE_WORKERS"))
		s := contend(ctx, exec, pool, keys, workers, pid)
		return json.NewEncoder(os.Stdout).Encode(s)
	case "cache":
		return cacheChild(ctx, pool, store, pid)
	case "hold", "restart", "stall":
		return recoveryChild(ctx, role, exec, store)
	case "hang", "hang-tx":
		r := childRequest(os.Getenv("PGSTORE_KEY"))
		if role == "hang" {
			_, err = exec.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) {
				fmt.Println("started")
				time.Sleep(time.Hour) // killed here, before its effect
				return idempotency.Response{}, nil
			})
		} else {
			_, err = exec.DoTx(ctx, r, func(ctx context.Context, tx pgx.Tx) (idempotency.Response, error) {
				if _, err := tx.Exec(ctx, `INSERT INTO effects (key, pid) VALUES ($1, $2)`, r.Key, pid); err != nil {
					return idempotency.Response{}, err
				}
				fmt.Println("started")
				time.Sleep(time.Hour) // killed here, after its effect, before the commit
				return idempotency.Response{}, nil
			})
		}
		return err
	}
	return fmt.Errorf("unknown role %q", role)
}

func childRequest(intent string) idempotency.Request {
	k, err := idempotency.ComposeKey("usr_proc", "charge", intent)
	if err != nil {
		panic(err)
	}
	f, err := idempotency.NewFingerprint().String("intent", intent).Decimal("amount", "10.00").Sum()
	if err != nil {
		panic(err)
	}
	return idempotency.Request{Scope: "usr_proc", Key: k, Fingerprint: f}
}

// contend runs workers goroutines that each try every key once, in an
// order of their own; the action records an effect row outside the
// idempotency record (a non-transactional side effect).
func contend(ctx context.Context, exec *pgstore.Executor, pool *pgxpool.Pool, keys, workers, pid int) childSummary {
	var mu sync.Mutex
	s := childSummary{Bodies: map[string]string{}}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < keys; i++ {
				k := (i + w) % keys
				r := childRequest(fmt.Sprintf("k%d", k))
				res, err := exec.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) {
					if _, err := pool.Exec(ctx, `INSERT INTO effects (key, pid) VALUES ($1, $2)`, r.Key, pid); err != nil {
						return idempotency.Response{}, err
					}
					time.Sleep(20 * time.Millisecond)
					return idempotency.Response{Code: 201, Body: []byte(fmt.Sprintf("%s by %d", r.Key, pid))}, nil
				})
				mu.Lock()
				switch {
				case errors.Is(err, idempotency.ErrInProgress):
					s.InProgress++
				case err != nil:
					s.Errors++
				case res.Replayed:
					s.Replayed++
				default:
					s.Executed++
				}
				if err == nil {
					if prev, ok := s.Bodies[r.Key]; ok && prev != string(res.Response.Body) {
						s.Errors++ // two different answers for one key
					}
					s.Bodies[r.Key] = string(res.Response.Body)
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	return s
}

func startChild(t *testing.T, role, url string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PGSTORE_CHILD="+role, "PGSTORE_URL="+url)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	return cmd
}

// TestProcessesOneExecution: three OS processes, each with 16 goroutines,
// each with its own claim strategy, and each with an application clock
// skewed differently (none, +1h, -1h),
// contend for the same 8 keys. Every key executes exactly once, every
// answer for a key is the same, and the outcome is the same as with no
// skew at all: the database clock decides.
func TestProcessesOneExecution(t *testing.T) {
	t.Parallel()
	for _, skews := range [][]string{{"0s", "0s", "0s"}, {"0s", "1h", "-1h"}} {
		t.Run(fmt.Sprint(skews), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			if _, err := b.pool.Exec(ctx, effectsDDL); err != nil {
				t.Fatal(err)
			}
			const keys, workers = 8, 16
			outs := make([][]byte, len(skews))
			var wg sync.WaitGroup
			for i, skew := range skews {
				// Children 0 and 2 gather their claims and completions
				// into group statements (Config.GroupCommit).
				c := startChild(t, "contend", b.url, "PGSTORE_SKEW="+skew, "PGSTORE_STRATEGY="+strconv.Itoa(i%3),
					"PGSTORE_GROUP="+map[bool]string{true: "1"}[i%2 == 0],
					"PGSTORE_KEYS="+strconv.Itoa(keys), "PGSTORE_WORKERS="+strconv.Itoa(workers))
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					out, err := c.Output()
					if err != nil {
						t.Errorf("child %d: %v", i, err)
					}
					outs[i] = out
				}(i)
			}
			wg.Wait()
			var total childSummary
			bodies := map[string]string{}
			for i, out := range outs {
				var s childSummary
				if err := json.Unmarshal(out, &s); err != nil {
					t.Fatalf("child %d output %q: %v", i, out, err)
				}
				total.Executed += s.Executed
				total.Replayed += s.Replayed
				total.InProgress += s.InProgress
				total.Errors += s.Errors
				for k, v := range s.Bodies {
					if prev, ok := bodies[k]; ok && prev != v {
						t.Errorf("key %s answered %q and %q", k, prev, v)
					}
					bodies[k] = v
				}
			}
			if total.Errors != 0 || total.Executed != keys {
				t.Fatalf("summary %+v: want %d executions and no errors", total, keys)
			}
			if n := total.Executed + total.Replayed + total.InProgress; n != len(skews)*keys*workers {
				t.Fatalf("%d answers, want %d", n, len(skews)*keys*workers)
			}
			rows, err := b.pool.Query(ctx, `SELECT key, count(*) FROM effects GROUP BY key`)
			if err != nil {
				t.Fatal(err)
			}
			effects, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
				Key string
				N   int
			}])
			if err != nil {
				t.Fatal(err)
			}
			if len(effects) != keys {
				t.Fatalf("%d keys have effects, want %d", len(effects), keys)
			}
			for _, e := range effects {
				if e.N != 1 {
					t.Errorf("key %s: %d effects, want 1", e.Key, e.N)
				}
			}
			var notDone int
			if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_store WHERE status <> 'COMPLETED'`).Scan(&notDone); err != nil || notDone != 0 {
				t.Fatalf("%d records not completed (%v)", notDone, err)
			}
		})
	}
}

// TestConnectionsOneExecution: 64 goroutines on 64 separate connections
// (not a shared pool) claim one key at the same instant.
func TestConnectionsOneExecution(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const n = 64
	r := childRequest("conns")
	var executed, replayed, inProgress atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		cfg, err := pgxpool.ParseConfig(b.url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 1
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := p.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		e, err := pgstore.NewExecutor(mustStore(t, p, nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := e.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) {
				executed.Add(1)
				time.Sleep(30 * time.Millisecond)
				return idempotency.Response{Code: 200, Body: []byte("one")}, nil
			})
			switch {
			case errors.Is(err, idempotency.ErrInProgress):
				inProgress.Add(1)
			case err != nil:
				t.Errorf("Do: %v", err)
			case res.Replayed:
				replayed.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if executed.Load() != 1 || replayed.Load()+inProgress.Load() != n-1 {
		t.Fatalf("executed %d, replayed %d, in progress %d", executed.Load(), replayed.Load(), inProgress.Load())
	}
}

// TestKilledProcess: a process is killed (SIGKILL) in the middle of an
// action. With Do, its lease outlives it: a retry is "in progress" until
// the lock timeout, then reclaims and runs exactly once. With DoTx, its
// uncommitted effect and claim vanish with it, and a retry runs at once.
func TestKilledProcess(t *testing.T) {
	t.Parallel()
	for _, role := range []string{"hang", "hang-tx"} {
		t.Run(role, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			if _, err := b.pool.Exec(ctx, effectsDDL); err != nil {
				t.Fatal(err)
			}
			r := childRequest("killed")
			c := startChild(t, role, b.url, "PGSTORE_KEY=killed", "PGSTORE_LOCK=2s")
			out, err := c.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || line != "started\n" {
				t.Fatalf("child: %q %v", line, err)
			}
			_ = c.Process.Signal(syscall.SIGKILL)
			_ = c.Wait()

			e, err := pgstore.NewExecutor(b.store, &idempotency.Config{LockTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			action := func(ctx context.Context, tx pgx.Tx) (idempotency.Response, error) {
				_, err := tx.Exec(ctx, `INSERT INTO effects (key, pid) VALUES ($1, $2)`, r.Key, os.Getpid())
				return idempotency.Response{Code: 201, Body: []byte("retried")}, err
			}
			sawInProgress := false
			deadline := time.Now().Add(2 * time.Minute)
			var res idempotency.Result
			for {
				res, err = e.DoTx(ctx, r, action)
				if !errors.Is(err, idempotency.ErrInProgress) {
					break
				}
				sawInProgress = true
				if time.Now().After(deadline) {
					t.Fatal("the killed holder's lease never ran out")
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil || res.Replayed {
				t.Fatalf("retry: %+v %v", res, err)
			}
			if role == "hang" && (!sawInProgress || !res.Reclaimed) {
				t.Fatalf("Do holder killed: in progress seen=%v reclaimed=%v; want both", sawInProgress, res.Reclaimed)
			}
			if role == "hang-tx" && (sawInProgress || res.Reclaimed) {
				t.Fatalf("DoTx holder killed: in progress seen=%v reclaimed=%v; want neither", sawInProgress, res.Reclaimed)
			}
			var n int
			if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM effects WHERE key = $1`, r.Key).Scan(&n); err != nil || n != 1 {
				t.Fatalf("%d effects (%v), want exactly 1", n, err)
			}
			res, err = e.DoTx(ctx, r, action)
			if err != nil || !res.Replayed || string(res.Response.Body) != "retried" {
				t.Fatalf("later retry: %+v %v", res, err)
			}
		})
	}
}
