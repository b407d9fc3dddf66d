package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/payonce/payonce/migrations"
)

// newMigrateCmd is payonce migrate and its subcommands, which share
// --database-url.
func newMigrateCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "migrate up|status|print",
		Short: "apply, inspect or print the schema",
		Long: `Applies payonce's schema, lists its versions, or prints it as SQL for your
own migration tool.`,
		Example: `  DATABASE_URL=postgres://app@db/app payonce migrate up
  payonce migrate status --database-url postgres://app@db/app
  payonce migrate print > payonce.sql`,
		Args: subcommandArgs,
		RunE: func(*cobra.Command, []string) error { return nil }, // subcommandArgs refuses every call
	}
	var dbURL string
	addDatabaseURL(c, c.PersistentFlags(), &dbURL)
	c.AddCommand(
		&cobra.Command{
			Use:     "up",
			Short:   "apply every version not yet applied (safe when several processes run it at once)",
			Example: `  DATABASE_URL=postgres://app@db/app payonce migrate up`,
			Args:    noArgs,
			RunE:    func(*cobra.Command, []string) error { return migrate(dbURL, true) },
		},
		&cobra.Command{
			Use:     "status",
			Short:   "list the versions and whether each is applied",
			Example: `  payonce migrate status --database-url postgres://app@db/app`,
			Args:    noArgs,
			RunE:    func(*cobra.Command, []string) error { return migrate(dbURL, false) },
		},
		&cobra.Command{
			Use:     "print",
			Short:   "print the whole schema as SQL, for your own migration tool (needs no database)",
			Example: `  payonce migrate print > payonce.sql`,
			Args:    noArgs,
			RunE: func(*cobra.Command, []string) error {
				fmt.Print(migrations.SQL())
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
	return "", usageError{"no database: set DATABASE_URL or pass --database-url"}
}

// migrate applies the schema (up) or prints its status.
func migrate(flagURL string, up bool) error {
	u, err := resolveURL(flagURL)
	if err != nil {
		return err
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()
	if up {
		applied, err := migrations.Migrate(ctx, pool)
		if err != nil {
			return err
		}
		fmt.Printf("applied %d version(s) %v\n", len(applied), applied)
		return nil
	}
	st, err := migrations.Status(ctx, pool)
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
