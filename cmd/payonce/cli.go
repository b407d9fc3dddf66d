package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The CLI's plumbing on cobra and pflag: the help every command prints,
// the usage errors (exit 2) with the flag or command meant for a near
// miss, and the database flag.

// helpTemplate is every command's --help: usage line, description,
// commands, flags, examples (cobra's default puts the description first
// and the examples before the flags).
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

// usageError is a bad command, flag or argument: exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// exitError ends the process with its own code (see the exit codes in
// payonce --help).
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// exitCode prints err and returns the exit code it calls for.
func exitCode(err error) int {
	fmt.Fprintln(os.Stderr, "payonce:", err)
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

// name is c's path without the program's name ("migrate up"), as errors
// name the command.
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
			typed = s // -older-than: a long name given one dash
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

// subcommandArgs is the argument check of a command that only groups
// subcommands (migrate, completion): called without one, or with one it
// does not have, it is a usage error.
func subcommandArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return unknownSubcommand(c, args[0])
	}
	var names []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return usageError{fmt.Sprintf("%s needs a subcommand: %s (see %s --help)", name(c), orList(names), c.CommandPath())}
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

// addDatabaseURL defines --database-url on flags (a command's own, or the
// persistent flags its subcommands share), stored in p.
func addDatabaseURL(c *cobra.Command, flags *pflag.FlagSet, p *string) {
	flags.StringVar(p, "database-url", "", "PostgreSQL URL (default $DATABASE_URL)")
	_ = c.RegisterFlagCompletionFunc("database-url", cobra.NoFileCompletions)
}

// completeWords completes a flag's value from a fixed list.
func completeWords(c *cobra.Command, flag string, words ...string) {
	_ = c.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(words, cobra.ShellCompDirectiveNoFileComp))
}

// helpCommand is "payonce help [COMMAND...]": the command's --help, and a
// usage error for a command that does not exist.
func helpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND...]",
		Short: "a command's usage, flags and examples",
		Example: `  payonce help
  payonce help migrate up`,
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
						msg += "; did you mean " + orList(near) + "?"
					}
				}
				return usageError{msg + " (see " + c.Root().Name() + " --help)"}
			}
			target.InitDefaultHelpFlag()
			return target.Help()
		},
	}
}

// Commands are listed (in help and completion) in the order they are
// added: migrate's up, status, print, as the docs name them.
func init() { cobra.EnableCommandSorting = false }

// setUp gives root and every command under it payonce's help, flag
// errors and suggestions, and keeps flags and commands in the order they
// are defined.
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
