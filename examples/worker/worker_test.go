package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers"
	"github.com/payonce/payonce/providers/fakes"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

func TestMain(m *testing.M) {
	if os.Getenv("WORKER_CHILD") != "" {
		if err := hangingWorker(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// quickRetry retries a failed job 100ms later (River's default backoff is
// seconds to weeks).
type quickRetry struct{}

func (quickRetry) NextRetry(*rivertype.JobRow) time.Time {
	return time.Now().Add(100 * time.Millisecond)
}

func setup(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	url := pgtest.SchemaURL(t)
	pool := pgtest.PoolURL(t, url)
	if err := Setup(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool, url
}

func start(t *testing.T, pool *pgxpool.Pool, cfg Config) *river.Client[pgx.Tx] {
	t.Helper()
	cfg.FetchPollInterval, cfg.RetryPolicy = 100*time.Millisecond, quickRetry{}
	if cfg.RescueStuckJobsAfter == 0 {
		cfg.RescueStuckJobsAfter = time.Hour
	}
	c, err := NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

// wait waits until job id is final and returns its state and attempt.
func wait(t *testing.T, pool *pgxpool.Pool, id int64, within time.Duration) (string, int) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var state string
		var attempt int
		if err := pool.QueryRow(context.Background(), `SELECT state, attempt FROM river_job WHERE id = $1`, id).Scan(&state, &attempt); err != nil {
			t.Fatal(err)
		}
		switch state {
		case "completed", "cancelled", "discarded":
			return state, attempt
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d still %s after %s", id, state, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wantOneOrder stops the test unless the worker wrote one order id.
func wantOneOrder(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	if n := count(t, pool, `SELECT count(*) FROM worker_orders WHERE order_id = $1`, id); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func insert(t *testing.T, c *river.Client[pgx.Tx], args river.JobArgs, opts *river.InsertOpts) *rivertype.JobInsertResult {
	t.Helper()
	res, err := c.Insert(context.Background(), args, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// River runs a job again after its effect committed (the worker failed
// between the commit and River's record of the completion): the retry
// finds the order written and writes nothing.
func TestRetryAfterCommitIsOneOrder(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	var crashed atomic.Bool
	c := start(t, pool, Config{orderWorker: &OrderWorker{afterCommit: func(job *river.Job[OrderArgs]) error {
		if crashed.CompareAndSwap(false, true) {
			return errors.New("worker lost before River recorded the completion")
		}
		return nil
	}}})
	res := insert(t, c, OrderArgs{OrderID: "ord-1", SKU: "book-42", Qty: 1}, nil)
	state, attempt := wait(t, pool, res.Job.ID, 20*time.Second)
	if state != "completed" || attempt != 2 {
		t.Fatalf("job %s after %d attempts, want completed after 2", state, attempt)
	}
	wantOneOrder(t, pool, "ord-1")
}

// The same order inserted as two jobs: one order. With River's unique
// jobs (by args), the second insert is refused instead; a third job for
// the same order with other args (another qty) is poison: never applied.
func TestSameOrderTwiceIsOneOrder(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	c := start(t, pool, Config{})
	a := insert(t, c, OrderArgs{OrderID: "ord-2", SKU: "book-42", Qty: 2}, nil)
	b := insert(t, c, OrderArgs{OrderID: "ord-2", SKU: "book-42", Qty: 2}, nil)
	for _, id := range []int64{a.Job.ID, b.Job.ID} {
		if state, _ := wait(t, pool, id, 20*time.Second); state != "completed" {
			t.Fatalf("job %d %s", id, state)
		}
	}
	wantOneOrder(t, pool, "ord-2")
	u := &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
	first := insert(t, c, OrderArgs{OrderID: "ord-3", SKU: "pen-7", Qty: 1}, u)
	if second := insert(t, c, OrderArgs{OrderID: "ord-3", SKU: "pen-7", Qty: 1}, u); !second.UniqueSkippedAsDuplicate || second.Job.ID != first.Job.ID {
		t.Fatalf("a unique job inserted twice: %+v", second)
	}
	other := insert(t, c, OrderArgs{OrderID: "ord-2", SKU: "book-42", Qty: 5}, nil)
	if state, _ := wait(t, pool, other.Job.ID, 20*time.Second); state != "cancelled" {
		t.Fatalf("the same order with another qty: %s, want cancelled", state)
	}
	if n := count(t, pool, `SELECT count(*) FROM worker_orders WHERE order_id = 'ord-2' AND qty = 2`); n != 1 {
		t.Fatalf("the order changed: %d rows with its qty", n)
	}
}

// A permanent failure is recorded once, dead-lettered, the job cancelled
// (not retried); another job for the same order is poison again without
// running.
func TestPoisonOrder(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	var runs atomic.Int32
	c := start(t, pool, Config{orderWorker: &OrderWorker{onHandle: func() { runs.Add(1) }}})
	for i := 0; i < 2; i++ {
		res := insert(t, c, OrderArgs{OrderID: "ord-4", SKU: "nope", Qty: 1}, nil)
		if state, attempt := wait(t, pool, res.Job.ID, 20*time.Second); state != "cancelled" || attempt != 1 {
			t.Fatalf("job %d: %s after %d attempts, want cancelled after 1", i, state, attempt)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want once (the second job is poison from the record)", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM worker_orders`); n != 0 {
		t.Fatalf("%d orders", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM dead_letters WHERE source = 'river-order' AND message_id = 'ord-4'`); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM idempotency_store WHERE user_id = 'river-order' AND status = 'FAILED'`); n != 1 {
		t.Fatalf("%d failure records, want 1", n)
	}
}

// hangingWorker is a worker process whose order handler hangs after its
// write, before its commit; it prints "started" then.
func hangingWorker() error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("WORKER_URL"))
	if err != nil {
		return err
	}
	c, err := NewClient(pool, Config{FetchPollInterval: 100 * time.Millisecond, JobTimeout: time.Second, RescueStuckJobsAfter: 2 * time.Second,
		orderWorker: &OrderWorker{afterEffect: func(context.Context) {
			fmt.Println("started")
			time.Sleep(time.Hour)
		}}})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	time.Sleep(time.Hour)
	return nil
}

// A worker process SIGKILLed in the middle of a job, its write not
// committed: River rescues the job once it is stuck, another worker runs
// it, and the order is written once.
func TestKilledWorkerJobRescuedOneOrder(t *testing.T) {
	t.Parallel()
	pool, url := setup(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "WORKER_CHILD=1", "WORKER_URL="+url)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Insert through a client that works nothing: the job is the worker
	// process's.
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	res := insert(t, inserter, OrderArgs{OrderID: "ord-5", SKU: "book-42", Qty: 1}, nil)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "started\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the worker process did not take the job: %q %v", line, err)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	// A new worker: it is elected leader once the dead one's term ends, and
	// its rescuer retries the job stuck running.
	start(t, pool, Config{JobTimeout: time.Second, RescueStuckJobsAfter: 2 * time.Second})
	state, attempt := wait(t, pool, res.Job.ID, 60*time.Second)
	if state != "completed" || attempt < 2 {
		t.Fatalf("job %s after %d attempts, want completed after a rescue", state, attempt)
	}
	wantOneOrder(t, pool, "ord-5")
}

// A charge job whose provider answer is lost: River retries it, the same
// intent is re-driven with the same provider key, and one PaymentIntent
// exists at the provider.
func TestChargeJobRetriedOneCharge(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	fk := fakes.Start(fakes.Options{Stripe: true})
	t.Cleanup(fk.Close)
	env := fk.Env()
	wcfg, err := providers.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	wcfg.HTTPClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	pay, err := providers.NewClient(pool, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	fk.Stripe.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	c := start(t, pool, Config{Payments: pay})
	res := insert(t, c, ChargeArgs{PaymentID: "pay-1", Customer: "cus_w", Amount: "19.90", Currency: "EUR",
		PaymentMethod: "pm_card_visa", Provider: "stripe", Recipient: "acct_w"}, nil)
	state, attempt := wait(t, pool, res.Job.ID, 30*time.Second)
	if state != "completed" || attempt < 2 {
		t.Fatalf("charge job %s after %d attempts, want completed after a retry", state, attempt)
	}
	// The same payment inserted again as another job: the payment's key
	// replays, nothing reaches the provider.
	again := insert(t, c, ChargeArgs{PaymentID: "pay-1", Customer: "cus_w", Amount: "19.90", Currency: "EUR",
		PaymentMethod: "pm_card_visa", Provider: "stripe", Recipient: "acct_w"}, nil)
	if state, attempt := wait(t, pool, again.Job.ID, 30*time.Second); state != "completed" || attempt != 1 {
		t.Fatalf("the second charge job %s after %d attempts, want completed after 1", state, attempt)
	}
	key, _ := payments.ChargeKey("cus_w", "pay-1")
	if n := fk.Charges("stripe", key); n != 1 {
		t.Fatalf("%d PaymentIntents at Stripe, want 1", n)
	}
}
