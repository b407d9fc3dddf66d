// Package cli is the plumbing that payonce's two command-line programs
// share, the operator CLI (cmd/payonce) and the lab (lab/cmd/lab): the help
// every command prints, usage errors (exit 2) with the flag or command meant
// for a near miss, exit codes, the database flag and a progress bar. It is a
// module of its own, so that cobra, pflag and the progress bar stay out of
// the SDK's module graph.
package cli

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

// HelpTemplate is every command's --help: usage line, description,
// commands, flags, examples (cobra's default puts the description first
// and the examples before the flags).
const HelpTemplate = `Usage: {{.UseLine}}
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

// UsageError is a bad command, flag or argument: exit 2.
type UsageError struct{ Msg string }

func (e UsageError) Error() string { return e.Msg }

// Usage is a UsageError saying msg.
func Usage(msg string) error { return UsageError{Msg: msg} }

// Exit is an ExitError: err, and the process exits with code.
func Exit(code int, err error) error { return ExitError{Code: code, Err: err} }

// ExitError ends the process with its own code (see the exit codes in
// each program's --help).
type ExitError struct {
	Code int
	Err  error
}

func (e ExitError) Error() string { return e.Err.Error() }
func (e ExitError) Unwrap() error { return e.Err }

// ExitCode prints err after the program's name and returns the exit code
// it calls for: 2 for a UsageError, an ExitError's own, 1 otherwise.
func ExitCode(program string, err error) int {
	fmt.Fprintln(os.Stderr, program+":", err)
	var u UsageError
	var x ExitError
	switch {
	case errors.As(err, &u):
		return 2
	case errors.As(err, &x):
		return x.Code
	}
	return 1
}

// Name is c's path without the program's name ("migrate up"), as errors
// Name the command.
func Name(c *cobra.Command) string {
	if !c.HasParent() {
		return c.Name()
	}
	return strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
}

// FlagError answers a flag that does not parse: a usage error naming it
// and, for a flag that does not exist, the command's flags nearest to it.
func FlagError(c *cobra.Command, err error) error {
	msg := err.Error()
	var ne *pflag.NotExistError
	if errors.As(err, &ne) {
		typed := ne.GetSpecifiedName()
		if s := ne.GetSpecifiedShortnames(); len(s) > 1 {
			typed = s // -older-than: a long name given one dash
		}
		if near := NearFlags(c, typed); len(near) > 0 {
			msg += "; did you mean " + OrList(near) + "?"
		}
	}
	return UsageError{Msg: fmt.Sprintf("%s: %s (see %s --help)", Name(c), msg, c.CommandPath())}
}

// NearFlags are c's flags (as --name) that typed may have meant: within
// two edits, or starting with it; nearest first, three at most.
func NearFlags(c *cobra.Command, typed string) []string {
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
		d := Levenshtein(typed, f.Name)
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

// Levenshtein is the edit distance between a and b (insertions, deletions,
// substitutions of bytes).
func Levenshtein(a, b string) int {
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

// OrList writes "a", "a or b", "a, b or c".
func OrList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// NoArgs is the positional-argument check of a command that takes none.
func NoArgs(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return UsageError{Msg: fmt.Sprintf("%s: unexpected argument %q (see %s --help)", Name(c), args[0], c.CommandPath())}
}

// SubcommandArgs is the argument check of a command that only groups
// subcommands (migrate, completion): called without one, or with one it
// does not have, it is a usage error.
func SubcommandArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return UnknownSubcommand(c, args[0])
	}
	var names []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return UsageError{Msg: fmt.Sprintf("%s needs a subcommand: %s (see %s --help)", Name(c), OrList(names), c.CommandPath())}
}

// UnknownSubcommand is the usage error for typed, not one of c's
// subcommands, with cobra's suggestions.
func UnknownSubcommand(c *cobra.Command, typed string) error {
	msg := fmt.Sprintf("unknown command %q for %q", typed, c.CommandPath())
	if near := c.SuggestionsFor(typed); len(near) > 0 {
		msg += "; did you mean " + OrList(near) + "?"
	}
	return UsageError{Msg: fmt.Sprintf("%s (see %s --help)", msg, c.CommandPath())}
}

// AddDatabaseURL defines --database-url on flags (a command's own, or the
// persistent flags its subcommands share), stored in p.
func AddDatabaseURL(c *cobra.Command, flags *pflag.FlagSet, p *string) {
	flags.StringVar(p, "database-url", "", "PostgreSQL URL (default $DATABASE_URL)")
	_ = c.RegisterFlagCompletionFunc("database-url", cobra.NoFileCompletions)
}

// CompleteWords completes a flag's value from a fixed list.
func CompleteWords(c *cobra.Command, flag string, words ...string) {
	_ = c.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(words, cobra.ShellCompDirectiveNoFileComp))
}

// HelpCommand is "PROGRAM help [COMMAND...]": the command's --help, and a
// usage error for a command that does not exist. example is its Example.
func HelpCommand(example string) *cobra.Command {
	return &cobra.Command{
		Use:     "help [COMMAND...]",
		Short:   "a command's usage, flags and examples",
		Example: example,
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
				parent := target
				if parent == nil {
					parent = c.Root()
				}
				msg := fmt.Sprintf("no help for %q", strings.Join(args, " "))
				if len(rest) > 0 {
					if near := parent.SuggestionsFor(rest[0]); len(near) > 0 {
						msg += "; did you mean " + OrList(near) + "?"
					}
				}
				return UsageError{Msg: msg + " (see " + c.Root().Name() + " --help)"}
			}
			target.InitDefaultHelpFlag()
			return target.Help()
		},
	}
}

// Commands are listed (in help and completion) in the order they are
// added (migrate's up, status, print, as the docs name them).
func init() { cobra.EnableCommandSorting = false }

// SignalContext is canceled by an interrupt (Ctrl-C) or SIGTERM.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// Root makes root, with its Use, Short, Long and Example, a program's root
// command: cmds under it, "help" (helpExample is its Example) and cobra's
// "completion SHELL" (completionExample is its Example), the programs' help
// and flag errors (SetUp), and a usage error for no command or an unknown
// one.
func Root(root *cobra.Command, helpExample, completionExample string, cmds ...*cobra.Command) *cobra.Command {
	root.Args = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return UnknownSubcommand(c, args[0])
		}
		return nil
	}
	// No command: the usage on stderr, exit 2.
	root.RunE = func(c *cobra.Command, _ []string) error {
		c.SetOut(c.ErrOrStderr())
		_ = c.Help()
		return Usage("no command given (see " + c.Name() + " --help)")
	}
	root.AddCommand(cmds...)
	// cobra's completion command, with the programs' usage errors.
	root.InitDefaultCompletionCmd()
	if c, _, err := root.Find([]string{"completion"}); err == nil {
		c.Args = SubcommandArgs
		c.RunE = func(*cobra.Command, []string) error { return nil } // SubcommandArgs refuses every call
		c.Example = completionExample
	}
	SetUp(root, helpExample)
	return root
}

// Main runs root on the process's arguments and exits with the code its
// error calls for (ExitCode).
func Main(root *cobra.Command) {
	root.SetArgs(os.Args[1:])
	if err := root.Execute(); err != nil {
		os.Exit(ExitCode(root.Name(), err))
	}
}

// SetUp gives root and every command under it the programs' help, flag
// errors and suggestions, and keeps flags in the order they are defined;
// helpExample is the help command's Example.
func SetUp(root *cobra.Command, helpExample string) {
	root.SilenceUsage, root.SilenceErrors = true, true
	root.SetHelpTemplate(HelpTemplate)
	root.SetFlagErrorFunc(FlagError)
	root.SetHelpCommand(HelpCommand(helpExample))
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
