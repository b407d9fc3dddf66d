package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/payonce/payonce/internal/cli"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/providers"
	"github.com/payonce/payonce/reconcile"
)

func newReconcileCmd() *cobra.Command {
	var (
		format, dbURL string
		grace         time.Duration
		batch         int
	)
	c := &cobra.Command{
		Use:   "reconcile",
		Short: "run the reconciler once now: repair what the providers prove, flag the rest",
		Long: `Runs the reconciler once now: examines the open intents past the grace
period, asks their providers what exists, repairs what the providers prove
(completing locally, failing with proof) and flags the rest for review; also
reports records stuck PROCESSING and webhook events that named no intent or
contradicted one. Prints the run's report; it is also stored (payonce report).
--format json prints one object: the run ("id", "instance", "started",
"finished", "error"), its "counts" ("examined", "repaired",
"failed_with_proof", "needs_review", "rescheduled", "divergences") and its
"items" (the divergences and repairs, [] when there are none).

The providers are configured like the checkout service, by environment:
STRIPE_API_BASE and STRIPE_SECRET_KEY; ADYEN_API_BASE, ADYEN_API_KEY,
ADYEN_MERCHANT_ACCOUNT; PAYPAL_API_BASE, PAYPAL_CLIENT_ID, PAYPAL_SECRET.
Only the configured providers' intents are examined; with none, the run
only reports stuck records and webhook divergences.

Exit codes: 0 the run completed (divergences are in the report), 1 the run
failed, 2 usage error.`,
		Example: `  DATABASE_URL=postgres://app@db/app STRIPE_API_BASE=https://api.stripe.com \
    STRIPE_SECRET_KEY=sk_live_... payonce reconcile --format table`,
		Args: cli.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runReconcile(dbURL, format, grace, batch) },
	}
	f := c.Flags()
	f.StringVar(&format, "format", "table", "table, json or csv")
	f.DurationVar(&grace, "grace", 2*time.Minute, "leave intents younger than this to their callers")
	f.IntVar(&batch, "batch", 100, "intents examined at most")
	cli.CompleteWords(c, "format", "table", "json", "csv")
	cli.AddDatabaseURL(c, f, &dbURL)
	return c
}

// The flags' bounds: intents one reconcile run examines, and what one
// report prints. reconcile.Config has no upper bound; these keep a typo
// (--batch 1000000) from holding claims on a whole table.
const (
	maxReconcileBatch = 10000
	maxReportRuns     = 1000
	maxReportItems    = 10000
)

func newReportCmd() *cobra.Command {
	var (
		format, since, dbURL string
		runs                 int
		f                    reconcile.Filter
	)
	c := &cobra.Command{
		Use:   "report",
		Short: "past reconciler runs and their divergences, filtered by run, kind, provider and age",
		Long: `Prints past reconciler runs (newest first) and the divergences and repairs
they recorded, filtered by run, kind, provider and the intent's age.
--format html writes one self-contained page (no script, nothing it loads):
the runs, the items per kind and per provider, and the balance drift per
currency with a small chart; open it in a browser.
Kinds: the "kind" column of a report, e.g. "stuck record",
"pending locally, succeeded at provider", "several charges at provider".

Exit codes: 0 success, 1 failure, 2 usage error.`,
		Example: `  payonce report --kind "several charges at provider" --min-age 1h --format csv > review.csv
  payonce report --runs 50 --format html > divergences.html`,
		Args: cli.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runReport(dbURL, format, since, runs, f) },
	}
	fl := c.Flags()
	fl.IntVar(&runs, "runs", 10, "past runs to list")
	fl.Int64Var(&f.RunID, "run", 0, "only this run's items")
	fl.StringVar((*string)(&f.Kind), "kind", "", "only items of this kind, as the report's kind column names it")
	fl.StringVar(&f.Provider, "provider", "", "only items of this provider: stripe, adyen or paypal")
	fl.DurationVar(&f.MinAge, "min-age", 0, "only items whose intent was at least this old")
	fl.StringVar(&since, "since", "", "only items recorded after this RFC 3339 time, e.g. 2026-12-01T00:00:00Z")
	fl.IntVar(&f.Limit, "limit", 200, "items at most")
	fl.StringVar(&format, "format", "table", "table, json, csv or html")
	cli.CompleteWords(c, "format", "table", "json", "csv", "html")
	cli.CompleteWords(c, "provider", "stripe", "adyen", "paypal")
	cli.AddDatabaseURL(c, fl, &dbURL)
	return c
}

