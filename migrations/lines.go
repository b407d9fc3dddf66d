package migrations

import (
	"fmt"
	"slices"
	"strings"
)

// Line is one component's part of the schema: the migrations its tables
// need, in a directory of its own (sql/<line>/). A line may need others:
// migrating it migrates them first.
type Line string

const (
	// LineIdempotency is the idempotency core (package idempotency with
	// pgstore, inbox and cronslot): idempotency_store with its tombstones,
	// idempotency_rate_limits (pgstore.Limiter) and operator_audit (what
	// `payonce release` did to a record).
	LineIdempotency Line = "idempotency"
	// LineReplayCache is what an executor's replay cache
	// (idempotency.ReplayCache) over pgstore needs: the triggers on
	// idempotency_store that announce, as they commit, changes made to
	// finished records outside the claim path (a delete by the runbook,
	// an erasure, pgstore.SupersedeTx, SQL by hand), so that every
	// executor's cache forgets them. It needs LineIdempotency.
	// pgstore.NewExecutor refuses a ReplayCache without it. A service
	// without a replay cache leaves it out, and its completions do not
	// pay for the triggers.
	LineReplayCache Line = "replaycache"
	// LineLedger is the double-entry ledger (package ledger): accounts,
	// entries, postings, balance snapshots and the triggers that keep them
	// append-only and balanced.
	LineLedger Line = "ledger"
	// LinePayments is package payments and the reconciler:
	// payment_intents (charges, refunds, provider windows and sends),
	// webhook_events, reconcile_runs and reconcile_items. It needs
	// LineIdempotency and LineLedger.
	LinePayments Line = "payments"
	// LineSaga is package saga: sagas and saga_steps. It needs
	// LineIdempotency.
	LineSaga Line = "saga"
)

// lines lists every line, each after the lines it needs.
var lines = []struct {
	line  Line
	needs []Line
}{
	{LineIdempotency, nil},
	{LineLedger, nil},
	{LinePayments, []Line{LineIdempotency, LineLedger}},
	{LineSaga, []Line{LineIdempotency}},
	{LineReplayCache, []Line{LineIdempotency}},
}

// Lines returns every line, each after the lines it needs.
func Lines() []Line {
	out := make([]Line, len(lines))
	for i, l := range lines {
		out[i] = l.line
	}
	return out
}

// Needs returns the lines l's components use besides their own tables
// (directly; [MigrateLines] follows them transitively).
func (l Line) Needs() []Line {
	for _, d := range lines {
		if d.line == l {
			return slices.Clone(d.needs)
		}
	}
	return nil
}

// Migrations returns l's own migrations in version order (not those of
// the lines it needs).
func (l Line) Migrations() []Migration {
	var out []Migration
	for _, m := range All() {
		if m.Line == l {
			out = append(out, m)
		}
	}
	return out
}

// Valid reports whether l is one of [Lines].
func (l Line) Valid() bool { return slices.Contains(Lines(), l) }

// closure returns the given lines and every line they need, in [Lines]
// order. It refuses no line at all and unknown lines, naming them.
func closure(want []Line) (map[Line]bool, error) {
	if len(want) == 0 {
		return nil, fmt.Errorf("migrations: no line given: name one or more of %s", lineList(Lines()))
	}
	set := map[Line]bool{}
	var add func(Line)
	add = func(l Line) {
		if set[l] {
			return
		}
		set[l] = true
		for _, n := range l.Needs() {
			add(n)
		}
	}
	for _, l := range want {
		if !l.Valid() {
			return nil, fmt.Errorf("migrations: unknown line %q: the lines are %s", string(l), lineList(Lines()))
		}
		add(l)
	}
	return set, nil
}

// migrationsOf returns the migrations of the lines in set, in version
// order.
func migrationsOf(set map[Line]bool) []Migration {
	var out []Migration
	for _, m := range All() {
		if set[m.Line] {
			out = append(out, m)
		}
	}
	return out
}

func lineList(ls []Line) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = string(l)
	}
	return strings.Join(s, ", ")
}

// goLines renders lines as the Go arguments that name them.
func goLines(ls []Line) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = "migrations." + constName(l)
	}
	return strings.Join(s, ", ")
}

func constName(l Line) string {
	switch l {
	case LineIdempotency:
		return "LineIdempotency"
	case LineLedger:
		return "LineLedger"
	case LinePayments:
		return "LinePayments"
	case LineSaga:
		return "LineSaga"
	case LineReplayCache:
		return "LineReplayCache"
	}
	return fmt.Sprintf("Line(%q)", string(l))
}
