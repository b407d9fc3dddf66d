package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/internal/cli"
	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/providers/fakes"
)

// progress draws a progress bar while stdout is a terminal; otherwise it
// prints a plain line every 10s.
func progress(st *stormStats, total int64) (stop func()) {
	if !cli.IsTerminal(os.Stdout) {
		return plainProgress(st, total, 10*time.Second)
	}
	bar := cli.NewProgressBar(os.Stdout, "payments sent and resolved", 2*total)
	draw := func() {
		bar.Update(st.started.Load()+st.resolved.Load(), fmt.Sprintf("%d requests", st.requests.Load()))
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				draw()
				bar.Finish()
				return
			case <-t.C:
				draw()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// plainProgress prints, every interval, how many payments were sent and
// resolved, until stopped.
func plainProgress(st *stormStats, total int64, every time.Duration) (stop func()) {
	began := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Printf("  ... %d of %d payments sent, %d resolved by retries, %d requests (%s)\n",
					st.started.Load(), total, st.resolved.Load(), st.requests.Load(), time.Since(began).Round(time.Second))
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

type stormReport struct {
	pays       []*payment
	st         *stormStats
	fakes      *fakes.Set
	pool       *pgxpool.Pool
	w          *worker
	unresolved int64
	refunds    int
	rec        reconciled
	sagas      *sagaResult // nil: no saga phase
	// leaks is the figure of the check that no log record, error text or
	// span holds a full key (storm_leaks.go); leakProblems names each
	// text that did.
	leaks        string
	leakProblems []string
	elapsed      time.Duration
}

func countAbandoned(pays []*payment) int {
	n := 0
	for _, p := range pays {
		if p.abandoned {
			n++
		}
	}
	return n
}

func report(ctx context.Context, r stormReport) error {
	var pis, dups, missing, inconsistent, succeeded, declined, failed, action, neverArrived, unknownResolved int
	perProvider := map[string]int{}
	var problems []string
	for _, p := range r.pays {
		key, err := payments.ChargeKey(p.customer, p.key)
		if err != nil {
			return err
		}
		n := r.fakes.Charges(p.provider, key)
		pis += n
		perProvider[p.provider] += n
		if n > 1 {
			dups++
			problems = append(problems, fmt.Sprintf("%s %s/%s: %d charges at the provider", p.provider, p.customer, p.key, n))
		}
		switch p.status {
		case "SUCCEEDED":
			succeeded++
			if n == 0 {
				missing++
				problems = append(problems, fmt.Sprintf("%s %s/%s: succeeded without a charge at the provider", p.provider, p.customer, p.key))
			}
		case "DECLINED":
			declined++
		case "REQUIRES_ACTION":
			action++
		case "FAILED":
			failed++
		case "":
			neverArrived++
		}
		if len(p.providerIDs) > 1 {
			inconsistent++
			problems = append(problems, fmt.Sprintf("%s/%s: answers named %d different provider objects", p.customer, p.key, len(p.providerIDs)))
		}
		if p.unknownSeen && p.final != 0 {
			unknownResolved++
		}
	}

	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "  %s\t%v\n", k, v) }
	row("payments", len(r.pays))
	row("  succeeded / declined / failed (nothing charged) / requires action", fmt.Sprintf("%d / %d / %d / %d", succeeded, declined, failed, action))
	row("  never recorded (an abandoned client's only send did not arrive)", neverArrived)
	row("  unresolved after retries", r.unresolved)
	row("requests sent", fmt.Sprintf("%d (%d connection errors, %d given up by impatient clients)", r.st.requests.Load(), r.st.connErrors.Load(), r.st.gaveUp.Load()))
	row("worker killed (SIGKILL) and restarted", r.w.restarts)
	var per []string
	for _, name := range r.fakes.Providers() {
		per = append(per, fmt.Sprintf("%s %d", name, perProvider[name]))
	}
	row("charges at the providers", fmt.Sprintf("%d (%s)", pis, strings.Join(per, ", ")))
	row("duplicates (payments charged more than once)", dups)
	row("unknown outcomes resolved by retry", unknownResolved)
	row("partial refunds", r.refunds)
	row("abandoned after one send (the reconciler's)", fmt.Sprintf("%d", countAbandoned(r.pays)))
	row("reconciler runs (until no intent is open)", r.rec.runs)
	row("  intents examined (open past their grace: looked up at the provider by their derived references)", r.rec.examined)
	row("  intents repaired (the provider proves the charge or refund: completed, booked in the ledger)", r.rec.repaired)
	row("  intents failed with proof (the provider proves nothing was charged: the customer may pay again)", r.rec.failedWithProof)
	row("  lookups rescheduled (no proof either way yet: looked up again at the next run)", r.rec.rescheduled)
	row("  intents needing review (proof a person must judge: listed below)", r.rec.needsReview)
	row("  intents still open", r.rec.open)
	row("full idempotency keys in logs, errors and spans", r.leaks)
	tw.Flush()
	for _, why := range r.rec.review {
		fmt.Println("  REVIEW:", why)
	}
	if r.rec.open > 0 {
		problems = append(problems, fmt.Sprintf("%d intents still open after the reconciler", r.rec.open))
	}
	sagaProblems := 0
	if r.sagas != nil {
		fmt.Println(r.sagas.line())
		for _, why := range r.sagas.reviews {
			fmt.Println("  checkout in review:", why)
		}
		sagaProblems = len(r.sagas.problems)
		problems = append(problems, r.sagas.problems...)
	}

	// The books: payonce's ledger against each provider's totals, per
	// currency, and every currency's postings summing to zero.
	bookProblems, err := checkBooks(ctx, r.pool, r.fakes)
	if err != nil {
		return err
	}
	books := len(bookProblems)
	problems = append(problems, bookProblems...)
	problems = append(problems, r.leakProblems...)
	fmt.Printf("\n  wall time %s\n", r.elapsed.Round(time.Millisecond))

	if len(problems) > 0 || r.unresolved > 0 {
		for _, p := range problems {
			fmt.Println("  PROBLEM:", p)
		}
		return fmt.Errorf("demo failed: %d duplicate(s), %d succeeded without a charge, %d inconsistent answer(s), %d book problem(s), %d unresolved, %d checkout problem(s), %d text(s) holding a full key",
			dups, missing, inconsistent, books, r.unresolved, sagaProblems, len(r.leakProblems))
	}
	fmt.Println("  zero duplicates; the books balance and match every provider; no full key logged, answered or traced")
	return nil
}

// checkBooks prints payonce's ledger against each provider's net per
// currency and returns what differs, with every currency whose postings
// do not sum to zero.
func checkBooks(ctx context.Context, pool *pgxpool.Pool, fk *fakes.Set) (problems []string, err error) {
	fmt.Println("\n  ledger vs provider")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  provider\tcurrency\tledger cash\tprovider net\t")
	l, err := ledger.New(pool, nil)
	if err != nil {
		return nil, err
	}
	for _, name := range fk.Providers() {
		net, err := fk.NetAmounts(name)
		if err != nil {
			return nil, err
		}
		var currencies []string
		for c := range net {
			currencies = append(currencies, c)
		}
		sort.Strings(currencies)
		for _, code := range currencies {
			cur, err := money.ParseCurrency(code)
			if err != nil {
				return nil, err
			}
			bal, err := l.Balance(ctx, ledger.ProviderCash(name), cur)
			if errors.Is(err, ledger.ErrUnknownAccount) {
				bal, _ = money.FromMinor(0, cur)
			} else if err != nil {
				return nil, err
			}
			held := net[code]
			mark := "ok"
			if !bal.Equal(held) {
				mark = "DIFFERS"
				problems = append(problems, fmt.Sprintf("%s %s: ledger %s, provider %s", name, code, bal.AmountString(), held.AmountString()))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", name, code, bal.AmountString(), held.AmountString(), mark)
		}
	}
	tw.Flush()
	rows, err := pool.Query(ctx, `SELECT currency, sum(amount)::text FROM ledger_postings GROUP BY currency HAVING sum(amount) <> 0`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var code, sum string
		if err := rows.Scan(&code, &sum); err != nil {
			return nil, err
		}
		problems = append(problems, fmt.Sprintf("ledger %s: postings sum to %s, not 0", code, sum))
	}
	return problems, rows.Err()
}