func runReconcile(dbURL, format string, grace time.Duration, batch int) error {
	if err := checkFormat(format); err != nil {
		return err
	}
	switch {
	case grace <= 0:
		return cli.Usage(fmt.Sprintf("reconcile: --grace must be positive, got %s: intents younger than it are left to their callers (default 2m)", grace))
	case batch < 1 || batch > maxReconcileBatch:
		return cli.Usage(fmt.Sprintf("reconcile: --batch must be between 1 and %d, got %d (default 100)", maxReconcileBatch, batch))
	}
	cfg, err := providers.FromEnv(os.Getenv)
	if err != nil {
		return cli.Usage(err.Error())
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	pool, err := openPool(ctx, dbURL, "reconcile", "payment_intents", "reconcile_runs", "reconcile_items")
	if err != nil {
		return err
	}
	defer pool.Close()
	var client *payments.Client
	if len(cfg.ProviderNames()) == 0 {
		fmt.Fprintln(os.Stderr, "payonce: no provider configured (STRIPE_API_BASE, ADYEN_API_BASE, PAYPAL_API_BASE): "+
			"open intents are not examined; reporting stuck records and webhook divergences only")
	} else if client, err = providers.NewClient(pool, cfg); err != nil {
		return err
	}
	// The command prints the run's summary itself; a log line on stderr
	// would repeat it (and interleave with --format json's consumers).
	rcfg := &reconcile.Config{Grace: grace, Batch: batch, Logger: slog.New(slog.DiscardHandler)}
	var bar *cli.ProgressBar
	if cli.IsTerminal(os.Stderr) {
		bar = cli.NewProgressBar(os.Stderr, "intents examined", int64(batch))
		rcfg.Progress = func(examined, claimed int) {
			if examined == 1 {
				bar.SetTotal(int64(claimed))
			}
			bar.Update(int64(examined), "")
		}
	}
	r, err := reconcile.New(pool, client, rcfg)
	if err != nil {
		return cli.Usage(err.Error())
	}
	rep, err := r.RunOnce(ctx)
	if bar != nil && rep != nil && rep.Examined > 0 {
		bar.Finish()
	}
	if rep != nil {
		if format == "table" {
			fmt.Printf("run %d by %s: examined %d, repaired %d, failed with proof %d, needs review %d, rescheduled %d, %s\n\n",
				rep.RunID, rep.Instance, rep.Examined, rep.Repaired, rep.FailedWithProof, rep.NeedsReview, rep.Rescheduled,
				rep.Finished.Sub(rep.Started).Round(time.Millisecond))
		}
		var werr error
		if format == "json" {
			werr = writeRunJSON(os.Stdout, rep)
		} else {
			werr = writeItems(os.Stdout, format, rep.Items)
		}
		if werr != nil {
			return werr
		}
	}
	return err
}

func runReport(dbURL, format, since string, runs int, f reconcile.Filter) error {
	if format != "html" && checkFormat(format) != nil {
		return cli.Usage(fmt.Sprintf("report: --format %q: table, json, csv or html", format))
	}
	switch {
	case runs < 1 || runs > maxReportRuns:
		return cli.Usage(fmt.Sprintf("report: --runs must be between 1 and %d, got %d (default 10)", maxReportRuns, runs))
	case f.Limit < 1 || f.Limit > maxReportItems:
		return cli.Usage(fmt.Sprintf("report: --limit must be between 1 and %d, got %d (default 200)", maxReportItems, f.Limit))
	case f.RunID < 0:
		return cli.Usage(fmt.Sprintf("report: --run must be a run's id as the report lists it, got %d", f.RunID))
	case f.MinAge < 0:
		return cli.Usage(fmt.Sprintf("report: --min-age must not be negative, got %s", f.MinAge))
	case f.Provider != "" && f.Provider != "stripe" && f.Provider != "adyen" && f.Provider != "paypal":
		return cli.Usage(fmt.Sprintf("report: --provider %q: stripe, adyen or paypal", f.Provider))
	}
	if since != "" {
		t, err := time.Parse(time.RFC3339, since)
		if err != nil {
			return cli.Usage(fmt.Sprintf("report: --since %q: give an RFC 3339 time with its zone, e.g. 2026-12-01T00:00:00Z", since))
		}
		f.Since = t
	}
	ctx := context.Background()
	pool, err := openPool(ctx, dbURL, "report", "reconcile_runs", "reconcile_items")
	if err != nil {
		return err
	}
	defer pool.Close()
	if format == "html" {
		list, err := reconcile.Runs(ctx, pool, runs)
		if err != nil {
			return err
		}
		items, err := reconcile.Items(ctx, pool, f)
		if err != nil {
			return err
		}
		return reconcile.WriteHTML(os.Stdout, reconcile.HTMLReport{Runs: list, Items: items})
	}
	if format == "table" {
		list, err := reconcile.Runs(ctx, pool, runs)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN\tSTARTED\tINSTANCE\tEXAMINED\tREPAIRED\tFAILED\tREVIEW\tRESCHEDULED\tERROR")
		for _, r := range list {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", r.RunID, r.Started.UTC().Format(time.RFC3339), r.Instance,
				r.Examined, r.Repaired, r.FailedWithProof, r.NeedsReview, r.Rescheduled, r.Error)
		}
		tw.Flush()
		fmt.Println()
	}
	items, err := reconcile.Items(ctx, pool, f)
	if err != nil {
		return err
	}
	return writeItems(os.Stdout, format, items)
}

