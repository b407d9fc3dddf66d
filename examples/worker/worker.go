// Command worker is payonce's queue-consumer example: River jobs on the
// same PostgreSQL as payonce, whose effects happen once per business
// operation however often River runs them.
//
// Two job kinds:
//
//   - "order" writes an order row through inbox.HandleTx: the order and
//     the inbox's record of the order id commit in one transaction, so a
//     job that River runs again (its worker crashed after the commit and
//     before River recorded the completion, a timeout, the same order
//     inserted twice as two jobs) finds the order done and writes nothing.
//     The message's identity is the order id from the job's arguments, not
//     River's job id: two jobs for one order are one effect. A permanent
//     failure (an unknown sku) is recorded, dead-lettered in the
//     dead_letters table and the job cancelled (never retried); a
//     transient one returns the error and River retries it with backoff.
//   - "charge" charges through payments.Client.Charge with the payment id
//     as the payment's key. Charge is itself an idempotent consumer: a
//     retried job re-drives the same intent with the same provider key, so
//     the provider deduplicates it and one PaymentIntent exists; no inbox
//     is needed around it. A lost provider answer is a transient error:
//     River retries; a decline is final and the job is cancelled.
//
// # River's unique jobs and the inbox
//
// River's UniqueOpts (ByArgs, ByPeriod, ByState) refuse to insert a job
// whose unique properties match a job already in the chosen states: they
// deduplicate insertion. They do not make a job's effect exactly-once:
// River runs a job again when its worker dies or times out after the
// effect committed (at-least-once execution), and a second insert after
// the first job left the unique states (completed and pruned, or with
// other arguments for the same order) is a new job. The inbox is keyed by
// the business identity and commits with the effect, so it covers both;
// unique jobs remain useful to keep the queue from filling with copies.
// River's JobCompleteTx completes a job in the transaction of its effect,
// which also closes the crash window for River's own retry, but not
// duplicates inserted as separate jobs nor messages from other brokers.
//
// # Running it
//
//	DATABASE_URL=postgres://... STRIPE_API_BASE=... STRIPE_SECRET_KEY=... go run ./examples/worker
//
// WORKER_JOB_TIMEOUT, WORKER_RESCUE_AFTER (River's JobTimeout and
// RescueStuckJobsAfter) and WORKER_RETRY_DELAY (a constant retry delay
// instead of River's backoff) are Go durations, for demos.
//
// It migrates payonce's and River's schemas, creates its tables and works
// both queues until interrupted. POST /jobs/order {"order_id","sku","qty"}
// and POST /jobs/charge {"payment_id","customer","amount","currency",
// "payment_method","provider","recipient"} on ADDR (default :8081) insert
// jobs.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/inbox"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
)

// OrderArgs is an order job.
type OrderArgs struct {
	OrderID string `json:"order_id"`
	SKU     string `json:"sku"`
	Qty     int    `json:"qty"`
}

// Kind is River's job kind.
func (OrderArgs) Kind() string { return "order" }

// ChargeArgs is a charge job.
type ChargeArgs struct {
	PaymentID     string `json:"payment_id"`
	Customer      string `json:"customer"`
	Amount        string `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	Provider      string `json:"provider"`
	Recipient     string `json:"recipient"`
}

// Kind is River's job kind.
func (ChargeArgs) Kind() string { return "charge" }

const schemaSQL = `
CREATE TABLE IF NOT EXISTS worker_skus (sku TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS worker_orders (order_id TEXT NOT NULL, sku TEXT NOT NULL, qty INT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS dead_letters (source TEXT NOT NULL, message_id TEXT NOT NULL, reason TEXT NOT NULL,
    at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (source, message_id));
INSERT INTO worker_skus VALUES ('book-42'), ('pen-7') ON CONFLICT DO NOTHING;
`

// errUnknownSKU is an order that can never be written.
var errUnknownSKU = errors.New("unknown sku")

// OrderWorker writes orders once per order id.
type OrderWorker struct {
	river.WorkerDefaults[OrderArgs]
	inbox *inbox.Inbox[pgx.Tx]
	// hooks for tests: onHandle runs when the handler starts (never for a
	// Duplicate or a recorded Poison); afterEffect runs in the transaction
	// after the order is written (a hang there is a crash before the commit); afterCommit
	// runs after the commit, before River records the completion (an
	// error there is a crash in between).
	onHandle    func()
	afterEffect func(ctx context.Context)
	afterCommit func(job *river.Job[OrderArgs]) error
}

// Work writes the order in the inbox's transaction.
func (w *OrderWorker) Work(ctx context.Context, job *river.Job[OrderArgs]) error {
	a := job.Args
	fp, err := idempotency.NewFingerprint().String("sku", a.SKU).Int("qty", int64(a.Qty)).Sum()
	if err != nil {
		return river.JobCancel(err)
	}
	out, err := w.inbox.HandleTx(ctx, inbox.Message{Source: "river-order", ID: a.OrderID, Fingerprint: fp, Attempt: job.Attempt},
		func(ctx context.Context, tx pgx.Tx, _ inbox.Message) error {
			if w.onHandle != nil {
				w.onHandle()
			}
			var known bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM worker_skus WHERE sku = $1)`, a.SKU).Scan(&known); err != nil {
				return err
			}
			if !known || a.Qty < 1 {
				return idempotency.Permanent(fmt.Errorf("%w %q (qty %d)", errUnknownSKU, a.SKU, a.Qty), idempotency.Response{Code: 422})
			}
			if _, err := tx.Exec(ctx, `INSERT INTO worker_orders (order_id, sku, qty) VALUES ($1, $2, $3)`, a.OrderID, a.SKU, a.Qty); err != nil {
				return err
			}
			if w.afterEffect != nil {
				w.afterEffect(ctx)
			}
			return nil
		})
	switch out {
	case inbox.Poison:
		return river.JobCancel(err) // recorded and dead-lettered: never retried
	case inbox.Retry:
		return retry(err) // nothing committed: River runs it again
	}
	if w.afterCommit != nil {
		return w.afterCommit(job)
	}
	return nil
}

