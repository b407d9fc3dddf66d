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
// Commands and flags are cobra's and pflag's: every command takes --help
// (usage, flags and examples; "payonce help COMMAND" prints the same), a
// mistyped command or flag is answered with the one meant, and "payonce
// completion bash|zsh|fish|powershell" prints a shell completion script
// that completes commands, flags and their values. Exit codes: 0 success;
// 1 failure; 2 usage error (including no database given); 3 release or
// resolve refused by the record's state, nothing changed.
//
// The operator binary links no provider fake, no PostgreSQL starter and no
// chaos proxy: the demos and the fakes are the lab's (lab/cmd/lab).
package main

import (
	"github.com/spf13/cobra"

	"github.com/payonce/payonce/internal/cli"
)

func main() { cli.Main(newRoot()) }

// newRoot is the CLI: its commands, help and shell completion.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "payonce COMMAND",
		Short: "the operator CLI of payonce",
		Long: `payonce: the operator CLI of payonce. It applies the schema, lists and
releases idempotency records stuck PROCESSING, prunes expired records, runs
the reconciler and reads its reports, settles payment intents under review,
and writes the idempotency design document of your system.

The database is DATABASE_URL or --database-url (without either, commands
that need one refuse with exit 2). The demos and the providers' fakes are
payonce's lab: make demo, or go run ./lab/cmd/lab --help.

Shell completion of commands, flags and their values:
source <(payonce completion bash) (or zsh, fish, powershell).

Exit codes:
  0  success (stuck: whether or not it finds records)
  1  failure (release: no such record, not confirmed)
  2  usage error: bad command, flag or argument, no database given, release
     without --yes when stdin is not a terminal
  3  release refused: the record is not PROCESSING, its lease is live (without
     --force) or it changed after it was shown; resolve refused: the intent is
     not under review; nothing changed`,
		Example: `  DATABASE_URL=postgres://app@db/app payonce migrate up
  payonce migrate print > payonce.sql
  payonce stuck --older-than 10m
  payonce release usr_7fQ9x usr_7fQ9x_charge_order42 --reason INC-1234
  payonce prune --batch 5000
  payonce reconcile --format table
  payonce report --kind "several charges at provider" --format csv`,
	}
	return cli.Root(root, "  payonce help\n  payonce help migrate up", `  source <(payonce completion bash)
  payonce completion zsh > "${fpath[1]}/_payonce"`,
		newMigrateCmd(), newStuckCmd(), newReleaseCmd(), newPruneCmd(),
		newReconcileCmd(), newReportCmd(), newResolveCmd(), newDesignCmd())
}
