package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/payonce/payonce/internal/cli"
	"github.com/payonce/payonce/lab/internal/keyscan"
	"github.com/payonce/payonce/pgtest/localpg"
	"github.com/payonce/payonce/providers/fakes"
)

// The demo's storm, by concern: this file runs its phases; storm_worker.go
// the checkout worker process it kills and restarts; storm_clients.go the
// impatient clients; storm_sagas.go the checkouts (sagas) and their
// checks; storm_reconcile.go the reconciler's runs; storm_summary.go the
// progress bar, the summary and its checks.

// newDemoCmd is lab demo (the checkout storm) and its subcommands, which
// share --database-url.
func newDemoCmd() *cobra.Command {
	var (
		c      stormConfig
		noKill bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "a checkout storm through payonce's payments API against the providers' fakes, then checkouts as sagas",
		Long: `A checkout storm. The checkout example service (examples/checkout) runs as a
worker process on a throwaway PostgreSQL, charging through payonce's Stripe,
Adyen and PayPal adapters against their fakes, which lose 10% of responses
after committing the charge and fail 5% of requests before. N payments by
customers are each sent 2 to 5 times by impatient clients: double clicks,
concurrent retries, clients that give up early. Midway the worker is killed
with SIGKILL and restarted. Then every payment is retried with its key until
it resolves, and some are partly refunded.

Then checkouts (--checkouts, 120 by default), each a saga of the service's
POST /checkout: reserve stock, charge, record the order. The skus are
scarce (fewer units than checkouts), some cards decline, and one sku's
orders are refused after the charge, so that its sagas refund. Customers
double-click and give up early, the worker is killed once more midway, and
every checkout is retried with its key until it is COMPLETED or
ROLLED_BACK, or, given up by its client, finished by the worker's recovery
job. Finally the reconciler settles the payments abandoned after one send.

It prints a summary and exits 1 if any payment has more than one
PaymentIntent at the provider, a succeeded payment has none, two answers
for one key disagree, the ledger differs from the provider's totals, a
checkout does not end COMPLETED or ROLLED_BACK (or NEEDS_REVIEW with a
reason), a sku is ever sold beyond its stock, a completed checkout has
other than one charge or a rolled-back one keeps money at the provider, or
a full idempotency key is in any record the worker or the demo logged (at
every level), span they traced, or error text answered or stored: only
its short hash may be.

Without --database-url or DATABASE_URL it starts a throwaway PostgreSQL;
it works in its own schema, payonce_storm, dropped first.`,
		Example: `  make demo
  lab demo --payments 2000 --customers 100 --checkouts 400 --seed 7`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cli.UnknownSubcommand(cmd, args[0])
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error {
			if c.payments < 1 || c.customers < 1 {
				return cli.Usage("demo: --payments and --customers must be at least 1")
			}
			if c.checkouts < 0 {
				return cli.Usage("demo: --checkouts must be at least 0")
			}
			c.kill = !noKill
			if c.dbURL == "" {
				c.dbURL = os.Getenv("DATABASE_URL")
			}
			return storm(context.Background(), c)
		},
	}
	f := cmd.Flags()
	f.IntVar(&c.payments, "payments", 500, "payments in the storm")
	f.IntVar(&c.customers, "customers", 50, "customers paying concurrently")
	f.IntVar(&c.checkouts, "checkouts", 120, "checkouts (sagas) after the payments; 0: none")
	f.Uint64Var(&c.seed, "seed", 1, "seed of the amounts, payment methods, retries and the provider's faults")
	f.BoolVar(&noKill, "no-kill", false, "do not kill the worker mid-storm")
	// Every demo's database; each works in a schema of its own.
	cmd.PersistentFlags().StringVar(&c.dbURL, "database-url", "", "PostgreSQL URL (default $DATABASE_URL; without either, a throwaway PostgreSQL)")
	_ = cmd.RegisterFlagCompletionFunc("database-url", cobra.NoFileCompletions)
	cmd.AddCommand(newCoreDemoCmd(&c.dbURL), newWorkerDemoCmd(&c.dbURL), newTortureCmd(&c.dbURL))
	return cmd
}