func checkFormat(f string) error {
	switch f {
	case "table", "json", "csv":
		return nil
	}
	return cli.Usage(fmt.Sprintf("--format %q: table, json or csv", f))
}

// runJSON is what payonce reconcile --format json prints: one object
// with the run, its counts and its items, so that a script reads what the
// run did even when it found no divergence.
type runJSON struct {
	Run    runInfo          `json:"run"`
	Counts runCounts        `json:"counts"`
	Items  []reconcile.Item `json:"items"`
}

type runInfo struct {
	ID       int64     `json:"id"`
	Instance string    `json:"instance"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Error is the run's error ("" when it completed).
	Error string `json:"error"`
}

type runCounts struct {
	Examined        int `json:"examined"`
	Repaired        int `json:"repaired"`
	FailedWithProof int `json:"failed_with_proof"`
	NeedsReview     int `json:"needs_review"`
	Rescheduled     int `json:"rescheduled"`
	Divergences     int `json:"divergences"`
}

func writeRunJSON(w io.Writer, rep *reconcile.Report) error {
	out := runJSON{
		Run: runInfo{ID: rep.RunID, Instance: rep.Instance, Started: rep.Started, Finished: rep.Finished, Error: rep.Error},
		Counts: runCounts{Examined: rep.Examined, Repaired: rep.Repaired, FailedWithProof: rep.FailedWithProof,
			NeedsReview: rep.NeedsReview, Rescheduled: rep.Rescheduled, Divergences: len(rep.Items)},
		Items: rep.Items,
	}
	if out.Items == nil {
		out.Items = []reconcile.Item{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// writeItems prints report items. Keys are shown as stored (payonce's
// composed keys carry the scope and the action, not card data).
func writeItems(w io.Writer, format string, items []reconcile.Item) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if items == nil {
			items = []reconcile.Item{}
		}
		return enc.Encode(items)
	case "csv":
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{"run", "at", "kind", "provider", "scope", "intent_key", "intent_kind", "currency",
			"local_state", "provider_state", "action", "detail", "age_seconds"})
		for _, x := range items {
			_ = cw.Write([]string{strconv.FormatInt(x.RunID, 10), x.At.UTC().Format(time.RFC3339), string(x.Kind), x.Provider, x.Scope,
				x.IntentKey, string(x.IntentKind), x.Currency, x.LocalState, x.ProviderState, string(x.Action), x.Detail,
				strconv.FormatFloat(x.Age.Seconds(), 'f', 0, 64)})
		}
		cw.Flush()
		return cw.Error()
	}
	if len(items) == 0 {
		fmt.Fprintln(w, "no divergences")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tKIND\tPROVIDER\tINTENT\tAGE\tLOCAL\tPROVIDER SAYS\tACTION\tDETAIL")
	for _, x := range items {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.RunID, x.Kind, x.Provider, x.IntentKey,
			x.Age.Round(time.Second), x.LocalState, x.ProviderState, x.Action, x.Detail)
	}
	return tw.Flush()
}
