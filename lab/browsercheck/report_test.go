package browsercheck

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/payonce/payonce/lab/internal/browser"
	"github.com/payonce/payonce/reconcile"
)

// The HTML report in headless Chromium (Debian's chromium, which .ci/run
// installs): it renders, makes no network request, and every link of its
// table of contents leads to its section.
func TestWriteHTMLInBrowser(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	err := reconcile.WriteHTML(&buf, reconcile.HTMLReport{Generated: at,
		Runs: []reconcile.Report{{RunID: 1, Instance: "a", Started: at, Examined: 3, Repaired: 1}},
		Items: []reconcile.Item{
			{Kind: reconcile.KindPendingSucceededAtProvider, Provider: "stripe", IntentKey: "cus_1_charge_o-1", RunID: 1, At: at},
			{Kind: reconcile.KindBalanceDrift, Provider: "stripe", Currency: "EUR", RunID: 1, At: at,
				LocalState: "ledger: charged 100.00, refunded 0.00", ProviderState: "charged 112.34, refunded 0.00"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := browser.Load(context.Background(), path, true)
	if errors.Is(err, browser.ErrNoChromium) {
		t.Skip(err) // make test's .ci/run installs it
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Requests) > 0 || res.Links != 6 || len(res.Unresolved) > 0 || res.Title != "payonce divergence report" || len(res.PNG) == 0 {
		t.Fatalf("in the browser: %d requests %q, %d links, unresolved %q, title %q, %d bytes of screenshot",
			len(res.Requests), res.Requests, res.Links, res.Unresolved, res.Title, len(res.PNG))
	}
}
