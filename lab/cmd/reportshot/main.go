// Command reportshot renders an example divergence report (payonce report
// --format html) from fixed runs and items, checks it in headless Chromium
// (zero network requests, every table-of-contents link resolves) and
// writes it and its screenshot: make report-screenshot.
//
//	go run ./lab/cmd/reportshot docs/report-example.html docs/report-example.png
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/payonce/payonce/lab/internal/browser"
	"github.com/payonce/payonce/reconcile"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: reportshot OUT.html OUT.png")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "reportshot:", err)
		os.Exit(1)
	}
}

// example is a day of reconciler runs as an operator would see them.
func example() reconcile.HTMLReport {
	at := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	var r reconcile.HTMLReport
	for i := range 6 {
		r.Runs = append(r.Runs, reconcile.Report{RunID: int64(40 + i), Instance: []string{"worker-a", "worker-b"}[i%2],
			Started: at.Add(time.Duration(i) * 2 * time.Hour), Examined: 20 + 3*i, Repaired: i % 3, FailedWithProof: i % 2, NeedsReview: i / 5})
	}
	r.Runs[3].Error = "adyen: lookup: provider unavailable"
	add := func(run int, kind reconcile.Kind, provider, key, local, theirs string, action reconcile.Action, detail string) {
		r.Items = append(r.Items, reconcile.Item{Kind: kind, Provider: provider, IntentKey: key, LocalState: local, ProviderState: theirs,
			Action: action, Detail: detail, RunID: int64(40 + run), At: at.Add(time.Duration(run) * 2 * time.Hour), Age: 12 * time.Minute})
	}
	add(0, reconcile.KindPendingSucceededAtProvider, "stripe", "cus_118_charge_order-5512", "UNKNOWN", "succeeded pi_3Qx", reconcile.ActionCompleted, "")
	add(1, reconcile.KindPendingMissingAtProvider, "paypal", "cus_204_charge_order-5530", "UNKNOWN", "nothing found", reconcile.ActionFailedWithProof, "consistent lookup")
	add(2, reconcile.KindPendingSucceededAtProvider, "adyen", "cus_077_charge_order-5561", "PENDING", "AUTHORISATION success", reconcile.ActionCompleted, "")
	add(3, reconcile.KindProviderUnavailable, "adyen", "", "", "lookup failed", reconcile.ActionRescheduled, "503 from the Checkout API")
	add(4, reconcile.KindStuckRecord, "", "usr_7fQ9x_createOrder_0b7e2c1e", "PROCESSING", "", reconcile.ActionReported, "lease ended 20 minutes ago")
	add(5, reconcile.KindDuplicateAtProvider, "stripe", "cus_301_charge_order-5600", "SUCCEEDED", "pi_1 succeeded, pi_2 succeeded", reconcile.ActionNeedsReview, "two charges for one attempt")
	for i, d := range []struct{ cur, ledger, provider string }{
		{"EUR", "ledger: charged 1520.00, refunded 40.00", "charged 1534.99, refunded 40.00"},
		{"EUR", "ledger: charged 1602.50, refunded 10.00", "charged 1602.50, refunded 15.50"},
		{"EUR", "ledger: charged 1710.00, refunded 0.00", "charged 1722.34, refunded 0.00"},
		{"USD", "ledger: charged 980.00, refunded 0.00", "charged 999.99, refunded 0.00"},
	} {
		r.Items = append(r.Items, reconcile.Item{Kind: reconcile.KindBalanceDrift, Provider: "stripe", Currency: d.cur, LocalState: d.ledger,
			ProviderState: d.provider, Action: reconcile.ActionReported, RunID: int64(40 + i), At: at.Add(time.Duration(i) * 2 * time.Hour)})
	}
	r.Generated = at.Add(12 * time.Hour)
	return r
}

func run(htmlPath, pngPath string) error {
	f, err := os.Create(htmlPath)
	if err != nil {
		return err
	}
	if err := reconcile.WriteHTML(f, example()); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	res, err := browser.Load(context.Background(), htmlPath, true)
	if err != nil {
		return err
	}
	if len(res.Requests) > 0 || len(res.Unresolved) > 0 || res.Links == 0 {
		return fmt.Errorf("%d network requests %q, %d links, unresolved %q", len(res.Requests), res.Requests, res.Links, res.Unresolved)
	}
	if err := os.WriteFile(pngPath, res.PNG, 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: %q rendered, %d table-of-contents links resolve, 0 network requests; screenshot %s\n", htmlPath, res.Title, res.Links, pngPath)
	return nil
}
