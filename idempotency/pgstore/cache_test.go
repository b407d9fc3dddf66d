package pgstore_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
)

// cacheAnswer is one answer a cache child got, on stdout as a JSON line.
type cacheAnswer struct {
	Key, Body  string
	Replayed   bool
	Sent, Recv int64 // this process's wall clock, Unix nanoseconds
}

// cacheChild replays a few keys from 4 goroutines through an executor
// with a replay cache, for PGSTORE_RUN, with records that expire after
// PGSTORE_RETENTION; each execution writes an effect. It prints every
// answer, then a line {"CacheHits": n}.
func cacheChild(ctx context.Context, pool *pgxpool.Pool, store *pgstore.Store, pid int) error {
	keys, _ := strconv.Atoi(os.Getenv("PGSTORE_KEYS"))
	run, _ := time.ParseDuration(os.Getenv("PGSTORE_RUN"))
	retention, _ := time.ParseDuration(os.Getenv("PGSTORE_RETENTION"))
	reader := sdkmetric.NewManualReader()
	exec, err := pgstore.NewExecutor(store, &idempotency.Config{LockTimeout: time.Second, Retention: retention,
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		ReplayCache:   &idempotency.ReplayCache{Margin: 100 * time.Millisecond}})
	if err != nil {
		return err
	}
	defer exec.Close()
	var (
		mu   sync.Mutex
		out  = json.NewEncoder(os.Stdout)
		seq  int
		errs []error
		wg   sync.WaitGroup
	)
	deadline := time.Now().Add(run)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(pid), uint64(w)))
			for time.Now().Before(deadline) {
				// Hot keys are renewed by the first request after their
				// expiry; now and then a cold one, which expires unread
				// and is pruned.
				k := rng.IntN(keys)
				if rng.IntN(200) == 0 {
					k = 100 + rng.IntN(20)
				}
				r := childRequest(fmt.Sprintf("c%d", k))
				sent := time.Now()
				res, err := exec.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) {
					mu.Lock()
					seq++
					body := fmt.Sprintf("%s by %d #%d", r.Key, pid, seq)
					mu.Unlock()
					if _, err := pool.Exec(ctx, `INSERT INTO effects (key, pid) VALUES ($1, $2)`, r.Key, pid); err != nil {
						return idempotency.Response{}, err
					}
					return idempotency.Response{Code: 201, Body: []byte(body)}, nil
				})
				recv := time.Now()
				mu.Lock()
				switch {
				case errors.Is(err, idempotency.ErrInProgress):
				case err != nil:
					errs = append(errs, err)
				default:
					_ = out.Encode(cacheAnswer{Key: r.Key, Body: string(res.Response.Body), Replayed: res.Replayed,
						Sent: sent.UnixNano(), Recv: recv.UnixNano()})
				}
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			}
		}(w)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return err
	}
	var hits int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == idempotency.MetricReplayCacheHits {
				for _, dp := range sum.DataPoints {
					hits += dp.Value
				}
			}
		}
	}
	return out.Encode(map[string]int64{"CacheHits": hits})
}

