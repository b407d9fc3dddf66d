package main

// BENCH_ONLY=statements: the claim+complete cycle's SQL alone, without any
// Go client. pgbench runs, in turn, on the same server and with the same
// client:
//   - pgstore's two statements for a new key (the raw path (a)), on a
//     schema with the replaycache line: the table has the replay cache's
//     change triggers, as a service with a replay cache has it;
//   - the same two statements on a copy of the table without its triggers
//     (CREATE TABLE ... (LIKE idempotency_store INCLUDING ALL) copies
//     everything but them), which is what a service without a replay
//     cache has (the idempotency line alone), and what the peers' tables
//     are too;
//   - the upsert peer's two statements.
//
// It separates what a cycle's statements cost the server from what the
// Go client adds: the difference between the first two is the replay
// cache's change trigger (the replaycache line), which every completion
// of a service with a cache pays for, the difference between the last two
// is pgstore's statements against the simplest design's (BENCHMARKS.md,
// where a cycle's time goes).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/migrations"
)

// noTriggerTable is the copy of idempotency_store without its triggers.
const noTriggerTable = "idempotency_store_notrigger"

func benchStatements(ctx context.Context, base string, pgb pgbench, fp idempotency.Fingerprint, d time.Duration, slices, rounds int) error {
	t, err := newCycleSchemaLines(ctx, base, "payonce_bench_statements", fp, true, migrations.LineReplayCache)
	if err != nil {
		return err
	}
	defer t.pool.Close()
	if err := copyStore(ctx, t.pool, noTriggerTable); err != nil {
		return err
	}
	pgb.url = libpqURL(t.url)

	cycle, _, _, err := writeScripts(pgb.dir)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(cycle)
	if err != nil {
		return err
	}
	script := string(b)
	if n := strings.Count(script, "idempotency_store "); n != 2 {
		return fmt.Errorf("pgstore's cycle names its table %d times, not twice (claim, complete): the copy would not be the same cycle", n)
	}
	noTrigger := filepath.Join(pgb.dir, "cycle_notrigger.sql")
	if err := os.WriteFile(noTrigger, []byte(strings.ReplaceAll(script, "idempotency_store ", noTriggerTable+" ")), 0o644); err != nil {
		return err
	}
	// The upsert peer's claim and completion, as its Go worker sends them
	// (a new key's token is always 1).
	upsert := filepath.Join(pgb.dir, "cycle_upsert.sql")
	script = "\\set k random(1000000000, 9000000000000000000)\n\\set tok 1\n" +
		toPgbench(upsertClaimSQL, "k", "s", "fp") + toPgbench(peerCompleteSQL("peer_upsert"), "k", "s", "tok", "meta", "body")
	if err := os.WriteFile(upsert, []byte(script), 0o644); err != nil {
		return err
	}

	withTrigger := &series{name: "(s) pgstore's statements, replaycache triggers (pgbench)"}
	withoutTrigger := &series{name: "(s) pgstore's statements, no triggers (pgbench)"}
	peerStatements := &series{name: "(s) upsert peer's statements (pgbench)"}
	checkpoint := checkpointer(ctx, t.pool)
	if _, err := pgb.exec(ctx, cycle, 2*time.Second); err != nil { // warm-up, unmeasured
		return err
	}
	for r := 0; r < rounds; r++ {
		fmt.Fprintf(os.Stderr, "round %d/%d\n", r+1, rounds)
		err := measureInterleaved(d, slices, checkpoint, timed{withTrigger, pgb.path(ctx, cycle)},
			timed{withoutTrigger, pgb.path(ctx, noTrigger)}, timed{peerStatements, pgb.path(ctx, upsert)})
		if err != nil {
			return err
		}
	}
	for _, table := range []string{"idempotency_store", noTriggerTable, "peer_upsert"} {
		open, err := openClaims(ctx, t.pool, table)
		if err != nil {
			return err
		}
		if open != 0 {
			return fmt.Errorf("%s: %d claims were never completed: the benchmark's statements are wrong", table, open)
		}
	}
	for _, s := range []*series{withTrigger, withoutTrigger, peerStatements} {
		fmt.Println(s)
	}
	cpuLine(withTrigger, withoutTrigger, peerStatements)
	peer := peerStatements.median().tps
	fmt.Printf("statements pgstore/upsert=%.2f (with the replaycache line's triggers %.2f)\n", withoutTrigger.median().tps/peer, withTrigger.median().tps/peer)
	return nil
}
