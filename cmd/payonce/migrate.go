package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/migrations"
)

const migrateUsage = `Usage: payonce migrate up|status|print [--database-url URL]

  up      apply every version not yet applied (safe when several processes run it at once)
  status  list the versions and whether each is applied
  print   print the whole schema as SQL, for your own migration tool (needs no database)

Example:
  DATABASE_URL=postgres://app@db/app payonce migrate up
`

func databaseURL(fs *flag.FlagSet) *string {
	return fs.String("database-url", "", "PostgreSQL URL (default $DATABASE_URL)")
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

func runMigrate(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, migrateUsage)
		return usageError{"migrate needs a subcommand: up, status or print"}
	}
	fs := flag.NewFlagSet("migrate "+args[0], flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, migrateUsage) }
	dbURL := databaseURL(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return usageError{err.Error()}
	}
	if args[0] == "print" {
		fmt.Print(migrations.SQL())
		return nil
	}
	if args[0] != "up" && args[0] != "status" {
		return usageError{fmt.Sprintf("unknown migrate subcommand %q (want up, status or print)", args[0])}
	}
	u, err := resolveURL(*dbURL)
	if err != nil {
		return err
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()
	if args[0] == "up" {
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