// TestReplayCacheAcrossProcesses: three processes replay the same keys
// through executors with a replay cache while their records expire and
// are renewed (a new execution after expiry), the parent prunes every
// 100ms, and an operator releases a record whose holder was killed.
// Every answer any process got, from its cache or from the store, is a
// generation of the record that the store held when the request was sent:
// completed before the answer arrived and not expired when it was sent.
// Each generation executed once.
func TestReplayCacheAcrossProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, effectsDDL+`;
		CREATE TABLE generations (key TEXT NOT NULL, body TEXT NOT NULL, completed_at TIMESTAMPTZ NOT NULL, expires_at TIMESTAMPTZ NOT NULL);
		CREATE FUNCTION keep_generation() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO generations VALUES (NEW.idempotency_key, convert_from(NEW.response_raw, 'UTF8'), NEW.completed_at, NEW.expires_at);
			RETURN NEW;
		END $$;
		CREATE TRIGGER keep_generation AFTER INSERT OR UPDATE ON idempotency_store
			FOR EACH ROW WHEN (NEW.status = 'COMPLETED') EXECUTE FUNCTION keep_generation()`)
	if err != nil {
		t.Fatal(err)
	}

	// A holder of c4 is killed mid-action: its record stays PROCESSING
	// under a live 5s lease until the operator releases it.
	hang := startChild(t, "hang", b.url, "PGSTORE_KEY=c4")
	hout, err := hang.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := hang.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(hout).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("hang child: %q %v", line, err)
	}
	_ = hang.Process.Signal(syscall.SIGKILL)
	_ = hang.Wait()
	stuck := childRequest("c4")

	const keys, children = 6, 3
	type childOut struct {
		answers []cacheAnswer
		hits    int64
		err     error
	}
	outs := make([]childOut, children)
	var wg sync.WaitGroup
	for i := range children {
		cmd := startChild(t, "cache", b.url, "PGSTORE_KEYS="+strconv.Itoa(keys), "PGSTORE_RUN=5s", "PGSTORE_RETENTION=1200ms")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var a cacheAnswer
				if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
					outs[i].err = err
					continue
				}
				if a.Key == "" {
					var h map[string]int64
					_ = json.Unmarshal(sc.Bytes(), &h)
					outs[i].hits = h["CacheHits"]
					continue
				}
				outs[i].answers = append(outs[i].answers, a)
			}
			if err := cmd.Wait(); err != nil {
				outs[i].err = errors.Join(outs[i].err, err)
			}
		}()
	}

	// The parent: a pruner every 100ms, and after a second the operator
	// releases the killed holder's record (forced: its lease is live).
	done := make(chan struct{})
	pruned := 0
	go func() {
		defer close(done)
		released := false
		for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(100 * time.Millisecond) {
			n, err := b.store.Prune(ctx, 1000)
			if err != nil {
				t.Errorf("prune: %v", err)
				return
			}
			pruned += n
			if !released && time.Since(start) > time.Second {
				l, err := b.store.Lease(ctx, stuck.Scope, stuck.Key)
				if err != nil {
					t.Errorf("lease: %v", err)
					return
				}
				if _, err := b.store.ReleaseStuck(ctx, pgstore.ReleaseStuckParams{Scope: stuck.Scope, Key: stuck.Key,
					LockVersion: l.LockVersion, Force: true}, nil); err != nil {
					t.Errorf("release: %v", err)
					return
				}
				released = true
			}
		}
	}()
	wg.Wait()
	<-done

	type generation struct {
		key                  string
		completed, expiresAt time.Time
	}
	gens := map[string]generation{}
	perKey := map[string]int{}
	rows, err := b.pool.Query(ctx, `SELECT key, body, completed_at, expires_at FROM generations`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var body string
		var g generation
		if err := rows.Scan(&g.key, &body, &g.completed, &g.expiresAt); err != nil {
			t.Fatal(err)
		}
		if _, dup := gens[body]; dup {
			t.Fatalf("the body %q was stored twice", body)
		}
		gens[body] = g
		perKey[g.key]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var effects map[string]int
	effects = map[string]int{}
	rows, err = b.pool.Query(ctx, `SELECT key, count(*) FROM effects GROUP BY key`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		effects[k] = n
	}
	for k, n := range perKey {
		if effects[k] != n {
			t.Errorf("%s: %d effects for %d generations", k, effects[k], n)
		}
	}
	if perKey[stuck.Key] == 0 {
		t.Errorf("the released record was never executed again")
	}

	var answers, replays int
	var hits int64
	for i, o := range outs {
		if o.err != nil {
			t.Fatalf("child %d: %v", i, o.err)
		}
		hits += o.hits
		for _, a := range o.answers {
			answers++
			if a.Replayed {
				replays++
			}
			g, ok := gens[a.Body]
			switch {
			case !ok || g.key != a.Key:
				t.Fatalf("child %d got %q for %s: no such generation", i, a.Body, a.Key)
			case time.Unix(0, a.Sent).After(g.expiresAt) || time.Unix(0, a.Sent).Equal(g.expiresAt):
				t.Fatalf("child %d got %q for %s, sent %v after it expired at %v", i, a.Body, a.Key,
					time.Unix(0, a.Sent).Sub(g.expiresAt), g.expiresAt)
			case time.Unix(0, a.Recv).Before(g.completed):
				t.Fatalf("child %d got %q for %s before it completed", i, a.Body, a.Key)
			}
		}
	}
	// The run exercised what it claims to: renewals, prunes, cache hits.
	total := 0
	for _, n := range perKey {
		total += n
	}
	t.Logf("%d answers (%d replays, %d from caches), %d generations of %d keys, %d pruned", answers, replays, hits, total, len(perKey), pruned)
	if hits < int64(answers)/4 || total < 2*keys || pruned == 0 {
		t.Fatalf("the run did not exercise the cache: %d answers, %d cache hits, %d generations, %d pruned", answers, hits, total, pruned)
	}
}
