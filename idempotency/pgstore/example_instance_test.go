package pgstore_test

import (
	"context"
	"fmt"
	"os"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/pgtest"
)

// A worker that its supervisor restarts under a stable name (here
// PAYONCE_INSTANCE, worker-0 when unset): at start-up, New ends the live
// leases its previous incarnation held when it was killed, so that the
// first retry of each of those keys finishes it at once instead of after
// the lease. On a first start there are none.
func ExampleConfig_instance() {
	ctx := context.Background()
	pool, done := pgtest.ExamplePool(ctx) // a fresh schema of TEST_DATABASE_URL
	defer done()
	if _, err := migrations.MigrateLines(ctx, pool, migrations.LineIdempotency); err != nil {
		panic(err)
	}

	name := os.Getenv(pgstore.InstanceEnv)
	if name == "" {
		name = "worker-0"
	}
	store, err := pgstore.New(pool, &pgstore.Config{Instance: name})
	if err != nil {
		panic(err)
	}
	fmt.Println("leases of the previous incarnation ended:", store.ReleasedAtStart())

	exec, err := pgstore.NewExecutor(store, nil) // the default lease, 30s: for a holder that never comes back
	if err != nil {
		panic(err)
	}
	key, err := idempotency.ComposeKey("usr_1", "sendInvoice", "5d1c7e0a-2f4b-4c8e-9a6d-1b3e5f7a9c0d")
	if err != nil {
		panic(err)
	}
	fp, err := idempotency.NewFingerprint().String("invoice", "inv_7").Sum()
	if err != nil {
		panic(err)
	}
	res, err := exec.Do(ctx, idempotency.Request{Scope: "usr_1", Key: key, Fingerprint: fp},
		func(ctx context.Context) (idempotency.Response, error) {
			return idempotency.Response{Code: 202, Body: []byte("sent")}, nil
		})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Response.Code, string(res.Response.Body))
	// Output:
	// leases of the previous incarnation ended: 0
	// 202 sent
}
