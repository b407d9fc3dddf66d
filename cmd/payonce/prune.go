package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/internal/cli"
)

// maxPruneBatch mirrors idempotency.PrunerConfig.BatchSize's bound: a batch
// holds its row locks until it commits.
const maxPruneBatch = 50_000

// pruneResult says what one pass of payonce prune did.
type pruneResult struct {
	deleted, batches int
	drained          bool // the last batch was short: nothing left to take
	duration         time.Duration
}

func newPruneCmd() *cobra.Command {
	var (
		batch, limit int
		pause        time.Duration
		dbURL        string
	)
	c := &cobra.Command{
		Use:   "prune",
		Short: "one pass deleting expired records, in batches",
		Long: `Runs one cleanup pass over the idempotency store: deletes records whose
retention ended (expires_at on the database clock), never PROCESSING ones,
in batches of --batch records, each its own short transaction, with a pause
between batches that leaves the database to the claim path. The pass ends
when a batch finds fewer records than it may delete, or after --limit
records. It is what idempotency.Pruner does on a schedule, and safe to run
beside it or on several hosts at once: batches skip the rows another pruner
holds.

On a terminal it draws a progress bar (records deleted of the expired
records counted at the start); otherwise it prints one summary line.
Interrupted (Ctrl-C), it stops after the current batch is rolled back and
reports what was deleted; the next pass picks up the rest.`,
		Example: `  payonce prune
  payonce prune --batch 5000 --limit 1000000`,
		Args: cli.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runPrune(dbURL, batch, limit, pause) },
	}
	f := c.Flags()
	f.IntVar(&batch, "batch", 1000, fmt.Sprintf("records per batch, 1 to %d", maxPruneBatch))
	f.IntVar(&limit, "limit", 0, "delete at most this many records in this pass (0: no bound)")
	f.DurationVar(&pause, "pause", 10*time.Millisecond, "wait between batches (0: none)")
	cli.AddDatabaseURL(c, f, &dbURL)
	return c
}

func runPrune(dbURL string, batch, limit int, pause time.Duration) error {
	switch {
	case batch < 1 || batch > maxPruneBatch:
		return cli.Usage(fmt.Sprintf("prune: --batch must be between 1 and %d, got %d", maxPruneBatch, batch))
	case limit < 0:
		return cli.Usage(fmt.Sprintf("prune: --limit must not be negative, got %d", limit))
	case pause < 0:
		return cli.Usage(fmt.Sprintf("prune: --pause must not be negative, got %s", pause))
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	pool, err := openPool(ctx, dbURL, "prune", "idempotency_store")
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := pgstore.New(pool, nil)
	if err != nil {
		return err
	}

	var bar *cli.ProgressBar
	if cli.IsTerminal(os.Stdout) {
		bar = cli.NewProgressBar(os.Stdout, "records deleted", expiredEstimate(ctx, store, limit))
		bar.Update(0, "")
	}
	res, err := prunePass(ctx, store, batch, limit, pause, func(r pruneResult) {
		if bar != nil {
			bar.Update(int64(r.deleted), fmt.Sprintf("%d batch(es)", r.batches))
		}
	})
	if bar != nil {
		bar.Finish()
	}
	printPruneSummary(os.Stdout, res, limit)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("prune: interrupted after deleting %d record(s); the rest waits for the next pass", res.deleted)
		}
		return fmt.Errorf("prune: %w", err)
	}
	return nil
}

// expiredEstimate is the bar's total: the expired records now, bounded by
// limit; 0 (unknown: a plain counter) when counting takes too long.
func expiredEstimate(ctx context.Context, store *pgstore.Store, limit int) int64 {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := store.CountExpired(cctx)
	if err != nil {
		return 0
	}
	if limit > 0 {
		n = min(n, int64(limit))
	}
	return n
}

// pruneStore is the part of the store a pass uses.
type pruneStore interface {
	Prune(ctx context.Context, limit int) (int, error)
}

// prunePass deletes expired records in batches until a batch is short or
// limit records are deleted (0: no bound), calling progress after each
// batch. The result counts what was deleted even when it fails.
func prunePass(ctx context.Context, store pruneStore, batch, limit int, pause time.Duration, progress func(pruneResult)) (pruneResult, error) {
	start := time.Now()
	var res pruneResult
	for limit == 0 || res.deleted < limit {
		n := batch
		if limit > 0 {
			n = min(batch, limit-res.deleted)
		}
		got, err := store.Prune(ctx, n)
		if err != nil {
			res.duration = time.Since(start)
			return res, err
		}
		res.batches++
		res.deleted += got
		progress(res)
		if got < n {
			res.drained = true
			break
		}
		if limit > 0 && res.deleted >= limit {
			break
		}
		if pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				res.duration = time.Since(start)
				return res, ctx.Err()
			case <-t.C:
			}
		} else if err := ctx.Err(); err != nil {
			res.duration = time.Since(start)
			return res, err
		}
	}
	res.duration = time.Since(start)
	return res, nil
}

func printPruneSummary(w io.Writer, res pruneResult, limit int) {
	end := "nothing expired is left"
	switch {
	case !res.drained && limit > 0 && res.deleted >= limit:
		end = fmt.Sprintf("stopped at --limit %d; more may be left", limit)
	case !res.drained:
		end = "stopped early"
	}
	fmt.Fprintf(w, "pruned %d expired record(s) in %d batch(es), %s; %s\n",
		res.deleted, res.batches, res.duration.Round(time.Millisecond), end)
}

var _ pruneStore = (*pgstore.Store)(nil)
