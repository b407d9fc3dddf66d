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
// Commands and flags are cobra's and pflag's, as in the operator CLI:
// --help everywhere, the command or flag meant for a near miss, and "lab
// completion bash|zsh|fish|powershell".
//
// Exit codes: 0 success; 1 failure (a demo exits 1 on any duplicate charge
// or books that differ from the provider's); 2 usage error.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/payonce/payonce/internal/cli"
)

func main() {
	root := newRoot()
	root.SetArgs(os.Args[1:])
	if err := root.Execute(); err != nil {
		os.Exit(cli.ExitCode("lab", err))
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "lab COMMAND",
		Short: "payonce's workshop: demos and provider fakes",
		Long: `lab: payonce's workshop (demos and provider fakes).

The database is DATABASE_URL or --database-url; without either, a demo
starts a throwaway PostgreSQL from the local binaries.

Exit codes: 0 success; 1 failure (a demo exits 1 on any duplicate charge or
books that differ from the provider's); 2 usage error.`,
		Example: `  make demo
  go run ./cmd/lab demo --payments 2000 --seed 7
  go run ./cmd/lab fake adyen --addr 127.0.0.1:0`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cli.UnknownSubcommand(c, args[0])
			}
			return nil
		},
		// No command: the usage on stderr, exit 2.
		RunE: func(c *cobra.Command, _ []string) error {
			c.SetOut(c.ErrOrStderr())
			_ = c.Help()
			return cli.Usage("no command given (see lab --help)")
		},
	}
	root.AddCommand(newDemoCmd(), newFakeCmd())
	root.InitDefaultCompletionCmd()
	if c, _, err := root.Find([]string{"completion"}); err == nil {
		c.Args = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cli.UnknownSubcommand(c, args[0])
			}
			return cli.Usage("completion needs a shell: bash, zsh, fish or powershell (see lab completion --help)")
		}
		c.RunE = func(*cobra.Command, []string) error { return nil } // Args refuses every call
		c.Example = `  source <(lab completion bash)`
	}
	cli.SetUp(root, "  lab help\n  lab help demo torture")
	return root
}
