package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/payonce/payonce/payments"
)

// storedIntent is a payment intent as payonce recorded it.
type storedIntent struct {
	status, reason string
}

// check verifies the torture's invariants against the providers' fakes
// (their own records, not the adapters' view) and the database, prints
// the figures, and returns an error naming every violation.
// openAnswer are the statuses of answers that leave the intent open.
var openAnswer = map[string]bool{"PENDING": true, "REQUIRES_ACTION": true}

func (r *tortureRun) check(ctx context.Context, open int) error {
	intents := map[string]storedIntent{} // composed key -> intent
	rows, err := r.pool.Query(ctx, `SELECT idempotency_key, status, coalesce(review_reason, '') FROM payment_intents`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var k string
		var in storedIntent
		if err := rows.Scan(&k, &in.status, &in.reason); err != nil {
			rows.Close()
			return err
		}
		intents[k] = in
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}

	var problems []string
	problem := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	byStatus := map[string]int{}
	var dups, lost, contradicted, neverArrived, charges int
	var reviews []string
	for _, p := range r.pays {
		key, err := payments.ChargeKey(p.customer, p.key)
		if err != nil {
			return err
		}
		id := p.provider + " " + p.customer + "/" + p.key
		n := r.fk.Charges(p.provider, key)
		charges += n
		if n > 1 {
			dups++
			problem("%s: %d charges at the provider", id, n)
		}
		in, recorded := intents[key]
		if !recorded {
			if n > 0 {
				lost++
				problem("%s: a charge at the provider and no intent", id)
			} else if !p.abandoned {
				lost++
				problem("%s: a client retried it to the end and no intent is recorded", id)
			} else {
				neverArrived++
			}
			continue
		}
		byStatus[in.status]++
		// The provider's truth for this key: how many of its objects moved
		// money.
		charged := r.fk.Charged(p.provider, key)
		switch in.status {
		case "SUCCEEDED":
			if charged != 1 {
				lost++
				problem("%s: SUCCEEDED, and %d charges that moved money at the provider", id, charged)
			}
		case "DECLINED", "FAILED", "REQUIRES_ACTION":
			if charged != 0 {
				lost++
				problem("%s: %s, and %d charges that moved money at the provider", id, in.status, charged)
			}
		case "NEEDS_REVIEW":
			if in.reason == "" {
				lost++
				problem("%s: NEEDS_REVIEW without a reason", id)
			}
			reviews = append(reviews, id+": "+in.reason)
		default:
			lost++
			problem("%s: still %s", id, in.status)
		}
		for s := range p.finals {
			// An open answer (PENDING, REQUIRES_ACTION: the provider
			// waits) promises no end: the intent may settle later, for
			// example FAILED once the reconciler voided a payment whose
			// customer never acted. What it settled to is checked against
			// the provider above.
			if s != in.status && !openAnswer[s] {
				contradicted++
				problem("%s: a client was told %s, payonce recorded %s", id, s, in.status)
			}
		}
		if len(p.providerIDs) > 1 {
			contradicted++
			problem("%s: answers named %d different provider objects", id, len(p.providerIDs))
		}
	}
	// Refunds: none twice; each one a client was told of exists once.
	var refundDups, refundsMissing, refundsAtProviders int
	told := map[*payment]bool{}
	for _, p := range r.refunds {
		told[p] = true
	}
	for _, p := range r.pays {
		if p.refundKey == "" {
			continue
		}
		key, err := payments.RefundKey(p.customer, p.refundKey)
		if err != nil {
			return err
		}
		n := r.fk.Refunds(p.provider, key)
		refundsAtProviders += n
		switch {
		case n > 1:
			refundDups++
			problem("%s %s/%s: %d refunds at the provider", p.provider, p.customer, p.refundKey, n)
		case n == 0 && told[p]:
			refundsMissing++
			problem("%s %s/%s: the client was told the refund is done; none at the provider", p.provider, p.customer, p.refundKey)
		}
	}

	faults, totalFaults := r.faults.byKind()
	links := r.faults.byLink()
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "  %s\t%v\n", k, v) }
	row("intents", len(r.pays))
	row("  succeeded / declined / failed / requires action / in review",
		fmt.Sprintf("%d / %d / %d / %d / %d", byStatus["SUCCEEDED"], byStatus["DECLINED"], byStatus["FAILED"],
			byStatus["REQUIRES_ACTION"], byStatus["NEEDS_REVIEW"]))
	row("  abandoned after one send / of which never arrived", fmt.Sprintf("%d / %d", countAbandoned(r.pays), neverArrived))
	row("requests sent", fmt.Sprintf("%d (%d connection errors, %d given up by impatient clients)",
		r.st.requests.Load(), r.st.connErrors.Load(), r.st.gaveUp.Load()))
	codes := map[string]int{}
	for _, p := range r.pays {
		for code, n := range p.codes {
			codes[fmt.Sprint(code)] += n
		}
	}
	row("  answers by status code", joinCounts(codes))
	row("faults injected (Toxiproxy)", fmt.Sprintf("%d: %s", totalFaults, joinCounts(faults)))
	row("  by link", joinCounts(links))
	row("  refused by Toxiproxy", len(r.faults.errors))
	row("workers killed (SIGKILL) and restarted", fmt.Sprintf("%d (of %d workers)", r.kills.Load(), len(r.workers)))
	var runs, failedRuns, examined, repaired, failedWithProof, reviewed int
	var recs []string
	for _, rec := range r.recs {
		runs += rec.runs
		failedRuns += rec.failedRuns
		examined += rec.examined
		repaired += rec.repaired
		failedWithProof += rec.failedWithProof
		reviewed += rec.reviewed
		recs = append(recs, fmt.Sprintf("%s %d", rec.name, rec.runs))
	}
	row("reconciler runs (two at once)", fmt.Sprintf("%d (%s); %d cut short by a fault", runs, strings.Join(recs, ", "), failedRuns))
	row("  intents examined / repaired / failed with proof / sent to review",
		fmt.Sprintf("%d / %d / %d / %d", examined, repaired, failedWithProof, reviewed))
	row("charges at the providers", charges)
	row("refunds (partial) told done / at the providers", fmt.Sprintf("%d / %d", len(r.refunds), refundsAtProviders))
	row("clients' phase, faults on", r.chaosFor.Round(time.Millisecond))
	row("time to converge after the faults", r.convergeIn.Round(time.Millisecond))
	row("unresolved after the faults", r.unresolved)
	row("intents still open", open)
	row("duplicate provider effects (charges / refunds)", fmt.Sprintf("%d / %d", dups, refundDups))
	row("lost intents", lost+refundsMissing)
	row("answers that contradict the record", contradicted)
	row("full idempotency keys in logs, errors and spans", r.leakFigure)
	tw.Flush()
	sort.Strings(reviews)
	for _, why := range reviews {
		fmt.Println("  REVIEW:", why)
	}
	for _, e := range r.faults.errors {
		fmt.Println("  toxiproxy:", e)
	}
	for _, rec := range r.recs {
		if rec.lastErr != "" {
			fmt.Printf("  %s's last failed run: %s\n", rec.name, rec.lastErr)
		}
	}
	bookProblems, err := checkBooks(ctx, r.pool, r.fk)
	if err != nil {
		return err
	}
	problems = append(problems, bookProblems...)
	problems = append(problems, r.leakProblems...)
	if open > 0 {
		problem("%d intents still open after the reconcilers", open)
	}
	if r.unresolved > 0 {
		problem("%d payments without a final answer after the faults", r.unresolved)
	}
	fmt.Printf("\n  wall time %s\n", r.elapsed.Round(time.Millisecond))
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Println("  PROBLEM:", p)
		}
		return tortureFailure{problems}
	}
	fmt.Println("  zero duplicate provider effects, zero lost intents; the books balance and match every provider; no full key logged, answered or traced")
	return nil
}

// joinCounts formats counts by name, sorted by name: "a 3, b 1".
func joinCounts(m map[string]int) string {
	names := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// tortureFailure is a torture run's verdict when an invariant is broken:
// every violation, one line each.
type tortureFailure struct{ problems []string }

func (f tortureFailure) Error() string {
	return fmt.Sprintf("torture failed: %d problem(s), the first: %s", len(f.problems), f.problems[0])
}
