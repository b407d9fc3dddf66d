// Command payonce is the operator CLI of payonce.
//
//	payonce demo                      the checkout storm (make demo)
//	payonce demo core                 the idempotency core alone
//	payonce migrate up|status|print   apply, inspect or print the schema
//	payonce fake stripe [--addr A]    a stateful fake of Stripe's API
//
// Exit codes: 0 success; 1 failure (the demo exits 1 on any duplicate
// charge or books that differ from the provider's); 2 usage error.
package main

import (
	"fmt"
	"os"
)

const usage = `payonce: the operator CLI of payonce

Usage:
  payonce demo                      a checkout storm through payonce's payments API
                                    against the Stripe fake, its worker killed midway;
                                    exits 1 on any duplicate charge or unbalanced books
  payonce demo core                 concurrent duplicates through the idempotency core
  payonce migrate up|status|print   apply, inspect or print the schema
  payonce fake stripe [--addr A]    a stateful fake of Stripe's API

The database is DATABASE_URL or --database-url (demo starts a throwaway
PostgreSQL when neither is given).

Examples:
  make demo
  DATABASE_URL=postgres://app@db/app payonce migrate up
  payonce migrate print > payonce.sql

Exit codes: 0 success, 1 failure, 2 usage error.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "demo":
		err = runDemo(os.Args[2:])
	case "migrate":
		err = runMigrate(os.Args[2:])
	case "fake":
		err = runFake(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "payonce: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		var u usageError
		if asUsage(err, &u) {
			fmt.Fprintln(os.Stderr, "payonce:", err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "payonce:", err)
		os.Exit(1)
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func asUsage(err error, u *usageError) bool {
	x, ok := err.(usageError)
	if ok {
		*u = x
	}
	return ok
}
