package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/payonce/payonce/internal/cli"
	"github.com/payonce/payonce/migrations"
)

// newMigrateCmd is payonce migrate and its subcommands, which share
// --database-url.
func newMigrateCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "migrate up|status|print",
		Short: "apply, inspect or print the schema",
		Long: `Applies payonce's schema, lists its versions, or prints it as SQL for your
own migration tool. The schema comes in lines: idempotency (the core), ledger,
payments (needs idempotency and ledger), saga (needs idempotency) and
replaycache (the triggers an executor's replay cache needs; needs
idempotency). Without --line every line is applied; with it, the lines named
and those they need.`,
		Example: `  DATABASE_URL=postgres://app@db/app payonce migrate up
  payonce migrate up --line idempotency     # a core-only service
  payonce migrate status --database-url postgres://app@db/app
  payonce migrate print --line payments > payonce.sql`,
		Args: cli.SubcommandArgs,
		RunE: func(*cobra.Command, []string) error { return nil }, // cli.SubcommandArgs refuses every call
	}
	var dbURL string
	var lineNames []string
	cli.AddDatabaseURL(c, c.PersistentFlags(), &dbURL)
	c.PersistentFlags().StringSliceVar(&lineNames, "line", nil,
		"schema lines to apply, list or print, with the lines they need: idempotency, ledger, payments, saga, replaycache (default: all)")
	_ = c.RegisterFlagCompletionFunc("line", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		var names []cobra.Completion
		for _, l := range migrations.Lines() {
			names = append(names, string(l))
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	})
	c.AddCommand(
		&cobra.Command{
			Use:     "up",
			Short:   "apply every version not yet applied (safe when several processes run it at once)",
			Example: `  DATABASE_URL=postgres://app@db/app payonce migrate up`,
			Args:    cli.NoArgs,
			RunE:    func(*cobra.Command, []string) error { return migrate(dbURL, lineNames, true) },
		},
		&cobra.Command{
			Use:     "status",
			Short:   "list the versions and whether each is applied",
			Example: `  payonce migrate status --database-url postgres://app@db/app`,
			Args:    cli.NoArgs,
			RunE:    func(*cobra.Command, []string) error { return migrate(dbURL, lineNames, false) },
		},
		&cobra.Command{
			Use:     "print",
			Short:   "print the whole schema as SQL, for your own migration tool (needs no database)",
			Example: `  payonce migrate print > payonce.sql`,
			Args:    cli.NoArgs,
			RunE: func(*cobra.Command, []string) error {
				lines, err := parseLines(lineNames)
				if err != nil {
					return err
				}
				sql, err := migrations.SQLLines(lines...)
				if err != nil {
					return err
				}
				fmt.Print(sql)
				return nil
			},
		},
	)
	return c
}

func resolveURL(flagURL string) (string, error) {
	if flagURL != "" {
		return flagURL, nil
	}
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u, nil
	}
	return "", cli.Usage("no database: set DATABASE_URL or pass --database-url")
}

// parseLines reads --line: every line when none is named.
func parseLines(names []string) ([]migrations.Line, error) {
	if len(names) == 0 {
		return migrations.Lines(), nil
	}
	var lines []migrations.Line
	for _, n := range names {
		l := migrations.Line(strings.TrimSpace(n))
		if !l.Valid() {
			var all []string
			for _, v := range migrations.Lines() {
				all = append(all, string(v))
			}
			return nil, cli.Usage(fmt.Sprintf("--line %q: no such schema line (the lines: %s)", n, strings.Join(all, ", ")))
		}
		lines = append(lines, l)
	}
	return lines, nil
}

// migrate applies the schema's lines (up) or prints their status.
func migrate(flagURL string, lineNames []string, up bool) error {
	lines, err := parseLines(lineNames)
	if err != nil {
		return err
	}
	u, err := resolveURL(flagURL)
	if err != nil {
		return err
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return cli.Usage(fmt.Sprintf("database URL: %v", err))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil { // before any version is named
		return fmt.Errorf("database: %w", err)
	}
	if up {
		applied, err := migrations.MigrateLines(ctx, pool, lines...)
		if err != nil {
			return err
		}
		fmt.Printf("applied %d version(s) %v\n", len(applied), applied)
		return nil
	}
	st, err := migrations.StatusLines(ctx, pool, lines...)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "VERSION\tNAME\tAPPLIED")
	for _, s := range st {
		at := "no"
		if s.Applied {
			at = s.AppliedAt.Format("2006-01-02 15:04:05Z07:00")
		}
		fmt.Fprintf(w, "%04d\t%s\t%s\n", s.Version, s.Name, at)
	}
	return w.Flush()
}
