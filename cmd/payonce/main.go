// Command payonce is the operator CLI of payonce.
//
//	payonce migrate up|status|print   apply, inspect or print the schema
//	payonce stuck                     records stuck PROCESSING
//	payonce release SCOPE KEY         release a stuck record's lease (audited)
//	payonce prune                     delete expired records now
//	payonce reconcile                 one reconciler run now, its report printed
//	payonce report                    past reconciler runs and their divergences
//	payonce resolve SCOPE KEY         settle an intent under review (audited)
//	payonce design                    the idempotency design document
//
// Every command takes --help (usage and an example); "payonce completion
// bash|zsh|fish|powershell" prints a shell completion script. Exit codes: 0
// success; 1 failure; 2 usage error (including no database given); 3
// release or resolve refused by the record's state, nothing changed.
//
// The operator binary links no provider fake, no PostgreSQL starter and no
// chaos proxy: the demos and the fakes are the lab's (lab/cmd/lab).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

const usage = `payonce: the operator CLI of payonce

Usage:
  payonce migrate up|status|print   apply, inspect or print the schema
  payonce stuck                     list idempotency records stuck PROCESSING (lease
                                    ended, never reclaimed), keys hashed unless --show-keys
  payonce release SCOPE KEY         release one stuck record's lease after confirmation,
                                    fenced by its lock version, audited in operator_audit
  payonce prune                     one pass deleting expired records, in batches
  payonce reconcile                 run the reconciler once now: repair what the providers
                                    prove, flag the rest; --format table|json|csv
  payonce report                    past reconciler runs and their divergences, filtered
                                    by --kind, --provider, --min-age, --run
  payonce resolve SCOPE KEY         settle an intent flagged NEEDS_REVIEW with your decision
                                    (ledger entry, record, audit row in one transaction)
  payonce design                    the idempotency design document of your system (HTML
                                    or Markdown) from your answers and a scan of your code

Run payonce COMMAND --help (or payonce help COMMAND) for a command's flags and
examples. Shell completion: source <(payonce completion bash) (or zsh, fish,
powershell).

The database is DATABASE_URL or --database-url (without either, commands
that need one refuse with exit 2). The demos and the providers' fakes are
payonce's lab: make demo, or go run ./lab/cmd/lab --help.

Examples:
  DATABASE_URL=postgres://app@db/app payonce migrate up
  payonce migrate print > payonce.sql
  payonce stuck --older-than 10m
  payonce release usr_7fQ9x usr_7fQ9x_charge_order42 --reason INC-1234
  payonce prune --batch 5000
  payonce reconcile --format table
  payonce report --kind "several charges at provider" --format csv

Exit codes:
  0  success (stuck: whether or not it finds records)
  1  failure (release: no such record, not confirmed)
  2  usage error: bad command, flag or argument, no database given, release
     without --yes when stdin is not a terminal
  3  release refused: the record is not PROCESSING, its lease is live (without
     --force) or it changed after it was shown; resolve refused: the intent is
     not under review; nothing changed
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
			fmt.Fprintf(os.Stderr, "payonce: unknown command %q\n\n%s", os.Args[1], usage)
			os.Exit(2)
		}
		os.Exit(exitCode(err))
	}
}

// commands are payonce's subcommands: each parses its own flags (and
// prints its own --help), cobra dispatches, completes and documents them.
var commands = []struct {
	name string
	run  func(args []string) error
	// args completes the first argument in the shell.
	args []string
}{
	{"migrate", runMigrate, []string{"up", "status", "print"}},
	{"stuck", runStuck, nil},
	{"release", runRelease, nil},
	{"prune", runPrune, nil},
	{"reconcile", runReconcile, nil},
	{"report", runReport, nil},
	{"resolve", runResolve, nil},
	{"design", runDesign, nil},
}

// newRoot is the CLI on cobra (spf13/cobra): dispatch, "help COMMAND", and
// shell completion ("payonce completion bash|zsh|fish|powershell").
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "payonce",
		Short:         "the operator CLI of payonce",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE:          func(*cobra.Command, []string) error { fmt.Print(usage); return nil },
	}
	root.SetHelpFunc(func(c *cobra.Command, _ []string) {
		if u, ok := commandUsage[c.Name()]; ok {
			fmt.Print(u)
			return
		}
		fmt.Print(usage)
	})
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "a command's usage and examples",
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			var names []cobra.Completion
			for _, c := range commands {
				names = append(names, c.name)
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				fmt.Print(usage)
				return nil
			}
			if u, ok := commandUsage[args[0]]; ok {
				fmt.Print(u)
				return nil
			}
			fmt.Fprintf(os.Stderr, "payonce: no help for %q\n\n%s", args[0], usage)
			return exitError{code: 2, err: fmt.Errorf("no help for %q", args[0])}
		},
	})
	for _, c := range commands {
		root.AddCommand(&cobra.Command{
			Use:                c.name,
			Short:              strings.SplitN(strings.TrimPrefix(commandUsage[c.name], "Usage: "), "\n", 2)[0],
			DisableFlagParsing: true, // the command's own flag set, its --help and its exit codes
			ValidArgs:          c.args,
			RunE:               func(_ *cobra.Command, args []string) error { return c.run(args) },
		})
	}
	return root
}

// commandUsage is what payonce help COMMAND prints.
var commandUsage = map[string]string{
	"migrate": migrateUsage,
	"stuck":   stuckUsage, "release": releaseUsage, "prune": pruneUsage,
	"reconcile": reconcileUsage, "report": reportUsage, "resolve": resolveUsage,
	"design": designUsage,
}

// exitCode prints err and returns the exit code it calls for.
func exitCode(err error) int {
	var u usageError
	var x exitError
	switch {
	case errors.Is(err, errHelp):
		return 0 // the usage is printed
	case asUsage(err, &u) && u.msg == flag.ErrHelp.Error():
		return 0 // a command whose flag set printed its usage for -h
	case asUsage(err, &u):
		fmt.Fprintln(os.Stderr, "payonce:", err)
		return 2
	case errors.As(err, &x):
		fmt.Fprintln(os.Stderr, "payonce:", err)
		return x.code
	}
	fmt.Fprintln(os.Stderr, "payonce:", err)
	return 1
}

// exitError ends the process with its own code (see the exit codes in
// the usage).
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func asUsage(err error, u *usageError) bool {
	x, ok := err.(usageError)
	if ok {
		*u = x
	}
	return ok
}

// signalContext is canceled by an interrupt (Ctrl-C) or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
