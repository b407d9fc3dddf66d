package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/payonce/payonce/internal/cli"
	"github.com/payonce/payonce/lab/internal/keyscan"
	"github.com/payonce/payonce/providers"
	"github.com/payonce/payonce/providers/fakes"
	"github.com/payonce/payonce/reconcile"
)

// The torture run, by concern: this file runs it; torture_chaos.go
// Toxiproxy, the faults, the killer and the load balancer;
// torture_check.go the invariants and the figures.

type tortureConfig struct {
	intents, workers, customers int
	seed                        uint64
	faultGap, killGap           time.Duration
	dbURL                       string
}

// newTortureCmd is lab demo torture; dbURL is lab demo's --database-url.
func newTortureCmd(dbURL *string) *cobra.Command {
	var c tortureConfig
	cmd := &cobra.Command{
		Use:   "torture",
		Short: "Toxiproxy on every link, workers killed at random, two reconcilers, 10,000 intents (make torture)",
		Long: `The torture run (make torture; RELIABILITY.md has a full run's figures).

Several checkout worker processes (the service of examples/checkout) sit
behind a load balancer and charge through payonce's Stripe, Adyen and
PayPal adapters against the providers' fakes. Toxiproxy stands between the
workers and PostgreSQL and between the workers and each provider: on each
link, at seeded random instants, it adds latency, resets connections, stalls
them until a timeout closes them, throttles their bandwidth, slices their
packets or cuts answers short, each for a moment. A worker drawn at random
is killed with SIGKILL every --kill-gap or so and restarted. The fakes
also lose 5% of answers after committing and fail 3% before. N intents
(payments, spread over the three providers) are sent by clients that retry
with their key until a final answer and by clients that give up (early
timeouts; one payment in ten is sent once and abandoned); one succeeded
payment in ten is partly refunded. Two reconcilers run at once throughout.
Then the faults and the kills stop and the run waits until no intent is
open (time to converge).

It prints the faults injected by kind, the kills, what the reconcilers
repaired, and exits 1 unless:
  - no payment has more than one charge at its provider, no refund more
    than one refund (zero duplicate provider effects);
  - no intent is lost: every payment with an object at its provider is
    recorded, every recorded intent ends SUCCEEDED, DECLINED, FAILED or
    REQUIRES_ACTION (or NEEDS_REVIEW with a reason), a SUCCEEDED one has its
    charge at the provider, and no client was told another final outcome
    than the one recorded;
  - the ledger holds, per provider and currency, exactly the provider's net
    (charged minus refunded), and every currency's postings sum to zero;
  - no record the workers or the reconcilers logged (at every level), span
    they traced, error answered or text stored for humans holds a full
    idempotency key: only its short hash.

The seed draws the payments, the clients' behaviour, the faults' kinds,
instants and attributes, the kills and the fakes' faults: a run is
reproducible up to the scheduling of its goroutines and processes.

Without --database-url or DATABASE_URL it starts a throwaway PostgreSQL;
it works in its own schema, payonce_torture, dropped first.`,
		Example: `  make torture
  lab demo torture --intents 1000 --seed 7`,
		Args: cli.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			switch {
			case c.intents < 1:
				return cli.Usage("demo torture: --intents must be at least 1")
			case c.workers < 2:
				return cli.Usage("demo torture: --workers must be at least 2 (one is killed while the others serve)")
			case c.customers < 1:
				return cli.Usage("demo torture: --customers must be at least 1")
			case c.faultGap < 10*time.Millisecond:
				return cli.Usage("demo torture: --fault-gap must be at least 10ms")
			case c.killGap < 100*time.Millisecond:
				return cli.Usage("demo torture: --kill-gap must be at least 100ms")
			}
			c.dbURL = *dbURL
			if c.dbURL == "" {
				c.dbURL = os.Getenv("DATABASE_URL")
			}
			return torture(context.Background(), c)
		},
	}
	f := cmd.Flags()
	f.IntVar(&c.intents, "intents", 10000, "payments sent")
	f.IntVar(&c.workers, "workers", 3, "checkout worker processes")
	f.IntVar(&c.customers, "customers", 64, "customers paying concurrently")
	f.Uint64Var(&c.seed, "seed", 1, "seed of everything drawn")
	f.DurationVar(&c.faultGap, "fault-gap", time.Second, "mean gap between two faults on one link")
	f.DurationVar(&c.killGap, "kill-gap", 3*time.Second, "mean gap between two worker kills")
	return cmd
}

