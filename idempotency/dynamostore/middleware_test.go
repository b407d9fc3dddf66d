package dynamostore_test

import (
	"context"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/dynamostore"
	"github.com/payonce/payonce/idempotency/dynamostore/dynamotest"
	"github.com/payonce/payonce/idempotency/idempotencytest"
)

// executors returns n executors, each over its own client and store (n
// instances of a service) on one new table, with the default store
// configuration: the real clock, the default skew buffer.
func executors(t *testing.T, n int) []*idempotency.Executor {
	t.Helper()
	table := dynamotest.Table(t, dynamotest.Client(t))
	var out []*idempotency.Executor
	for range n {
		s, err := dynamostore.New(context.Background(), dynamotest.Client(t), &dynamostore.Config{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		e, err := idempotency.New(s, &idempotency.Config{LockTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		out = append(out, e)
	}
	return out
}

// Several instances of a service on one table: the middleware storm and
// the Executor.Do storm of idempotencytest.CheckInstances.
func TestInstances(t *testing.T) {
	t.Parallel()
	idempotencytest.CheckInstances(t, executors, nil)
}
