package dynamostore_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/dynamostore"
	"github.com/payonce/payonce/idempotency/dynamostore/dynamotest"
	"github.com/payonce/payonce/idempotency/idempotencytest"
)

func TestMain(m *testing.M) { os.Exit(dynamotest.Main(m)) }

// bundle is one test's store on a table of its own, and the store's clock.
type bundle struct {
	client *dynamodb.Client
	store  *dynamostore.Store
	table  string
	clock  *clock
}

// clock is the store's clock: the real one, moved forward by advance.
// The store decides every lease and expiry by the application's clock,
// so moving it is what time passing is to the store.
type clock struct{ shift atomic.Int64 }

func (c *clock) now() time.Time { return time.Now().Add(time.Duration(c.shift.Load())) }

func (b bundle) advance(_ testing.TB, d time.Duration) { b.clock.shift.Add(int64(d)) }

// setup gives the test a table of its own and a store over it; cfg's
// Table and Clock are the bundle's. A nil cfg means the defaults, with no
// skew buffer: the test's one clock needs none.
func setup(t *testing.T, cfg *dynamostore.Config) bundle {
	t.Helper()
	client := dynamotest.Client(t)
	c := dynamostore.Config{SkewBuffer: -1}
	if cfg != nil {
		c = *cfg
	}
	clk := &clock{}
	c.Table, c.Clock = dynamotest.Table(t, client), clk.now
	s, err := dynamostore.New(context.Background(), client, &c)
	if err != nil {
		t.Fatal(err)
	}
	return bundle{client: client, store: s, table: c.Table, clock: clk}
}

// TestConformance runs the suite every Store must pass, once more with the
// executor's replay cache, which must change no answer.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, cached := range []bool{false, true} {
		t.Run(map[bool]string{false: "Store", true: "ReplayCache"}[cached], func(t *testing.T) {
			t.Parallel()
			idempotencytest.Exercise(t, func(t *testing.T) idempotencytest.Harness {
				b := setup(t, nil)
				return idempotencytest.Harness{Store: b.store, Advance: b.advance, ReplayCache: cached}
			})
		})
	}
}

// Sealed responses: the suite again, over a store with a keyring.
func TestConformanceSealed(t *testing.T) {
	t.Parallel()
	kr, err := idempotency.NewKeyring("k1", map[string][]byte{"k1": make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	idempotencytest.Exercise(t, func(t *testing.T) idempotencytest.Harness {
		b := setup(t, &dynamostore.Config{Keyring: kr, SkewBuffer: -1})
		return idempotencytest.Harness{Store: b.store, Advance: b.advance}
	})
}