type stormConfig struct {
	// checkouts: the saga phase's checkouts; 0 skips it.
	payments, customers, checkouts int
	seed                           uint64
	kill                           bool
	dbURL                          string
}

type stormStats struct {
	requests, connErrors, gaveUp atomic.Int64
	started, resolved            atomic.Int64
}

func storm(ctx context.Context, c stormConfig) error {
	// The worker is built first: the wall time is the storm's.
	fmt.Println("building the checkout worker (examples/checkout's service as a process of its own)...")
	exe, clean, err := buildWorker(ctx)
	if err != nil {
		return err
	}
	defer clean()
	began := time.Now()
	rng := rand.New(rand.NewPCG(c.seed, c.seed^0x5eed))
	kept := c.dbURL != "" // the user's database: the demo's schema stays for inspection
	u, pool, closeDB, err := demoDatabase(ctx, c.dbURL, "payonce_storm")
	if err != nil {
		return err
	}
	defer closeDB()
	// Every key the clients send is looked for in everything logged,
	// traced and answered (storm_leaks.go).
	keys := keyscan.NewSet()
	leaks, err := newLeakCheck(keys)
	if err != nil {
		return err
	}
	defer leaks.close()
	leaks.setDefault()

	addr, err := freeAddr()
	if err != nil {
		return err
	}
	base := "http://" + addr

	// The providers: each loses 10% of responses after committing (a
	// reset once the payment exists) and fails 5% of requests before
	// doing anything; their webhooks go to the worker, retried (as the
	// providers retry them for days) long enough to outlast its restart.
	fk := fakes.Start(fakes.Options{Stripe: true, Adyen: true, PayPal: true, WebhookBase: base,
		LoseAfter: 0.10, FailBefore: 0.05, Seed: int64(c.seed), WebhookRetryFor: 20 * time.Second})
	defer fk.Close()
	env := []string{"DATABASE_URL=" + withMaxConns(u, 24), "PAYONCE_DEMO_LOSE_WEBHOOKS=0.3",
		// The checkout sagas' recovery finishes what a killed worker or a
		// client that gave up left; one sku's orders are refused after
		// the charge, so that its sagas refund (storm_sagas.go).
		"CHECKOUT_RECOVER_SPEC=@every 1s", "CHECKOUT_LOCK_TIMEOUT=2s", "PAYONCE_CHECKOUT_FAIL_CONFIRM_SKU=" + recalledSKU,
		// The payments are settled by the demo's own reconciler (phase 4),
		// whose figures the summary reports, not by the worker's.
		"CHECKOUT_RECONCILE_SPEC=off", leaks.workerEnv()}
	w := &worker{exe: exe, addr: addr, env: appendEnv(env, fk.Env())}
	if err := w.start(); err != nil {
		return err
	}
	defer w.stop()

	pays := makePayments(c, rng, fk.Providers())
	for _, p := range pays {
		keys.Add(p.clientKeys()...)
	}
	fmt.Printf("storm: %d payments by %d customers through %s, to the checkout worker on %s (seed %d)\n",
		len(pays), c.customers, strings.Join(fk.Providers(), ", "), base, c.seed)

	var st stormStats
	stopBar := progress(&st, int64(len(pays)))
	hc := &http.Client{Transport: leaks.transport(&http.Transport{MaxIdleConnsPerHost: 256})}
	defer hc.CloseIdleConnections()

	// Phase 1: the storm, with the worker killed once midway.
	byCustomer := map[string][]*payment{}
	for _, p := range pays {
		byCustomer[p.customer] = append(byCustomer[p.customer], p)
	}
	killed := make(chan error, 1)
	if c.kill {
		go func() {
			for st.started.Load() < int64(len(pays))*2/5 {
				time.Sleep(10 * time.Millisecond)
			}
			killed <- w.crash()
		}()
	} else {
		killed <- nil
	}
	var wg sync.WaitGroup
	for cust, ps := range byCustomer {
		wg.Add(1)
		seed := rng.Uint64()
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(len(cust))))
			for _, p := range ps {
				st.started.Add(1)
				impatient(hc, base, p, r, &st)
			}
		}()
	}
	wg.Wait()
	if err := <-killed; err != nil {
		return fmt.Errorf("restarting the worker: %w", err)
	}

	// Phase 2: every payment is retried with its key until it resolves.
	var wg2 sync.WaitGroup
	var unresolved atomic.Int64
	for _, ps := range byCustomer {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			for _, p := range ps {
				if p.abandoned {
					continue // the reconciler's
				}
				if !resolve(hc, base, p, &st) {
					unresolved.Add(1)
				}
			}
		}()
	}
	wg2.Wait()

	// Phase 3: partial refunds of one succeeded payment in ten, each sent
	// twice at once and retried until resolved.
	refunds := 0
	for i, p := range pays {
		if p.status == "SUCCEEDED" && i%10 == 3 && !p.abandoned {
			if refund(hc, base, p) {
				refunds++
			}
		}
	}
	// Phase 3b: checkouts, each a saga (reserve, charge, confirm) of a
	// scarce sku, double-clicked, given up, the worker killed once more,
	// retried or recovered until final (storm_sagas.go).
	var sagas *sagaResult
	if c.checkouts > 0 {
		if sagas, err = sagaPhase(ctx, hc, base, pool, w, c.kill, fk.Providers(), c.checkouts, rng, keys); err != nil {
			return err
		}
	}
	// Let the providers' last webhooks (Adyen's refund outcomes) land.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := fk.WaitDeliveries(wctx); err != nil {
		return err
	}
	stopBar()

	// Phase 4: the payments whose clients gave up after one send are the
	// reconciler's: it runs until none is open (the killed worker's leases
	// end after its 2s lock timeout).
	rec, err := reconcileAll(ctx, pool, fk, pays, leaks)
	if err != nil {
		return err
	}
	if sagas != nil {
		if err := sagas.check(ctx, pool, fk); err != nil {
			return fmt.Errorf("checking the checkouts: %w", err)
		}
	}
	// The worker stops (and writes its last records) before its files are
	// read.
	w.stop()
	leakFigure, leakProblems, err := leaks.finish(ctx, pool)
	if err != nil {
		return err
	}
	err = report(ctx, stormReport{pays: pays, st: &st, fakes: fk, pool: pool, w: w, unresolved: unresolved.Load(),
		refunds: refunds, rec: rec, sagas: sagas, leaks: leakFigure, leakProblems: leakProblems, elapsed: time.Since(began)})
	if kept {
		fmt.Printf("\n  the demo's schema stays: payonce report --database-url '%s'\n", u)
	}
	return err
}

// demoDatabase opens a fresh schema for a demo in dbURL, or in a
// throwaway PostgreSQL when dbURL is empty: the schema's URL, a pool on
// it, and a function that closes the pool (and stops the throwaway
// server).
func demoDatabase(ctx context.Context, dbURL, schema string) (string, *pgxpool.Pool, func(), error) {
	stop := func() {}
	if dbURL == "" {
		fmt.Println("starting a throwaway PostgreSQL ...")
		pg, err := localpg.Start(ctx, localpg.Options{Fast: true})
		if err != nil {
			return "", nil, nil, err
		}
		stop, dbURL = pg.Stop, pg.URL
	}
	u, err := localpg.FreshSchema(ctx, dbURL, schema)
	if err != nil {
		stop()
		return "", nil, nil, err
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		stop()
		return "", nil, nil, err
	}
	return u, pool, func() { pool.Close(); stop() }, nil
}
