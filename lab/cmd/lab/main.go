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
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func main() {
	root := newRoot()
	root.SetArgs(os.Args[1:])
	if err := root.Execute(); err != nil {
		os.Exit(exitCode(err))
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
				return unknownSubcommand(c, args[0])
			}
			return nil
		},
		// No command: the usage on stderr, exit 2.
		RunE: func(c *cobra.Command, _ []string) error {
			c.SetOut(c.ErrOrStderr())
			_ = c.Help()
			return usageError{"no command given (see lab --help)"}
		},
	}
	root.AddCommand(newDemoCmd(), newFakeCmd())
	root.InitDefaultCompletionCmd()
	if c, _, err := root.Find([]string{"completion"}); err == nil {
		c.Args = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownSubcommand(c, args[0])
			}
			return usageError{"completion needs a shell: bash, zsh, fish or powershell (see lab completion --help)"}
		}
		c.RunE = func(*cobra.Command, []string) error { return nil } // Args refuses every call
		c.Example = `  source <(lab completion bash)`
	}
	setUp(root)
	return root
}

// Commands are listed in the order they are added (demo core, worker,
// torture; fake stripe, adyen, paypal).
func init() { cobra.EnableCommandSorting = false }

// setUp gives root and every command under it the lab's help, flag errors
// and suggestions, and keeps flags in the order they are defined.
func setUp(root *cobra.Command) {
	root.SilenceUsage, root.SilenceErrors = true, true
	root.SetHelpTemplate(helpTemplate)
	root.SetFlagErrorFunc(flagError)
	root.SetHelpCommand(helpCommand())
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.SuggestionsMinimumDistance = 2
		c.Flags().SortFlags = false
		c.PersistentFlags().SortFlags = false
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}

// helpTemplate is every command's --help: usage line, description,
// commands, flags, examples.
const helpTemplate = `Usage: {{.UseLine}}
{{with (or .Long .Short)}}
{{trimTrailingWhitespaces .}}
{{end}}{{if .HasAvailableSubCommands}}
Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding}} {{.Short}}{{end}}{{end}}
{{end}}{{if .HasAvailableLocalFlags}}
Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}
{{end}}{{if .HasAvailableInheritedFlags}}
Flags of {{.Parent.CommandPath}}:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}
{{end}}{{if .HasExample}}
Examples:
{{.Example}}
{{end}}{{if .HasAvailableSubCommands}}
Run {{.CommandPath}} COMMAND --help for a command's flags and examples.
{{end}}`

// helpCommand is "lab help [COMMAND...]": the command's --help, and a
// usage error for a command that does not exist.
func helpCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "help [COMMAND...]",
		Short:   "a command's usage, flags and examples",
		Example: `  lab help demo torture`,
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			target, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []cobra.Completion
			for _, s := range target.Commands() {
				if s.IsAvailableCommand() && strings.HasPrefix(s.Name(), toComplete) {
					names = append(names, cobra.CompletionWithDesc(s.Name(), s.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			target, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				msg := fmt.Sprintf("no help for %q", strings.Join(args, " "))
				if target != nil && len(rest) > 0 {
					if near := target.SuggestionsFor(rest[0]); len(near) > 0 {
						msg += "; did you mean " + orList(near) + "?"
					}
				}
				return usageError{msg + " (see lab --help)"}
			}
			target.InitDefaultHelpFlag()
			return target.Help()
		},
	}
}

// usageError is a bad command, flag or argument: exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// exitError ends the process with its own code.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// exitCode prints err and returns the exit code it calls for.
func exitCode(err error) int {
	fmt.Fprintln(os.Stderr, "lab:", err)
	var u usageError
	var x exitError
	switch {
	case errors.As(err, &u):
		return 2
	case errors.As(err, &x):
		return x.code
	}
	return 1
}

// name is c's path without the program's name ("demo torture").
func name(c *cobra.Command) string {
	if !c.HasParent() {
		return c.Name()
	}
	return strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
}

// flagError answers a flag that does not parse: a usage error naming it
// and, for a flag that does not exist, the command's flags nearest to it.
func flagError(c *cobra.Command, err error) error {
	msg := err.Error()
	var ne *pflag.NotExistError
	if errors.As(err, &ne) {
		typed := ne.GetSpecifiedName()
		if s := ne.GetSpecifiedShortnames(); len(s) > 1 {
			typed = s // -payments: a long name given one dash
		}
		if near := nearFlags(c, typed); len(near) > 0 {
			msg += "; did you mean " + orList(near) + "?"
		}
	}
	return usageError{fmt.Sprintf("%s: %s (see %s --help)", name(c), msg, c.CommandPath())}
}

// nearFlags are c's flags (as --name) that typed may have meant: within
// two edits, or starting with it; nearest first, three at most.
func nearFlags(c *cobra.Command, typed string) []string {
	typed = strings.ToLower(strings.TrimLeft(typed, "-"))
	type near struct {
		name string
		dist int
	}
	var found []near
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := levenshtein(typed, f.Name)
		if d <= 2 || len(typed) >= 2 && strings.HasPrefix(f.Name, typed) {
			found = append(found, near{"--" + f.Name, d})
		}
	})
	slices.SortStableFunc(found, func(a, b near) int { return a.dist - b.dist })
	var names []string
	for i := 0; i < len(found) && i < 3; i++ {
		names = append(names, found[i].name)
	}
	return names
}

// levenshtein is the edit distance between a and b (insertions, deletions,
// substitutions of bytes).
func levenshtein(a, b string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		diag := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			diag, row[j] = row[j], min(row[j]+1, row[j-1]+1, diag+cost)
		}
	}
	return row[len(b)]
}

// orList writes "a", "a or b", "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// noArgs is the positional-argument check of a command that takes none.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return usageError{fmt.Sprintf("%s: unexpected argument %q (see %s --help)", name(c), args[0], c.CommandPath())}
}

// unknownSubcommand is the usage error for typed, not one of c's
// subcommands, with cobra's suggestions.
func unknownSubcommand(c *cobra.Command, typed string) error {
	msg := fmt.Sprintf("unknown command %q for %q", typed, c.CommandPath())
	if near := c.SuggestionsFor(typed); len(near) > 0 {
		msg += "; did you mean " + orList(near) + "?"
	}
	return usageError{fmt.Sprintf("%s (see %s --help)", msg, c.CommandPath())}
}

// signalContext is canceled by an interrupt (Ctrl-C) or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
