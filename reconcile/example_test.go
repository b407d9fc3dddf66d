package reconcile_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/reconcile"
)

// Scheduling the reconciler next to the service: every minute, on every
// instance (they never examine the same intent at once), with metrics and
// logs. (Compiled, not run: it needs a database and providers.)
func Example() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	var client *payments.Client // the service's, from payments.New with its providers
	r, err := reconcile.New(pool, client, &reconcile.Config{
		Spec:   "@every 1m",
		Grace:  2 * time.Minute, // leave young intents to their callers' retries
		Logger: slog.Default(),
	})
	if err != nil {
		panic(err)
	}
	stop := r.Start(ctx)
	defer stop()

	// Or one run now, e.g. from a job:
	rep, err := r.RunOnce(ctx)
	if err == nil {
		fmt.Println(rep.Examined, rep.Repaired, rep.NeedsReview)
	}
}