// tortureRun is the run's state shared by its phases and its checks.
type tortureRun struct {
	c       tortureConfig
	pays    []*payment
	st      stormStats
	faults  faultCounts
	kills   atomic.Int64
	workers []*worker
	fk      *fakes.Set
	pool    *pgxpool.Pool // direct, for the checks
	recs    []*tortureReconciler
	// unresolved: payments still without a final answer after the faults
	// stopped and their clients retried once more.
	unresolved int
	refunds    []*payment
	// leaks looks for full keys in what is logged, traced and answered
	// (storm_leaks.go); leakFigure and leakProblems are its verdict.
	leaks        *leakCheck
	leakFigure   string
	leakProblems []string
	chaosFor     time.Duration // clients' phase, faults on
	convergeIn   time.Duration // from the faults' end to no intent open
	elapsed      time.Duration
}

func torture(ctx context.Context, c tortureConfig) error {
	began := time.Now()
	dir, err := os.MkdirTemp("", "payonce-torture-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// The worker (with the race detector under the tests) and Toxiproxy
	// (without: not payonce's code) are built at once.
	var workerExe, toxiExe string
	var g errgroup.Group
	g.Go(func() error {
		exe, clean, err := buildWorker(ctx)
		if err == nil {
			workerExe = filepath.Join(dir, "worker")
			err = os.Rename(exe, workerExe)
			clean()
		}
		return err
	})
	g.Go(func() error {
		exe, clean, err := build(ctx, toxiproxyPackage, false)
		if err == nil {
			toxiExe = filepath.Join(dir, "toxiproxy")
			err = os.Rename(exe, toxiExe)
			clean()
		}
		return err
	})
	if err := g.Wait(); err != nil {
		return err
	}

	direct, pool, closeDB, err := demoDatabase(ctx, c.dbURL, "payonce_torture")
	if err != nil {
		return err
	}
	defer closeDB()
	keys := keyscan.NewSet()
	leaks, err := newLeakCheck(keys)
	if err != nil {
		return err
	}
	defer leaks.close()
	leaks.setDefault()

	toxiLog, err := os.Create(filepath.Join(dir, "toxiproxy.log"))
	if err != nil {
		return err
	}
	defer toxiLog.Close()
	tx, err := startToxiproxy(toxiExe, c.seed, toxiLog)
	if err != nil {
		return err
	}
	defer tx.stop()

	// The load balancer's address comes first: the fakes post their
	// webhooks to it.
	lbListener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	lbURL := "http://" + lbListener.Addr().String()
	r := &tortureRun{c: c, pool: pool, leaks: leaks}
	r.fk = fakes.Start(fakes.Options{Stripe: true, Adyen: true, PayPal: true, WebhookBase: lbURL,
		LoseAfter: 0.05, FailBefore: 0.03, Seed: int64(c.seed), WebhookRetryFor: 60 * time.Second})
	defer r.fk.Close()

	// Every link through Toxiproxy: PostgreSQL and each provider.
	viaProxy, err := proxiedURL(tx, "postgres", direct)
	if err != nil {
		return err
	}
	env := map[string]string{}
	for k, v := range r.fk.Env() {
		env[k] = v
		if strings.HasSuffix(k, "_API_BASE") {
			if env[k], err = proxiedURL(tx, strings.ToLower(strings.TrimSuffix(k, "_API_BASE")), v); err != nil {
				return err
			}
		}
	}

	// The workers' own reconcilers are off: the two below are the run's,
	// whose figures it reports.
	workerEnv := appendEnv([]string{"DATABASE_URL=" + withMaxConns(viaProxy, 12), "PAYONCE_DEMO_LOSE_WEBHOOKS=0.1",
		"CHECKOUT_RECONCILE_SPEC=off", leaks.workerEnv()}, env)
	for i := range c.workers {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		logs, err := os.Create(filepath.Join(dir, fmt.Sprintf("worker-%d.log", i)))
		if err != nil {
			return err
		}
		defer logs.Close()
		w := &worker{exe: workerExe, addr: addr, env: workerEnv, stderr: logs}
		if err := w.start(); err != nil {
			return err
		}
		defer w.stop()
		r.workers = append(r.workers, w)
	}
	lb := &http.Server{Handler: balancer(r.workers, c.seed), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = lb.Serve(lbListener) }()
	defer lb.Close()

	// Two reconcilers, each its own instance with its own connections,
	// through the same faulty links.
	for _, name := range []string{"torture-a", "torture-b"} {
		rec, err := newTortureReconciler(ctx, name, viaProxy, env, leaks)
		if err != nil {
			return err
		}
		defer rec.close()
		r.recs = append(r.recs, rec)
	}

	rng := rand.New(rand.NewPCG(c.seed, c.seed^0x70c7))
	r.pays = makePayments(stormConfig{payments: c.intents, customers: c.customers}, rng, r.fk.Providers())
	for _, p := range r.pays {
		keys.Add(p.clientKeys()...)
	}
	fmt.Printf("torture: %d intents by %d customers through %s; %d workers behind %s; Toxiproxy on every link; "+
		"a fault every %s per link, a kill every %s (seed %d)\n",
		len(r.pays), c.customers, strings.Join(r.fk.Providers(), ", "), c.workers, lbURL, c.faultGap, c.killGap, c.seed)

	// Phase 1: the clients, with the faults, the kills and both
	// reconcilers on.
	chaosCtx, stopChaos := context.WithCancel(ctx)
	defer stopChaos()
	chaosDone := make(chan struct{})
	go func() { defer close(chaosDone); tx.chaos(chaosCtx, c.seed, c.faultGap, &r.faults) }()
	killErr := make(chan error, 1)
	go func() { killErr <- killer(chaosCtx, c.seed, c.killGap, r.workers, &r.kills) }()
	recCtx, stopRecs := context.WithCancel(ctx)
	defer stopRecs()
	var recs sync.WaitGroup
	for _, rec := range r.recs {
		recs.Add(1)
		go func() { defer recs.Done(); rec.loop(recCtx) }()
	}
	stopBar := progress(&r.st, int64(len(r.pays)))
	hc := &http.Client{Transport: leaks.transport(&http.Transport{MaxIdleConnsPerHost: 256})}
	defer hc.CloseIdleConnections()
	chaosBegan := time.Now()
	r.clients(hc, lbURL, rng)
	stopChaos()
	<-chaosDone // the chaos has removed its toxics (the reconcilers go on)
	if err := <-killErr; err != nil {
		return err
	}
	stopBar()
	r.chaosFor = time.Since(chaosBegan)

	// Phase 2: the faults are over. The clients still without an answer
	// retry; the webhooks land; the reconcilers run until nothing is open.
	calm := time.Now()
	for _, p := range r.pays {
		if !p.abandoned && p.final == 0 {
			if !resolve(hc, lbURL, p, &r.st) {
				r.unresolved++
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	err = r.fk.WaitDeliveries(wctx)
	cancel()
	if err != nil {
		return fmt.Errorf("waiting for the providers' webhooks: %w", err)
	}
	open, err := r.converge(ctx, 3*time.Minute)
	if err != nil {
		return err
	}
	r.convergeIn = time.Since(calm)
	stopRecs()
	recs.Wait()
	// The workers stop (and write their last records) before their files
	// are read.
	for _, w := range r.workers {
		w.stop()
	}
	if r.leakFigure, r.leakProblems, err = leaks.finish(ctx, pool); err != nil {
		return err
	}
	r.elapsed = time.Since(began)
	return r.check(ctx, open)
}

// clients runs the customers: each sends its payments one after another,
// impatiently (double clicks, early timeouts), then, unless it abandons
// the payment, retries with its key until a final answer; one succeeded
// payment in ten is then partly refunded.
func (r *tortureRun) clients(hc *http.Client, base string, rng *rand.Rand) {
	byCustomer := map[string][]int{}
	var order []string
	for i, p := range r.pays {
		if _, ok := byCustomer[p.customer]; !ok {
			order = append(order, p.customer)
		}
		byCustomer[p.customer] = append(byCustomer[p.customer], i)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, cust := range order {
		seed := rng.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			cr := rand.New(rand.NewPCG(seed, uint64(len(cust))))
			for _, i := range byCustomer[cust] {
				p := r.pays[i]
				r.st.started.Add(1)
				impatient(hc, base, p, cr, &r.st)
				if p.abandoned {
					continue
				}
				if resolve(hc, base, p, &r.st) && p.status == "SUCCEEDED" && i%10 == 3 {
					if refund(hc, base, p) {
						mu.Lock()
						r.refunds = append(r.refunds, p)
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
}

// converge waits until no intent is PENDING or UNKNOWN, for at most
// limit, and returns how many still are.
func (r *tortureRun) converge(ctx context.Context, limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	for {
		var open int
		err := r.pool.QueryRow(ctx, `SELECT count(*) FROM payment_intents WHERE status IN ('PENDING', 'UNKNOWN')`).Scan(&open)
		if err != nil {
			return 0, err
		}
		if open == 0 || time.Now().After(deadline) {
			return open, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// proxiedURL creates a Toxiproxy proxy named name to raw's host and
// returns raw with its host replaced by the proxy's.
func proxiedURL(t *toxi, name, raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("torture: %s's address %q is not a URL with a host", name, raw)
	}
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "postgres" || u.Scheme == "postgresql" {
			port = "5432"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	listen, err := t.proxy(name, host)
	if err != nil {
		return "", err
	}
	u.Host = listen
	return u.String(), nil
}

// tortureReconciler is one reconciler instance and what it did.
type tortureReconciler struct {
	name                                                  string
	pool                                                  *pgxpool.Pool
	r                                                     *reconcile.Reconciler
	leaks                                                 *leakCheck
	runs, failedRuns, repaired, failedWithProof, reviewed int
	examined                                              int
	lastErr                                               string
}

func newTortureReconciler(ctx context.Context, name, dbURL string, env map[string]string, leaks *leakCheck) (*tortureReconciler, error) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	cfg, err := providers.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		pool.Close()
		return nil, err
	}
	cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	cfg.Logger, cfg.TracerProvider = leaks.logger, leaks.tp
	client, err := providers.NewClient(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	// Grace longer than the workers' 2s lease: an intent a worker still
	// holds is the worker's; a short ClaimTTL, so that a run cut by a
	// fault releases its intents to the other instance soon.
	r, err := reconcile.New(pool, client, &reconcile.Config{Instance: name, Grace: 3 * time.Second, VoidAfter: time.Second,
		Schedule: []time.Duration{300 * time.Millisecond}, MaxChecks: 40, Batch: 500, ClaimTTL: 10 * time.Second,
		Logger: leaks.logger, TracerProvider: leaks.tp})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &tortureReconciler{name: name, pool: pool, r: r, leaks: leaks}, nil
}

// loop runs the reconciler every 300ms until ctx ends. A run cut by a
// fault is counted and the next one goes on.
func (t *tortureReconciler) loop(ctx context.Context) {
	for sleepCtx(ctx, 300*time.Millisecond) {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		rep, err := t.r.RunOnce(rctx)
		cancel()
		t.leaks.report(t.name, rep, err)
		t.runs++
		if err != nil {
			if ctx.Err() == nil {
				t.failedRuns++
				t.lastErr = err.Error()
			}
		}
		if rep != nil {
			t.examined += rep.Examined
			t.repaired += rep.Repaired
			t.failedWithProof += rep.FailedWithProof
			t.reviewed += rep.NeedsReview
		}
	}
}

func (t *tortureReconciler) close() { t.pool.Close() }
