package inbox_test

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/inbox"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest"
)

// A consumer applies an order message; the broker delivers it three
// times. The order is written once, in the transaction that records the
// message, and every delivery is acked.
func Example() {
	ctx := context.Background()
	pool, done := pgtest.ExamplePool(ctx)
	defer done()
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id TEXT NOT NULL, sku TEXT NOT NULL)`); err != nil {
		panic(err)
	}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		panic(err)
	}
	in, err := inbox.New(store, nil)
	if err != nil {
		panic(err)
	}

	// What the broker delivers: a producer-set id and the payload.
	id, sku := "ord-1001", "book-42"
	fp, err := idempotency.NewFingerprint().String("sku", sku).Sum()
	if err != nil {
		panic(err)
	}
	for attempt := 1; attempt <= 3; attempt++ {
		out, err := in.HandleTx(ctx, inbox.Message{Source: "orders", ID: id, Fingerprint: fp, Attempt: attempt},
			func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
				_, err := tx.Exec(ctx, `INSERT INTO orders (id, sku) VALUES ($1, $2)`, m.ID, sku)
				return err
			})
		fmt.Printf("delivery %d: %v, ack %v, err %v\n", attempt, out, out.Ack(), err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("orders:", n)
	// Output:
	// delivery 1: processed, ack true, err <nil>
	// delivery 2: duplicate, ack true, err <nil>
	// delivery 3: duplicate, ack true, err <nil>
	// orders: 1
}

// A Kafka consumer keys each record by its topic, partition and offset,
// and a NATS consumer by the publisher's message id: neither fits a key
// as it is, so both go through MessageID. A record redelivered after a
// rebalance is a duplicate.
func ExampleMessageID() {
	ctx := context.Background()
	pool, done := pgtest.ExamplePool(ctx)
	defer done()
	store, err := pgstore.New(pool, nil)
	if err != nil {
		panic(err)
	}
	in, err := inbox.New(store, nil)
	if err != nil {
		panic(err)
	}
	handle := func(source, id, payload string) inbox.Outcome {
		fp, err := idempotency.NewFingerprint().Bytes("payload", []byte(payload)).Sum()
		if err != nil {
			panic(err)
		}
		out, err := in.HandleTx(ctx, inbox.Message{Source: source, ID: id, Fingerprint: fp},
			func(context.Context, pgx.Tx, inbox.Message) error { return nil })
		if err != nil {
			panic(err)
		}
		return out
	}

	// Kafka: topic "orders.v1", partition 3, offset 1042, delivered twice.
	topic, partition, offset := "orders.v1", int32(3), int64(1042)
	kafkaID := inbox.MessageID(topic, strconv.Itoa(int(partition)), strconv.FormatInt(offset, 10))
	fmt.Println("kafka:", handle("orders-kafka", kafkaID, `{"sku":"book-42"}`), handle("orders-kafka", kafkaID, `{"sku":"book-42"}`))

	// NATS: a Nats-Msg-Id with slashes and a space.
	natsID := inbox.MessageID("shop/eu/order 1001")
	fmt.Println("nats:", handle("orders-nats", natsID, `{"sku":"pen-7"}`), handle("orders-nats", natsID, `{"sku":"pen-7"}`))
	fmt.Println("id:", len(natsID), "hex characters")
	// Output:
	// kafka: processed duplicate
	// nats: processed duplicate
	// id: 64 hex characters
}
