package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/examples/checkout/service"
	"github.com/payonce/payonce/internal/fakes"
	"github.com/payonce/payonce/internal/pgtest"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/providers/stripe/stripetest"
	"github.com/payonce/payonce/reconcile"
)

// payonce reconcile repairs a lost response nobody retried, prints the
// report in each format, and payonce report reads it back.
func TestReconcileAndReportCommands(t *testing.T) {
	t.Parallel()
	url := pgtest.MigratedURL(t)
	pool := pgtest.PoolURL(t, url)
	fk := fakes.Start(fakes.Options{Stripe: true}) // no webhooks: only the reconciler settles
	t.Cleanup(fk.Close)
	env := fk.Env()
	cfg, err := service.ConfigFrom(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	client, err := service.NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	fk.Stripe.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	_, err = client.Charge(context.Background(), payments.ChargeParams{Scope: "cus_cli", Key: "order-1", Provider: "stripe",
		Amount: money.MustParse("7.50", money.EUR), Recipient: "acct", PaymentMethod: "pm_card_visa"})
	if !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v", err)
	}
	var cliEnv []string
	for k, v := range env {
		cliEnv = append(cliEnv, k+"="+v)
	}

	out, code := cli(t, cliEnv, "reconcile", "--grace", "1ms", "--format", "json", "--database-url", url)
	if code != 0 {
		t.Fatalf("reconcile: exit %d\n%s", code, out)
	}
	var items []reconcile.Item
	if err := json.Unmarshal([]byte(out), &items); err != nil || len(items) != 1 ||
		items[0].Action != reconcile.ActionCompleted || items[0].Kind != reconcile.KindPendingSucceededAtProvider {
		t.Fatalf("reconcile --format json: %v\n%s", err, out)
	}
	if in, err := client.Intent(context.Background(), "cus_cli", "order-1"); err != nil || in.Status != payments.IntentSucceeded {
		t.Fatalf("intent after payonce reconcile: %+v %v", in, err)
	}
	out, code = cli(t, cliEnv, "reconcile", "--grace", "1ms", "--database-url", url)
	if code != 0 || !strings.Contains(out, "examined 0") || !strings.Contains(out, "no divergences") {
		t.Fatalf("a second run: exit %d\n%s", code, out)
	}

	out, code = cli(t, nil, "report", "--format", "csv", "--kind", reconcile.KindPendingSucceededAtProvider, "--database-url", url)
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if code != 0 || err != nil || len(rows) != 2 || rows[1][5] != "cus_cli_charge_order-1" || rows[1][10] != reconcile.ActionCompleted {
		t.Fatalf("report --format csv: exit %d %v\n%s", code, err, out)
	}
	out, code = cli(t, nil, "report", "--database-url", url)
	if code != 0 || !strings.Contains(out, "RUN") || !strings.Contains(out, "completed locally") {
		t.Fatalf("report: exit %d\n%s", code, out)
	}
	if out, code := cli(t, nil, "report", "--format", "xml", "--database-url", url); code != 2 || !strings.Contains(out, "table, json or csv") {
		t.Fatalf("report --format xml: exit %d\n%s", code, out)
	}
	if out, code := cli(t, []string{"DATABASE_URL="}, "report"); code != 2 || !strings.Contains(out, "no database") {
		t.Fatalf("report without a database: exit %d\n%s", code, out)
	}
}
