package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/internal/cli"
	"github.com/payonce/payonce/payments"
)

const maxStuckLimit = 10000

// stuckRecord is one line of payonce stuck, and its JSON form.
type stuckRecord struct {
	Scope       string     `json:"scope"`
	Action      string     `json:"action"`
	KeyHash     string     `json:"key_hash"`
	Key         string     `json:"key,omitempty"`
	LockVersion int64      `json:"lock_version"`
	CreatedAt   time.Time  `json:"created_at"`
	LockedUntil *time.Time `json:"locked_until"`
	AgeSeconds  float64    `json:"age_seconds"`
	// LeaseEndedSecondsAgo is how long ago the lease ended (since
	// created_at when the record has no lease end).
	LeaseEndedSecondsAgo float64      `json:"lease_ended_seconds_ago"`
	Intent               *stuckIntent `json:"intent"`
}

type stuckIntent struct {
	Provider string `json:"provider"`
	Status   string `json:"status"`
	Attempt  int32  `json:"attempt"`
}

type stuckReport struct {
	DatabaseNow      time.Time     `json:"database_now"`
	OlderThanSeconds float64       `json:"older_than_seconds"`
	Total            int64         `json:"total"`
	Records          []stuckRecord `json:"records"`
}

func newStuckCmd() *cobra.Command {
	var o struct {
		olderThan     time.Duration
		limit         int
		showKeys      bool
		format, dbURL string
	}
	c := &cobra.Command{
		Use:   "stuck",
		Short: "list idempotency records stuck PROCESSING (lease ended, never reclaimed)",
		Long: `Lists the idempotency records stuck PROCESSING: their holder's lease ended
more than --older-than ago, measured on the database clock, and no retry has
reclaimed them since. Longest-stuck first, with how long ago the lease ended,
the record's age, scope, action, lock version (the fencing token of its last
holder) and, for a payment, its intent's provider, status and attempt.

Keys are shown as a short hash (the first 12 hex digits of their SHA-256, as
payonce's logs print them), not in full, unless --show-keys: keys can carry
customer identifiers. Fingerprints and responses are never shown.

A stuck record is not an error in itself: the next retry of its key reclaims
it, and the reconciler resolves a payment's open intent. For a record that
needs a human, see payonce release --help.

stuck exits 0 whether or not it finds records, 1 when the database fails.`,
		Example: `  payonce stuck
  payonce stuck --older-than 15m --format json | jq -r '.records[].key_hash'
  payonce stuck --show-keys --limit 5`,
		Args: cli.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return runStuck(o.dbURL, o.olderThan, o.limit, o.showKeys, o.format)
		},
	}
	f := c.Flags()
	f.DurationVar(&o.olderThan, "older-than", time.Minute, "the lease ended at least this long ago (0: every ended lease)")
	f.IntVar(&o.limit, "limit", 50, fmt.Sprintf("list at most this many records, 1 to %d; the total is printed", maxStuckLimit))
	f.BoolVar(&o.showKeys, "show-keys", false, "print full keys, as payonce release takes them")
	f.StringVar(&o.format, "format", "table", "table or json")
	cli.CompleteWords(c, "format", "table", "json")
	cli.AddDatabaseURL(c, f, &o.dbURL)
	return c
}

