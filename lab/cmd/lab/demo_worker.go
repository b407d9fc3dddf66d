package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/payonce/payonce/internal/cli"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/pgtest/localpg"
	"github.com/payonce/payonce/providers/fakes"
)

// newWorkerDemoCmd is lab demo worker; dbURL is lab demo's --database-url.
func newWorkerDemoCmd(dbURL *string) *cobra.Command {
	var (
		orders, charges int
		seed            uint64
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "River jobs through the inbox, the worker killed midway",
		Long: `The consumer path: River jobs on payonce's PostgreSQL, worked by the queue
example (examples/worker) as a process of its own. N orders are each
inserted as two jobs, one in twenty for a sku that does not exist; the
charges go to the Stripe fake, which loses 20% of responses after charging.
Midway the worker is killed with SIGKILL and restarted: River rescues its
jobs and retries the failed ones. The demo then checks that every order was
written once, every poison order dead-lettered once and every payment
charged once at the provider, and exits 1 otherwise.

Without --database-url or DATABASE_URL it starts a throwaway PostgreSQL;
it works in its own schema, payonce_worker_demo, dropped first.`,
		Example: `  make demo-worker
  lab demo worker --orders 500 --charges 100 --seed 7`,
		Args: cli.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			switch {
			case orders < 1:
				return cli.Usage("demo worker: --orders must be at least 1")
			case charges < 0:
				return cli.Usage("demo worker: --charges must not be negative")
			}
			return runWorkerDemo(*dbURL, orders, charges, seed)
		},
	}
	f := cmd.Flags()
	f.IntVar(&orders, "orders", 200, "orders, each inserted as two jobs")
	f.IntVar(&charges, "charges", 60, "charge jobs")
	f.Uint64Var(&seed, "seed", 1, "seed of the poison orders and the provider's faults")
	return cmd
}

const workerDemoPackage = "github.com/payonce/payonce/examples/worker"

func runWorkerDemo(dbURL string, orders, charges int, seed uint64) error {
	ctx := context.Background()
	exe, clean, err := buildProgram(ctx, workerDemoPackage)
	if err != nil {
		return err
	}
	defer clean()
	began := time.Now()
	base := dbURL
	if base == "" {
		base = os.Getenv("DATABASE_URL")
	}
	if base == "" {
		pg, err := localpg.Start(ctx, localpg.Options{Fast: true})
		if err != nil {
			return err
		}
		defer pg.Stop()
		base = pg.URL
	}
	u, err := localpg.FreshSchema(ctx, base, "payonce_worker_demo")
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()
	fk := fakes.Start(fakes.Options{Stripe: true, LoseAfter: 0.2, Seed: int64(seed)})
	defer fk.Close()
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	env := []string{"DATABASE_URL=" + u, "WORKER_JOB_TIMEOUT=5s", "WORKER_RESCUE_AFTER=6s", "WORKER_RETRY_DELAY=500ms"}
	w := &worker{exe: exe, env: appendEnv(env, fk.Env()), addr: addr}
	if err := w.start(); err != nil {
		return err
	}
	defer w.stop()
	fmt.Printf("demo worker: %d orders as %d River jobs and %d charge jobs, to the worker on %s (seed %d)\n",
		orders, 2*orders, charges, addr, seed)

	rng := rand.New(rand.NewPCG(seed, 7))
	type order struct {
		id, sku string
	}
	var list []order
	for i := range orders {
		sku := []string{"book-42", "pen-7"}[i%2]
		if rng.IntN(20) == 0 {
			sku = "discontinued-9"
		}
		list = append(list, order{fmt.Sprintf("ord-%05d", i), sku})
	}
	post := func(path string, body any) error {
		b, _ := json.Marshal(body)
		for attempt := 0; ; attempt++ {
			resp, err := http.Post("http://"+addr+path, "application/json", bytes.NewReader(b))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusAccepted {
					return nil
				}
				err = fmt.Errorf("%s: %s", path, resp.Status)
			}
			if attempt == 50 {
				return err
			}
			time.Sleep(200 * time.Millisecond) // the worker is restarting
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for part := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := part; i < len(list); i += 4 {
				o := list[i]
				for range 2 { // the same order inserted twice: two jobs
					if err := post("/jobs/order", map[string]any{"order_id": o.id, "sku": o.sku, "qty": 1}); err != nil {
						errs <- err
						return
					}
				}
				if i < charges {
					if err := post("/jobs/charge", map[string]any{"payment_id": fmt.Sprintf("pay-%05d", i), "customer": "cus_demo",
						"amount": "19.90", "currency": "EUR", "payment_method": "pm_card_visa", "provider": "stripe", "recipient": "acct_demo"}); err != nil {
						errs <- err
						return
					}
				}
				if part == 0 && i >= len(list)/2 && w.restarts == 0 {
					if err := w.crash(); err != nil {
						errs <- fmt.Errorf("restarting the worker: %w", err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	// Every job ends: River rescues the killed worker's (after its 6s) and
	// retries the failed ones.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var open int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'cancelled', 'discarded')`).Scan(&open); err != nil {
			return err
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo worker: %d jobs still open after 3 minutes", open)
		}
		time.Sleep(250 * time.Millisecond)
	}

	var failures []string
	var jobs, again, doubled, poisonJobs, dead int
	_ = pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE attempt > 1) FROM river_job`).Scan(&jobs, &again)
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT order_id FROM worker_orders GROUP BY order_id HAVING count(*) > 1) d`).Scan(&doubled)
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'cancelled' AND kind = 'order'`).Scan(&poisonJobs)
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM dead_letters`).Scan(&dead)
	written, poison := 0, 0
	for _, o := range list {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM worker_orders WHERE order_id = $1`, o.id).Scan(&n)
		switch {
		case o.sku == "discontinued-9":
			poison++
			if n != 0 {
				failures = append(failures, "poison order "+o.id+" was written")
			}
		case n == 1:
			written++
		default:
			failures = append(failures, fmt.Sprintf("order %s written %d times", o.id, n))
		}
	}
	if doubled > 0 {
		failures = append(failures, fmt.Sprintf("%d orders written twice", doubled))
	}
	if dead != poison {
		failures = append(failures, fmt.Sprintf("%d dead letters for %d poison orders", dead, poison))
	}
	charged := 0
	for i := range min(charges, len(list)) {
		key, _ := payments.ChargeKey("cus_demo", fmt.Sprintf("pay-%05d", i))
		switch n := fk.Charges("stripe", key); n {
		case 1:
			charged++
		default:
			failures = append(failures, fmt.Sprintf("payment pay-%05d has %d PaymentIntents", i, n))
		}
	}
	fmt.Printf("\n  worker: %d River jobs (%d run again after a crash or a failure), worker killed %d time(s)\n", jobs, again, w.restarts)
	fmt.Printf("  orders: %d written once each from two jobs apiece; %d poison orders dead-lettered once (%d jobs cancelled)\n",
		written, poison, poisonJobs)
	fmt.Printf("  charges: %d payments, one PaymentIntent each at the provider\n", charged)
	fmt.Printf("  wall time %s\n", time.Since(began).Round(time.Millisecond))
	if len(failures) > 0 {
		return fmt.Errorf("demo worker: %s", strings.Join(failures, "; "))
	}
	fmt.Println("\n  ok: every order once, every payment once, under redelivery, duplicates and a killed worker")
	return nil
}
