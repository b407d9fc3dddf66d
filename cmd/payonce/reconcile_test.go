package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers"
	"github.com/payonce/payonce/providers/fakes"
	"github.com/payonce/payonce/providers/stripe/stripetest"
	"github.com/payonce/payonce/reconcile"
)

// fakesClient is a payments client on pool through the fakes whose
// environment is env, without keep-alive resends (a lost response reaches
// payonce).
func fakesClient(t *testing.T, pool *pgxpool.Pool, env map[string]string) *payments.Client {
	t.Helper()
	cfg, err := providers.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	client, err := providers.NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// payonce reconcile repairs a lost response nobody retried, prints the
// report in each format, and payonce report reads it back.
func TestReconcileAndReportCommands(t *testing.T) {
	t.Parallel()
	url := pgtest.MigratedURL(t)
	pool := pgtest.PoolURL(t, url)
	fk := fakes.Start(fakes.Options{Stripe: true}) // no webhooks: only the reconciler settles
	t.Cleanup(fk.Close)
	env := fk.Env()
	client := fakesClient(t, pool, env)
	fk.Stripe.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	_, err := client.Charge(context.Background(), payments.ChargeParams{Scope: "cus_cli", Key: "order-1", Provider: "stripe",
		Amount: money.MustParse("7.50", money.EUR), Recipient: "acct", PaymentMethod: "pm_card_visa"})
	if !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v", err)
	}
	var cliEnv []string
	for k, v := range env {
		cliEnv = append(cliEnv, k+"="+v)
	}

	out, code := runCLI(t, cliEnv, "reconcile", "--grace", "1ms", "--format", "json", "--database-url", url)
	if code != 0 {
		t.Fatalf("reconcile: exit %d\n%s", code, out)
	}
	var run struct {
		Run struct {
			ID       int64  `json:"id"`
			Instance string `json:"instance"`
		} `json:"run"`
		Counts map[string]int   `json:"counts"`
		Items  []reconcile.Item `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &run); err != nil || len(run.Items) != 1 ||
		run.Items[0].Action != reconcile.ActionCompleted || run.Items[0].Kind != reconcile.KindPendingSucceededAtProvider {
		t.Fatalf("reconcile --format json: %v\n%s", err, out)
	}
	wantCounts := map[string]int{"examined": 1, "repaired": 1, "failed_with_proof": 0, "needs_review": 0, "rescheduled": 0, "divergences": 1}
	if run.Run.ID == 0 || run.Run.Instance == "" || !maps.Equal(run.Counts, wantCounts) || run.Items[0].RunID != run.Run.ID {
		t.Fatalf("reconcile --format json: run %+v, counts %v, want %v\n%s", run.Run, run.Counts, wantCounts, out)
	}
	if in, err := client.Intent(context.Background(), "cus_cli", "order-1"); err != nil || in.Status != payments.IntentSucceeded {
		t.Fatalf("intent after payonce reconcile: %+v %v", in, err)
	}
	out, code = runCLI(t, cliEnv, "reconcile", "--grace", "1ms", "--database-url", url)
	if code != 0 || !strings.Contains(out, "examined 0") || !strings.Contains(out, "no divergences") {
		t.Fatalf("a second run: exit %d\n%s", code, out)
	}
	// A run that found nothing still says what it examined.
	out, code = runCLI(t, cliEnv, "reconcile", "--grace", "1ms", "--format", "json", "--database-url", url)
	run.Items = nil
	if err := json.Unmarshal([]byte(out), &run); code != 0 || err != nil || run.Items == nil || len(run.Items) != 0 ||
		run.Counts["examined"] != 0 || len(run.Counts) != len(wantCounts) {
		t.Fatalf("an empty run, --format json: exit %d %v\n%s", code, err, out)
	}

	out, code = runCLI(t, nil, "report", "--format", "csv", "--kind", string(reconcile.KindPendingSucceededAtProvider), "--database-url", url)
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if code != 0 || err != nil || len(rows) != 2 || rows[1][5] != "cus_cli_charge_order-1" || rows[1][10] != string(reconcile.ActionCompleted) {
		t.Fatalf("report --format csv: exit %d %v\n%s", code, err, out)
	}
	out, code = runCLI(t, nil, "report", "--database-url", url)
	if code != 0 || !strings.Contains(out, "RUN") || !strings.Contains(out, "completed locally") {
		t.Fatalf("report: exit %d\n%s", code, out)
	}
	out, code = runCLI(t, nil, "report", "--format", "html", "--database-url", url)
	if code != 0 || !strings.HasPrefix(out, "<!DOCTYPE html>") || !strings.Contains(out, "cus_cli_charge_order-1") ||
		!strings.Contains(out, "pending locally, succeeded at provider") || strings.Contains(out, "<script") {
		t.Fatalf("report --format html: exit %d\n%s", code, out)
	}
	if out, code := runCLI(t, nil, "report", "--format", "xml", "--database-url", url); code != 2 || !strings.Contains(out, "table, json, csv or html") {
		t.Fatalf("report --format xml: exit %d\n%s", code, out)
	}
	if out, code := runCLI(t, []string{"DATABASE_URL="}, "report"); code != 2 || !strings.Contains(out, "no database") {
		t.Fatalf("report without a database: exit %d\n%s", code, out)
	}
	// Out-of-range flags are refused naming the flag, before any
	// database work: a run would otherwise be stored with defaults the
	// operator did not ask for.
	var runsBefore int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM reconcile_runs`).Scan(&runsBefore); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{
		{"reconcile", "--grace", "0s"}, {"reconcile", "--grace", "-1m"}, {"reconcile", "--batch", "0"}, {"reconcile", "--batch", "-1"},
		{"report", "--runs", "0"}, {"report", "--limit", "-1"}, {"report", "--run", "-1"}, {"report", "--min-age", "-1h"},
		{"report", "--provider", "foo"}, {"report", "--since", "2026-01-01"},
	} {
		out, code := runCLI(t, cliEnv, append(bad, "--database-url", url)...)
		if code != 2 || !strings.Contains(out, bad[1]) {
			t.Errorf("%v: exit %d, want 2 naming %s\n%s", bad, code, bad[1], out)
		}
	}
	var runsAfter int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM reconcile_runs`).Scan(&runsAfter); err != nil || runsAfter != runsBefore {
		t.Fatalf("runs stored by refused commands: %d then %d (%v)", runsBefore, runsAfter, err)
	}
}

// payonce resolve settles an intent under review with a human's decision:
// the retry then gets it; a second resolve is refused.
func TestResolveCommand(t *testing.T) {
	t.Parallel()
	url := pgtest.MigratedURL(t)
	pool := pgtest.PoolURL(t, url)
	fk := fakes.Start(fakes.Options{Stripe: true})
	t.Cleanup(fk.Close)
	env := fk.Env()
	client := fakesClient(t, pool, env)
	ctx := context.Background()
	params := payments.ChargeParams{Scope: "cus_rv", Key: "order-9", Provider: "stripe",
		Amount: money.MustParse("25.00", money.EUR), Recipient: "acct", PaymentMethod: "pm_card_visa"}
	key := "cus_rv_charge_order-9"
	// Another charge carrying the same key (a bug, or another system), then
	// payonce's own with a lost response: two charges for one payment.
	if _, err := client.Provider("stripe").Charge(ctx, provider.ChargeRequest{Key: key, ProviderKey: "other-ref",
		Amount: params.Amount, Recipient: "acct", PaymentMethod: "pm_card_visa"}); err != nil {
		t.Fatal(err)
	}
	fk.Stripe.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	if _, err := client.Charge(ctx, params); !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v", err)
	}
	r, err := reconcile.New(pool, client, &reconcile.Config{Grace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(ctx)
	if err != nil || rep.NeedsReview != 1 {
		t.Fatalf("reconcile: %+v %v, want one intent under review", rep, err)
	}
	if _, err := client.Charge(ctx, params); !errors.Is(err, payments.ErrUnderReview) {
		t.Fatalf("retry under review: %v", err)
	}
	var cliEnv []string
	for k, v := range env {
		cliEnv = append(cliEnv, k+"="+v)
	}
	args := []string{"resolve", "cus_rv", key, "--succeeded", "pi_kept", "--reason", "INC-1: kept one, refunded one", "--database-url", url}
	if out, code := runCLI(t, cliEnv, args...); code != 2 || !strings.Contains(out, "--yes") {
		t.Fatalf("resolve without --yes off a terminal: exit %d\n%s", code, out)
	}
	// Decisions that cannot be right change nothing: a Charge's id where
	// Stripe's adapter records the PaymentIntent's, a blank reason.
	for _, bad := range [][]string{
		{"resolve", "cus_rv", key, "--succeeded", "ch_kept", "--reason", "INC-1", "--yes", "--database-url", url},
		{"resolve", "cus_rv", key, "--succeeded", "pi_kept", "--reason", "   ", "--yes", "--database-url", url},
	} {
		if out, code := runCLI(t, cliEnv, bad...); code != 2 || !strings.Contains(out, "nothing changed") && !strings.Contains(out, "blank") {
			t.Fatalf("%v: exit %d, want 2 naming what is wrong\n%s", bad, code, out)
		}
		if in, err := client.Intent(ctx, "cus_rv", "order-9"); err != nil || in.Status != payments.IntentNeedsReview {
			t.Fatalf("%v: intent %+v %v, want still NEEDS_REVIEW", bad, in, err)
		}
	}
	out, code := runCLI(t, cliEnv, append(args, "--yes")...)
	if code != 0 || !strings.Contains(out, "settled") {
		t.Fatalf("resolve: exit %d\n%s", code, out)
	}
	res, err := client.Charge(ctx, params)
	if err != nil || res.Status != payments.IntentSucceeded || res.ProviderID != "pi_kept" {
		t.Fatalf("retry after the resolution: %+v %v", res, err)
	}
	var entries, audits int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ledger_entries WHERE key = $1),
		(SELECT count(*) FROM operator_audit WHERE command = 'resolve' AND scope = 'cus_rv')`, key).Scan(&entries, &audits); err != nil {
		t.Fatal(err)
	}
	if entries != 1 || audits != 1 {
		t.Fatalf("%d ledger entries and %d audit rows, want 1 and 1", entries, audits)
	}
	if out, code := runCLI(t, cliEnv, append(args, "--yes")...); code != exitRefused || !strings.Contains(out, "not under review") {
		t.Fatalf("a second resolve: exit %d\n%s", code, out)
	}
	if out, code := runCLI(t, cliEnv, "resolve", "cus_rv", key, "--failed", "--succeeded", "x", "--reason", "r", "--yes", "--database-url", url); code != 2 {
		t.Fatalf("two decisions: exit %d\n%s", code, out)
	}
}
