package ledger_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/money"
)

// exampleLedger returns a Ledger on a fresh schema of TEST_DATABASE_URL
// and a function that drops the schema.
func exampleLedger(ctx context.Context) (*ledger.Ledger, *pgxpool.Pool, func()) {
	cfg, err := pgxpool.ParseConfig(os.Getenv("TEST_DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "example_" + hex.EncodeToString(b[:])
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		panic(fmt.Sprintf("TEST_DATABASE_URL (run with `make test`): %v", err))
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		panic(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		panic(err)
	}
	l, err := ledger.New(pool, nil)
	if err != nil {
		panic(err)
	}
	return l, pool, func() {
		pool.Close()
		_, _ = admin.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
		_ = admin.Close(ctx)
	}
}

// Payments records a charge and a refund, each inside its own transaction.
func Example() {
	ctx := context.Background()
	l, pool, done := exampleLedger(ctx)
	defer done()

	for _, a := range ledger.ChartAccounts("stripe", money.EUR) {
		if _, err := l.EnsureAccount(ctx, a); err != nil {
			panic(err)
		}
	}

	charge, err := ledger.ChargeEntry("usr_7fQ9x_checkout_a1b2", "stripe", money.MustParse("25.00", money.EUR))
	if err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// ... the intent and the idempotency record are updated here ...
		res, err := l.PostTx(ctx, tx, charge)
		if err == nil {
			fmt.Println("charge entry:", len(res.Entry.Postings), "postings, replayed:", res.Replayed)
		}
		return err
	})
	if err != nil {
		panic(err)
	}

	// A retry of the same action posts nothing new.
	res, err := l.Post(ctx, charge)
	if err != nil {
		panic(err)
	}
	fmt.Println("retry replayed:", res.Replayed)

	refund, err := ledger.RefundEntry("usr_7fQ9x_refund_c3d4", "stripe", money.MustParse("5.50", money.EUR))
	if err != nil {
		panic(err)
	}
	if _, err := l.Post(ctx, refund); err != nil {
		panic(err)
	}

	for _, code := range []string{ledger.ProviderCash("stripe"), ledger.CustomerPayments, ledger.CustomerRefunds} {
		b, err := l.Balance(ctx, code, money.EUR)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-18s %s\n", code, b)
	}

	// The same key with another amount is refused.
	other, _ := ledger.ChargeEntry("usr_7fQ9x_checkout_a1b2", "stripe", money.MustParse("26.00", money.EUR))
	_, err = l.Post(ctx, other)
	fmt.Println(errors.Is(err, ledger.ErrKeyConflict))

	// Output:
	// charge entry: 2 postings, replayed: false
	// retry replayed: true
	// provider:stripe    19.50 EUR
	// customer:payments  -25.00 EUR
	// customer:refunds   5.50 EUR
	// true
}
