// Package layout checks the shape of payonce's modules (issue 25): what a
// user of the SDK gets in their module graph, what the operator binary
// and the provider adapters link, and that the README's layout table
// names every Go folder at the root. Its tests are the whole package.
package layout

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository's root: this package is lab/layout.
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, stderr)
	}
	return string(out)
}

// workshop holds the modules a user of the SDK must never get: the lab's,
// the CLI's and the examples' dependencies.
var workshop = []string{
	"github.com/chromedp/", "github.com/nats-io/nats-server", "github.com/Shopify/toxiproxy",
	"github.com/riverqueue/river", "github.com/spf13/cobra", "github.com/creack/pty",
	"github.com/schollz/progressbar",
}

// A new service that imports only the PostgreSQL store, as a user would
// (its own module, no workspace), has none of the workshop's modules in
// its module graph: the SDK's go.mod requires only what its own packages
// and their tests import.
func TestSDKModuleGraph(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gomod := "module example.com/checkout\n\ngo 1.26.0\n\nrequire github.com/payonce/payonce v0.0.0-00010101000000-000000000000\n\n" +
		"replace github.com/payonce/payonce => " + root(t) + "\n"
	main := "package main\n\nimport _ \"github.com/payonce/payonce/idempotency/pgstore\"\n\nfunc main() {}\n"
	for name, body := range map[string]string{"go.mod": gomod, "main.go": main} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"GOWORK=off", "GOFLAGS=-mod=mod"}
	goCmd(t, dir, env, "mod", "tidy")
	all := goCmd(t, dir, env, "list", "-m", "all")
	if !strings.Contains(all, "github.com/jackc/pgx/v5 ") {
		t.Fatalf("the graph lacks pgx, which pgstore imports: is this the right module?\n%s", all)
	}
	for _, line := range strings.Split(all, "\n") {
		for _, w := range workshop {
			if strings.HasPrefix(line, w) {
				t.Errorf("a user of pgstore gets %s in their module graph", line)
			}
		}
		// The Redis and DynamoDB stores and the NATS inbox are modules of
		// their own: a PostgreSQL user gets none of their clients.
		for _, w := range besideTheSDK {
			if strings.HasPrefix(line, w) {
				t.Errorf("a user of pgstore gets %s, the client of a module beside the SDK, in their module graph", line)
			}
		}
	}
}

// besideTheSDK are the clients the modules beside the SDK bring
// (idempotency/redisstore, idempotency/dynamostore,
// idempotency/inbox/natsinbox).
var besideTheSDK = []string{"github.com/redis/go-redis/", "github.com/aws/", "github.com/nats-io/nats.go"}

// The operator binary links no provider fake, no PostgreSQL starter, no
// chaos proxy, no browser.
func TestOperatorLinksNoWorkshop(t *testing.T) {
	t.Parallel()
	deps := goCmd(t, filepath.Join(root(t), "cmd", "payonce"), nil, "list", "-deps", ".")
	if !strings.Contains(deps, "github.com/payonce/payonce/payments\n") {
		t.Fatalf("the operator does not link payments: is this the right package?\n%s", deps)
	}
	for _, p := range strings.Split(deps, "\n") {
		for _, bad := range []string{"stripetest", "adyentest", "paypaltest", "/localpg", "payonce/pgtest", "/providers/fakes", "toxiproxy", "chromedp"} {
			if strings.Contains(p, bad) {
				t.Errorf("payonce links %s", p)
			}
		}
	}
}

// The adapters implement payments/provider, the SPI, and import neither the
// client (package payments) nor what it runs on: pgx, pgstore, the ledger.
func TestAdaptersImportOnlyTheSPI(t *testing.T) {
	t.Parallel()
	for _, adapter := range []string{"stripe", "adyen", "paypal"} {
		deps := goCmd(t, root(t), nil, "list", "-deps", "./providers/"+adapter)
		if !strings.Contains(deps, "github.com/payonce/payonce/payments/provider\n") {
			t.Fatalf("providers/%s does not link payments/provider: is this the right package?\n%s", adapter, deps)
		}
		for _, p := range strings.Split(deps, "\n") {
			if p == "github.com/payonce/payonce/payments" || strings.HasPrefix(p, "github.com/jackc/pgx") ||
				p == "github.com/payonce/payonce/idempotency/pgstore" || p == "github.com/payonce/payonce/ledger" {
				t.Errorf("providers/%s links %s", adapter, p)
			}
		}
	}
}

