package ledger_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/pgtest"
)

// exampleLedger returns a Ledger on a fresh, migrated schema of
// TEST_DATABASE_URL and a function that drops the schema.
func exampleLedger(ctx context.Context) (*ledger.Ledger, *pgxpool.Pool, func()) {
	pool, done := pgtest.ExamplePool(ctx)
	l, err := ledger.New(pool, nil)
	if err != nil {
		panic(err)
	}
	return l, pool, done
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
