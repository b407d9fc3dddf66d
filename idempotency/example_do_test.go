package idempotency_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/memstore"
)

// A consumer buys a shipping label for each order message; the broker
// delivers the message twice. The label is bought once, and the second
// delivery gets the same label back, decoded, without buying another.
// A message that comes back under the same key with another order is
// refused.
func ExampleDo() {
	ctx := context.Background()
	exec, err := idempotency.New(memstore.New(nil), nil) // pgstore.NewExecutor on PostgreSQL
	if err != nil {
		panic(err)
	}
	type Message struct {
		ID    string `json:"id"`
		Order string `json:"order"`
	}
	type Label struct {
		Tracking string
		Cents    int64
	}
	bought := 0
	buyLabel := func(ctx context.Context) (Label, error) {
		bought++
		return Label{Tracking: "1Z999AA10123456784", Cents: 499}, nil
	}

	deliver := func(msg Message) {
		var res idempotency.Result
		label, err := idempotency.Do(ctx, exec, "shipping", "label_"+msg.ID, msg, buyLabel,
			idempotency.SignificantFields(idempotency.NewFingerprint().String("order", msg.Order)),
			idempotency.ReportResult(&res))
		switch {
		case errors.Is(err, idempotency.ErrFingerprintMismatch):
			fmt.Println("refused: same key, another order")
		case err != nil:
			panic(err)
		default:
			fmt.Printf("%s %d replayed=%v\n", label.Tracking, label.Cents, res.Replayed)
		}
	}
	deliver(Message{ID: "msg-1", Order: "ord-7"})
	deliver(Message{ID: "msg-1", Order: "ord-7"}) // redelivered
	deliver(Message{ID: "msg-1", Order: "ord-8"})
	fmt.Println("labels bought:", bought)
	// Output:
	// 1Z999AA10123456784 499 replayed=false
	// 1Z999AA10123456784 499 replayed=true
	// refused: same key, another order
	// labels bought: 1
}