func runStuck(dbURL string, olderThan time.Duration, limit int, showKeys bool, format string) error {
	switch {
	case olderThan < 0:
		return cli.Usage(fmt.Sprintf("stuck: --older-than must not be negative, got %s", olderThan))
	case limit < 1 || limit > maxStuckLimit:
		return cli.Usage(fmt.Sprintf("stuck: --limit must be between 1 and %d, got %d", maxStuckLimit, limit))
	case format != "table" && format != "json":
		return cli.Usage(fmt.Sprintf("stuck: --format must be table or json, got %q", format))
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	pool, err := openPool(ctx, dbURL, "stuck", "idempotency_store")
	if err != nil {
		return err
	}
	defer pool.Close()
	rep, err := listStuck(ctx, pool, olderThan, limit, showKeys)
	if err != nil {
		return err
	}
	if format == "json" {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return printStuck(os.Stdout, rep, olderThan, showKeys)
}

func listStuck(ctx context.Context, pool *pgxpool.Pool, olderThan time.Duration, limit int, showKeys bool) (stuckReport, error) {
	rep := stuckReport{OlderThanSeconds: olderThan.Seconds(), Records: []stuckRecord{}}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		return rep, err
	}
	res, err := store.Stuck(ctx, pgstore.StuckParams{OlderThan: olderThan, Limit: limit})
	if err != nil {
		return rep, fmt.Errorf("stuck: %w", err)
	}
	refs := make([]payments.IntentRef, len(res.Records))
	for i, l := range res.Records {
		refs[i] = payments.IntentRef{Scope: l.Scope, Key: l.Key}
	}
	intents, err := intentSummaries(ctx, pool, refs...)
	if err != nil {
		return rep, fmt.Errorf("stuck: %w", err)
	}
	rep.DatabaseNow, rep.Total = res.DatabaseNow, res.Total
	for i, l := range res.Records {
		r := stuckRecord{Scope: l.Scope, KeyHash: idempotency.ShortHash(l.Key), LockVersion: l.LockVersion,
			CreatedAt: l.CreatedAt, LockedUntil: l.LockedUntil, Intent: stuckIntentOf(intents, refs[i])}
		if showKeys {
			r.Key = l.Key
		}
		r.Action = "?"
		if action, _, ok := idempotency.SplitKey(r.Scope, l.Key); ok {
			r.Action = action
		}
		r.AgeSeconds = rep.DatabaseNow.Sub(r.CreatedAt).Seconds()
		ended := r.CreatedAt
		if r.LockedUntil != nil {
			ended = *r.LockedUntil
		}
		r.LeaseEndedSecondsAgo = rep.DatabaseNow.Sub(ended).Seconds()
		rep.Records = append(rep.Records, r)
	}
	return rep, nil
}

// intentSummaries is payments.IntentSummaries on a schema with the
// payments line, and none on a core-only one (payonce migrate up --line
// idempotency): stuck and release serve services without payments too.
func intentSummaries(ctx context.Context, pool *pgxpool.Pool, refs ...payments.IntentRef) (map[payments.IntentRef]payments.IntentSummary, error) {
	var payable bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('payment_intents') IS NOT NULL`).Scan(&payable); err != nil || !payable {
		return nil, err
	}
	return payments.IntentSummaries(ctx, pool, refs...)
}

// stuckIntentOf is the intent of ref as payonce stuck and release show it,
// nil when the record is not a payment's.
func stuckIntentOf(intents map[payments.IntentRef]payments.IntentSummary, ref payments.IntentRef) *stuckIntent {
	in, ok := intents[ref]
	if !ok {
		return nil
	}
	return &stuckIntent{Provider: in.Provider, Status: string(in.Status), Attempt: int32(in.Attempt)}
}

func printStuck(w io.Writer, rep stuckReport, olderThan time.Duration, showKeys bool) error {
	if rep.Total == 0 {
		_, err := fmt.Fprintf(w, "no record stuck PROCESSING with a lease that ended more than %s ago (database clock %s)\n",
			shortDuration(olderThan), rep.DatabaseNow.UTC().Format(time.RFC3339))
		return err
	}
	fmt.Fprintf(w, "%d record(s) stuck PROCESSING with a lease that ended more than %s ago (database clock %s)",
		rep.Total, shortDuration(olderThan), rep.DatabaseNow.UTC().Format(time.RFC3339))
	if int64(len(rep.Records)) < rep.Total {
		fmt.Fprintf(w, "; the %d stuck longest", len(rep.Records))
	}
	fmt.Fprintln(w, ":")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	keyCol := "KEY HASH"
	if showKeys {
		keyCol = "KEY"
	}
	fmt.Fprintf(tw, "LEASE ENDED\tAGE\tSCOPE\tACTION\t%s\tLOCK VERSION\tINTENT\n", keyCol)
	for _, r := range rep.Records {
		key := r.KeyHash
		if showKeys {
			key = r.Key
		}
		intent := "-"
		if r.Intent != nil {
			intent = fmt.Sprintf("%s %s, attempt %d", r.Intent.Provider, r.Intent.Status, r.Intent.Attempt)
		}
		fmt.Fprintf(tw, "%s ago\t%s\t%s\t%s\t%s\t%d\t%s\n",
			formatAge(secs(r.LeaseEndedSecondsAgo)), formatAge(secs(r.AgeSeconds)), r.Scope, r.Action, key, r.LockVersion, intent)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if showKeys {
		_, err := fmt.Fprintln(w, "\nRelease one that no retry will reclaim: payonce release <scope> <key>")
		return err
	}
	_, err := fmt.Fprintln(w, "\nFull keys (for payonce release): payonce stuck --show-keys")
	return err
}

// shortDuration writes a flag's duration without zero trailing units:
// 1m, 1h30m, 100ms.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// formatAge writes d with its two leading units: 42s, 4m05s, 3h12m, 2d03h.
func formatAge(d time.Duration) string {
	if d < 0 {
		return "-" + formatAge(-d)
	}
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// openPool connects to the database that --database-url or DATABASE_URL
// names, and checks that the tables the command reads exist, so that an
// unmigrated database gets a clear error rather than a failed query.
func openPool(ctx context.Context, flagURL, command string, tables ...string) (*pgxpool.Pool, error) {
	u, err := resolveURL(flagURL)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return nil, cli.Usage(fmt.Sprintf("database URL: %v", err))
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["application_name"] = "payonce " + command
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	var schema string
	var missing []string
	err = pool.QueryRow(ctx, `SELECT coalesce(current_schema(), '(none: check search_path)'), array(SELECT t FROM unnest($1::text[]) t WHERE to_regclass(t) IS NULL)`,
		tables).Scan(&schema, &missing)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("database: %w", err)
	}
	if len(missing) > 0 {
		pool.Close()
		var lines []string
		for _, t := range missing {
			line := "idempotency"
			if t == "payment_intents" || strings.HasPrefix(t, "reconcile_") {
				line = "payments"
			}
			if !slices.Contains(lines, line) {
				lines = append(lines, line)
			}
		}
		return nil, fmt.Errorf("database: schema %q has no table %s: apply the %s migration line first (payonce migrate up --line %s, or payonce migrate up for every line)",
			schema, strings.Join(missing, ", "), strings.Join(lines, " and "), strings.Join(lines, " --line "))
	}
	return pool, nil
}
