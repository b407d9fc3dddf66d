// Command lab is payonce's workshop: the demos that prove the SDK under
// faults, and the providers' stateful fakes as servers. It is not the
// operator CLI (cmd/payonce), which links none of this.
//
//	lab demo                      the checkout storm (make demo)
//	lab demo core                 the idempotency core alone
//	lab demo worker               River jobs through the inbox, a worker killed
//	lab demo torture              faults on every link, workers killed (make torture)
//	lab fake stripe|adyen|paypal  a stateful fake of a provider's API
//
// Exit codes: 0 success; 1 failure (a demo exits 1 on any duplicate charge
// or books that differ from the provider's); 2 usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

const usage = `lab: payonce's workshop (demos and provider fakes)

Usage:
  lab demo                      a checkout storm through payonce's payments API
                                against the providers' fakes, then checkouts as
                                sagas, its worker killed midway in each; exits 1 on
                                any duplicate charge, unbalanced books, unfinished
                                checkout or oversold stock
  lab demo core                 concurrent duplicates through the idempotency core
  lab demo worker               River jobs through the inbox, the worker killed midway
  lab demo torture              Toxiproxy on every link, workers killed at random,
                                two reconcilers, 10,000 intents (make torture)
  lab fake stripe|adyen|paypal  a stateful fake of the provider's API

Run lab COMMAND --help for a command's flags and examples. The database is
DATABASE_URL or --database-url; without either, a demo starts a throwaway
PostgreSQL from the local binaries.

Examples:
  make demo
  go run ./cmd/lab demo --payments 2000 --seed 7
  go run ./cmd/lab fake adyen --addr 127.0.0.1:0
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	root := newRoot()
	root.SetArgs(os.Args[1:])
	if err := root.Execute(); err != nil {
		if strings.HasPrefix(err.Error(), "unknown command ") {
			fmt.Fprintf(os.Stderr, "lab: unknown command %q\n\n%s", os.Args[1], usage)
			os.Exit(2)
		}
		os.Exit(exitCode(err))
	}
}

var commands = []struct {
	name, usage string
	run         func(args []string) error
	args        []string
}{
	{"demo", demoUsage, runDemo, []string{"core", "worker", "torture"}},
	{"fake", fakeUsage, runFake, []string{"stripe", "adyen", "paypal"}},
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "lab",
		Short:         "payonce's workshop: demos and provider fakes",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE:          func(*cobra.Command, []string) error { fmt.Print(usage); return nil },
	}
	root.SetHelpFunc(func(c *cobra.Command, _ []string) {
		for _, cmd := range commands {
			if cmd.name == c.Name() {
				fmt.Print(cmd.usage)
				return
			}
		}
		fmt.Print(usage)
	})
	for _, c := range commands {
		root.AddCommand(&cobra.Command{
			Use:                c.name,
			Short:              strings.SplitN(strings.TrimPrefix(c.usage, "Usage: "), "\n", 2)[0],
			DisableFlagParsing: true, // the command's own flag set, its --help and its exit codes
			ValidArgs:          c.args,
			RunE:               func(_ *cobra.Command, args []string) error { return c.run(args) },
		})
	}
	return root
}

// exitCode prints err and returns the exit code it calls for.
func exitCode(err error) int {
	var u usageError
	var x exitError
	switch {
	case errors.Is(err, errHelp):
		return 0
	case errors.As(err, &u) && u.msg == flag.ErrHelp.Error():
		return 0
	case errors.As(err, &u):
		fmt.Fprintln(os.Stderr, "lab:", err)
		return 2
	case errors.As(err, &x):
		fmt.Fprintln(os.Stderr, "lab:", err)
		return x.code
	}
	fmt.Fprintln(os.Stderr, "lab:", err)
	return 1
}

// exitError ends the process with its own code.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// errHelp is returned after a command printed its usage for --help.
var errHelp = errors.New("help requested")

// signalContext is canceled by an interrupt (Ctrl-C) or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func databaseURL(fs *flag.FlagSet) *string {
	return fs.String("database-url", "", "PostgreSQL URL (default $DATABASE_URL)")
}

// parseFlags parses args, whose flags may come before, between or after
// the positional arguments (a "--" ends the flags), and returns the
// positional arguments. For -h or --help it prints usage to stdout and
// returns errHelp; a bad flag is a usageError that names it.
func parseFlags(fs *flag.FlagSet, usage string, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var pos []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fmt.Print(usage)
			return nil, errHelp
		}
		if err != nil {
			return nil, usageError{fmt.Sprintf("%s: %v (see lab %s --help)", fs.Name(), err, fs.Name())}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}