// No example imports an internal package (its own or the SDK's), so that a
// user who copies one can build it: the examples use public packages only,
// in their code and their tests.
func TestExamplesImportNoInternal(t *testing.T) {
	t.Parallel()
	out := goCmd(t, root(t), nil, "list", "-f",
		`{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`, "./examples/...")
	pkgs := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		fields := strings.Fields(line)
		pkgs++
		for _, imp := range fields[1:] {
			if strings.Contains("/"+imp+"/", "/internal/") && strings.HasPrefix(imp, "github.com/payonce/") {
				t.Errorf("%s imports %s", fields[0], imp)
			}
		}
	}
	if pkgs < 4 {
		t.Fatalf("only %d example packages listed: is this the right folder?\n%s", pkgs, out)
	}
}

// The README's layout table lists exactly the folders at the root that
// hold Go code.
func TestReadmeLayoutListsTheRootGoFolders(t *testing.T) {
	t.Parallel()
	r := root(t)
	var want []string
	entries, err := os.ReadDir(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		hasGo := false
		_ = filepath.WalkDir(filepath.Join(r, e.Name()), func(_ string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(d.Name(), ".go") {
				hasGo = true
				return filepath.SkipAll
			}
			return nil
		})
		if hasGo {
			want = append(want, e.Name())
		}
	}
	f, err := os.Open(filepath.Join(r, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	row := regexp.MustCompile("^\\| `([a-z0-9_-]+)/` \\|")
	var got []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "## Layout":
			in = true
		case in && strings.HasPrefix(line, "## "):
			in = false
		case in:
			if m := row.FindStringSubmatch(line); m != nil {
				got = append(got, m[1])
			}
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the README's layout table lists %q; the Go folders at the root are %q", got, want)
	}
}

// intentSQL matches a SQL statement's use of the intents' table.
var intentSQL = regexp.MustCompile(`(?i)\b(from|update|into|join|table)\s+payment_intents\b`)

// intentSQLAuditors are the lab's checkers that read the intents' table
// with their own SQL on purpose, as tests do: the torture and storm checks
// and the runbook check audit payments from outside (a check that went
// through payments.Operator would trust the code it checks), and the
// runbook check backdates its planted intents as a fault would. They run
// only in the lab, never in a service. The list does not grow without a
// reason of that kind, and a file that no longer needs its entry fails the
// test until the entry goes.
var intentSQLAuditors = []string{
	"lab/cmd/lab/storm_leaks.go",
	"lab/cmd/lab/storm_sagas.go",
	"lab/cmd/lab/torture.go",
	"lab/cmd/lab/torture_check.go",
	"lab/cmd/runbookcheck/main.go",
	"lab/cmd/runbookcheck/plant.go",
}

// Every statement on payment_intents lives in package payments (issue 25):
// no non-test Go file outside payments/ runs SQL on the table, but for the
// lab's auditors. The reconciler, the CLI and the examples reach intents
// through payments.Operator. Mentions that are not SQL (Stripe's
// /v1/payment_intents, the migrations' docs) are fine.
func TestIntentSQLOnlyInPayments(t *testing.T) {
	t.Parallel()
	r := root(t)
	var found []string
	err := filepath.WalkDir(r, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(r, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "payments" || rel == "migrations" || d.Name() == "testdata" || (strings.HasPrefix(d.Name(), ".") && rel != ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if intentSQL.Match(src) {
			found = append(found, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		if !slices.Contains(intentSQLAuditors, f) {
			t.Errorf("%s runs SQL on payment_intents: move the statement into package payments behind a method of "+
				"payments.Operator, and call that", f)
		}
	}
	for _, f := range intentSQLAuditors {
		if !slices.Contains(found, f) {
			t.Errorf("%s no longer runs SQL on payment_intents: remove it from intentSQLAuditors", f)
		}
	}
}
