package saga_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/saga"
)

// A three-step saga whose last step fails for good: the steps done are
// compensated in reverse order, and a retry gets the same answer.
func Example() {
	ctx := context.Background()
	pool, done := pgtest.ExamplePool(ctx)
	defer done()
	if _, err := pool.Exec(ctx, `CREATE TABLE journal (id INT GENERATED ALWAYS AS IDENTITY, entry TEXT NOT NULL)`); err != nil {
		panic(err)
	}
	write := func(entry string) saga.ActionFunc {
		return func(ctx context.Context, c *saga.Call) (any, error) {
			_, err := c.Tx.Exec(ctx, `INSERT INTO journal (entry) VALUES ($1)`, entry+" "+c.Key)
			return map[string]string{"entry": entry}, err
		}
	}
	undo := func(entry string) saga.CompensateFunc {
		return func(ctx context.Context, c *saga.Call) error {
			_, err := c.Tx.Exec(ctx, `INSERT INTO journal (entry) VALUES ($1)`, "undo "+entry+" "+c.Key)
			return err
		}
	}

	orch, err := saga.New(pool, nil)
	if err != nil {
		panic(err)
	}
	err = orch.Register(saga.Definition{Name: "signup", Steps: []saga.Step{
		{Name: "account", Kind: saga.Local, Action: write("account"), Compensate: undo("account")},
		{Name: "mailbox", Kind: saga.Local, Action: write("mailbox"), Compensate: undo("mailbox")},
		{Name: "welcome", Kind: saga.Remote, Action: func(context.Context, *saga.Call) (any, error) {
			return nil, saga.Fail(errors.New("mail server refused the address"))
		}},
	}})
	if err != nil {
		panic(err)
	}

	p := saga.RunParams{Saga: "signup", Scope: "tenant-1", Key: "signup-42", Input: map[string]string{"email": "a@example.com"}}
	res, err := orch.Run(ctx, p)
	fmt.Println(res.Status, res.FailedStep, errors.Is(err, saga.ErrRolledBack))
	for _, s := range res.Steps {
		fmt.Println(s.Name, s.Status)
	}
	rows, _ := pool.Query(ctx, `SELECT entry FROM journal ORDER BY id`)
	for rows.Next() {
		var e string
		_ = rows.Scan(&e)
		fmt.Println(e)
	}
	again, _ := orch.Run(ctx, p)
	fmt.Println(again.Replayed, string(again.Body) == string(res.Body))
	// Output:
	// ROLLED_BACK welcome true
	// account COMPENSATED
	// mailbox COMPENSATED
	// welcome FAILED
	// account signup-42_account
	// mailbox signup-42_mailbox
	// undo mailbox signup-42_mailbox_compensate
	// undo account signup-42_account_compensate
	// true true
}
