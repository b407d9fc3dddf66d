package fiveminutes_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/robfig/cron/v3"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/cronslot"
	"github.com/payonce/payonce/idempotency/inbox"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// orderMessage is a broker's delivery of an order.
type orderMessage struct {
	ID  string `json:"id"`
	SKU string `json:"sku"`
	Qty int64  `json:"qty"`
}

func (m orderMessage) Ack() { fmt.Println("ack", m.ID) }

// Label is what the carrier sells.
type Label struct{ Tracking string }

type fakeCarrier struct{ bought *int }

func (c fakeCarrier) BuyLabel(_ context.Context, orderID string) (Label, error) {
	*c.bought++
	return Label{Tracking: "trk_" + orderID}, nil
}

// The queue path: an order message delivered twice writes one order; a
// label bought for it once, its retry replayed.
func Example_queue() {
	ctx := context.Background()
	pool, done := pgtest.ExamplePool(ctx) // a fresh, migrated schema of TEST_DATABASE_URL
	defer done()
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, sku TEXT, qty INT)`); err != nil {
		panic(err)
	}
	bought := 0
	carrier := fakeCarrier{&bought}

	store, err := pgstore.New(pool, nil)
	if err != nil {
		panic(err)
	}
	in, err := inbox.New(store, nil)
	if err != nil {
		panic(err)
	}
	for _, msg := range []orderMessage{{ID: "ord-1001", SKU: "book-42", Qty: 2}, {ID: "ord-1001", SKU: "book-42", Qty: 2}} {
		// Per delivery:
		fp, err := idempotency.NewFingerprint().String("sku", msg.SKU).Int("qty", msg.Qty).Sum()
		if err != nil {
			panic(err)
		}
		out, err := in.HandleTx(ctx, inbox.Message{Source: "orders", ID: msg.ID, Fingerprint: fp},
			func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
				_, err := tx.Exec(ctx, `INSERT INTO orders (id, sku, qty) VALUES ($1, $2, $3)`, m.ID, msg.SKU, msg.Qty)
				return err // commits with the inbox record, or not at all
			})
		fmt.Println(out, err)
		if out.Ack() { // Processed, Duplicate (nothing ran) or Poison (recorded: dead-letter it)
			msg.Ack()
		}
	}

	exec, err := pgstore.NewExecutor(store, nil)
	if err != nil {
		panic(err)
	}
	for _, msg := range []orderMessage{{ID: "ord-1001"}, {ID: "ord-1001"}} {
		label, err := idempotency.Do(ctx, exec, "shipping", "label_"+msg.ID, msg,
			func(ctx context.Context) (Label, error) { return carrier.BuyLabel(ctx, msg.ID) }, // once per key
			idempotency.SignificantFields(idempotency.NewFingerprint().String("order", msg.ID)))
		fmt.Println(label.Tracking, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("orders:", n, "labels bought:", bought)
	// Output:
	// processed <nil>
	// ack ord-1001
	// duplicate <nil>
	// ack ord-1001
	// trk_ord-1001 <nil>
	// trk_ord-1001 <nil>
	// orders: 1 labels bought: 1
}

type payoutRunner struct{ runs *int }

func (p payoutRunner) Run(ctx context.Context, tx pgx.Tx, at time.Time) error {
	*p.runs++
	_, err := tx.Exec(ctx, `INSERT INTO payouts (slot) VALUES ($1)`, at)
	return err
}

// The cron path: the guard's job is scheduled on a cron; two replicas
// then fire the same nightly slot, and it runs once.
func Example_cron() {
	ctx := context.Background()
	pool, done := pgtest.ExamplePool(ctx)
	defer done()
	if _, err := pool.Exec(ctx, `CREATE TABLE payouts (slot TIMESTAMPTZ PRIMARY KEY)`); err != nil {
		panic(err)
	}
	runs := 0
	payouts := payoutRunner{&runs}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		panic(err)
	}

	guard, err := cronslot.New(store, nil)
	if err != nil {
		panic(err)
	}
	c := cron.New(cron.WithLocation(time.UTC))
	_, err = guard.AddTx(c, "nightly-payouts", "0 2 * * *", func(ctx context.Context, tx pgx.Tx, s cronslot.Slot) error {
		return payouts.Run(ctx, tx, s.At) // s.At is the same on every scheduler; the writes commit with the slot
	})
	if err != nil {
		panic(err)
	}
	c.Start() // on every replica: each slot runs once
	<-c.Stop().Done()

	// Two replicas fire the slot of 2026-12-03 02:00 UTC.
	at := time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC)
	for replica := 1; replica <= 2; replica++ {
		out, err := guard.RunSlot(ctx, "nightly-payouts", at, nil, func(ctx context.Context, tx pgx.Tx, s cronslot.Slot) error {
			return payouts.Run(ctx, tx, s.At)
		})
		fmt.Println("replica", replica, out, err)
	}
	fmt.Println("payout runs:", runs)
	// Output:
	// replica 1 ran <nil>
	// replica 2 skipped <nil>
	// payout runs: 1
}

// The payments path, against the Stripe fake: a charge retried with its
// key is charged once.
func Example_payments() {
	ctx := context.Background()
	pool, done := pgtest.ExamplePool(ctx)
	defer done()
	fake := stripetest.NewServer(nil) // Stripe's behaviour, in-process
	defer fake.Close()
	os.Setenv("STRIPE_SECRET_KEY", "sk_test_fiveminutes")
	os.Setenv("STRIPE_API_BASE", fake.URL())
	customerID, chargeKey := "cus_1", "order-1001"

	prov, err := paystripe.New(&paystripe.Config{SecretKey: os.Getenv("STRIPE_SECRET_KEY"), BaseURL: os.Getenv("STRIPE_API_BASE")})
	if err != nil {
		panic(err)
	}
	client, err := payments.New(pool, []provider.Provider{prov}, nil) // builds its store and ledger on pool
	if err != nil {
		panic(err)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		res, err := client.Charge(ctx, payments.ChargeParams{
			Scope: customerID, Key: chargeKey, Provider: "stripe",
			Amount: money.MustParse("49.99", money.EUR), PaymentMethod: "pm_card_visa",
		})
		switch {
		case payments.OutcomeUnknown(err): // the answer was lost: retry with the SAME key, never a new one
			fmt.Println("outcome pending")
		case errors.Is(err, provider.ErrDeclined): // final; every retry gets the same decline
			fmt.Println("declined")
		case err != nil:
			panic(err)
		default:
			fmt.Println(res.Status, res.Amount, res.Currency, "replayed:", res.Replayed)
		}
	}
	fmt.Println("PaymentIntents at Stripe:", fake.CountsByMetadata(paystripe.MetadataKey, "cus_1_charge_order-1001").PaymentIntents)
	// Output:
	// SUCCEEDED 49.99 EUR replayed: false
	// SUCCEEDED 49.99 EUR replayed: true
	// PaymentIntents at Stripe: 1
}