// ChargeWorker charges once per payment id.
type ChargeWorker struct {
	river.WorkerDefaults[ChargeArgs]
	client *payments.Client
}

// Work charges with the payment id as the key: River's retries re-drive
// the same intent.
func (w *ChargeWorker) Work(ctx context.Context, job *river.Job[ChargeArgs]) error {
	a := job.Args
	amount, err := money.Parse(a.Amount, money.Currency(a.Currency))
	if err != nil {
		return river.JobCancel(err)
	}
	_, err = w.client.Charge(ctx, payments.ChargeParams{Scope: a.Customer, Key: a.PaymentID, Provider: a.Provider,
		Amount: amount, Recipient: a.Recipient, PaymentMethod: a.PaymentMethod})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, provider.ErrDeclined), errors.Is(err, provider.ErrInvalidRequest), errors.Is(err, payments.ErrUnderReview),
		errors.Is(err, provider.ErrKeyMismatch), errors.Is(err, idempotency.ErrInvalid), errors.Is(err, idempotency.ErrFingerprintMismatch),
		errors.Is(err, idempotency.ErrForeignKey):
		return river.JobCancel(err) // final: every retry of the key gets the same answer
	default:
		// A lost answer, the provider or the database down, a timeout,
		// another worker on the same payment: the same key again later.
		return retry(err)
	}
}

// retry returns a transient failure to River. Another worker holding the
// same message or payment (idempotency.ErrInProgress) snoozes the job for
// the holder's remaining lease without spending one of its attempts: a
// holder that died keeps its lease for up to the inbox's LockTimeout, and
// River's attempts must not run out meanwhile. Anything else is a failed
// attempt, retried with River's backoff.
func retry(err error) error {
	var busy *idempotency.InProgressError
	if errors.As(err, &busy) {
		return river.JobSnooze(max(busy.RetryAfter, 100*time.Millisecond))
	}
	return err
}

// Config configures the worker.
type Config struct {
	// Payments is the payments client of charge jobs; nil: no charge
	// queue.
	Payments *payments.Client
	// JobTimeout, RescueStuckJobsAfter, FetchPollInterval and RetryPolicy
	// are River's (tests shorten them). Defaults: River's.
	JobTimeout           time.Duration
	RescueStuckJobsAfter time.Duration
	FetchPollInterval    time.Duration
	RetryPolicy          river.ClientRetryPolicy
	// Logger receives River's and the worker's logs. Default: errors only.
	Logger *slog.Logger

	orderWorker *OrderWorker // tests: hooks
}

// Setup migrates payonce's and River's schemas and creates the example's
// tables.
func Setup(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		return err
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	_, err = pool.Exec(ctx, schemaSQL)
	return err
}

// NewClient returns a River client working both job kinds on pool.
func NewClient(pool *pgxpool.Pool, cfg Config) (*river.Client[pgx.Tx], error) {
	store, err := pgstore.New(pool, nil)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(errWriter{}, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	in, err := inbox.New(store, &inbox.Config{
		Retention: 30 * 24 * time.Hour, // beyond River's retries (25 attempts over about 3 weeks)
		// An order takes milliseconds: a worker that died holding one
		// leaves it to the others after 10s.
		LockTimeout: 10 * time.Second,
		// At least once per poison message (again on each job of it), so
		// keyed by the message.
		DeadLetter: func(ctx context.Context, m inbox.Message, reason error) {
			if _, err := pool.Exec(context.WithoutCancel(ctx), `INSERT INTO dead_letters (source, message_id, reason) VALUES ($1, $2, $3)
				ON CONFLICT DO NOTHING`, m.Source, m.ID, reason.Error()); err != nil {
				key, _ := m.Key() // the message id is the key's intent: logged as the key's hash
				logger.Error("worker: dead letter not stored", "key", idempotency.ShortHash(key), "err", err)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	ow := cfg.orderWorker
	if ow == nil {
		ow = &OrderWorker{}
	}
	ow.inbox = in
	river.AddWorker(workers, ow)
	if cfg.Payments != nil {
		river.AddWorker(workers, &ChargeWorker{client: cfg.Payments})
	}
	return river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 16}},
		Workers:              workers,
		JobTimeout:           cfg.JobTimeout,
		RescueStuckJobsAfter: cfg.RescueStuckJobsAfter,
		FetchPollInterval:    cfg.FetchPollInterval,
		RetryPolicy:          cfg.RetryPolicy,
		Logger:               logger,
	})
}
