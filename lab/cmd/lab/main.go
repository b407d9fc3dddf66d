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
	"github.com/spf13/cobra"

	"github.com/payonce/payonce/internal/cli"
)

func main() { cli.Main(newRoot()) }

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
	}
	return cli.Root(root, "  lab help\n  lab help demo torture", `  source <(lab completion bash)`,
		newDemoCmd(), newFakeCmd())
}
