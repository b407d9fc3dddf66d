// Command runbookcheck runs the commands of docs/runbook.md as written and
// checks that they show what the runbook says (make runbook, part of make
// test):
//
//	go run ./lab/cmd/withpg -- go run ./lab/cmd/runbookcheck
//
// It builds the payonce CLI into a temporary directory and puts it first
// on PATH as payonce, with psql from the local PostgreSQL binaries; creates
// a fresh schema on TEST_DATABASE_URL and applies payonce migrate up;
// starts `lab fake stripe` in the background and the checkout
// example's service in process; plants each situation the runbook treats
// (records stuck PROCESSING, charges whose answers were lost, a key charged
// twice at Stripe, one purchase charged under two keys, expired records, a
// flooding scope, sagas stuck, rolled back and in review); then runs every block marked `sh runbook` (bash) or
// `sql runbook` (psql with the runbook's variables) in order, in one shell
// session so that the variables a block sets reach the next ones. A block
// fails on an exit code other than its expect-exit (default 0) or an
// output without one of its expect lines. At the end the books must equal
// Stripe's: the ledger's Stripe cash equals the fake's net. Before any of
// it, every alert the runbook cites must exist in deploy/monitoring and
// every divergence kind of package reconcile must have a row in its table.
//
// With -v it prints every block's output, for whoever edits the runbook:
//
//	go run ./lab/cmd/withpg -- go run ./lab/cmd/runbookcheck -v
//
// It exits 0 when every block passed, 1 otherwise, and removes the
// schema, the temporary directory and the background fake in every case.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/examples/checkout/service"
	"github.com/payonce/payonce/providers"
	"github.com/payonce/payonce/reconcile"
)

// stripeSecret is the API key the runbook's commands send the fake.
const stripeSecret = "sk_test_runbook"

var verbose = flag.Bool("v", false, "print every block's output")

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "runbookcheck: FAIL:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	start := time.Now()

	base := os.Getenv("TEST_DATABASE_URL")
	if base == "" {
		return errors.New("TEST_DATABASE_URL is unset: run under withpg (make runbook)")
	}
	blocks, err := parseRunbook("docs/runbook.md")
	if err != nil {
		return err
	}
	if len(blocks) == 0 {
		return errors.New("docs/runbook.md has no `sh runbook` or `sql runbook` block")
	}
	ruleFiles, _ := filepath.Glob("deploy/monitoring/*.rules.yml")
	if err := checkReferences("docs/runbook.md", ruleFiles, []string{string(reconcile.KindPendingSucceededAtProvider),
		string(reconcile.KindPendingFailedAtProvider), string(reconcile.KindPendingMissingAtProvider), string(reconcile.KindPendingUnknownAtProvider),
		string(reconcile.KindAmountDiffers), string(reconcile.KindDuplicateAtProvider), string(reconcile.KindRefundOutcomeMissing),
		string(reconcile.KindProviderUnavailable), string(reconcile.KindStuckRecord), string(reconcile.KindUnmatchedProviderObject),
		string(reconcile.KindWebhookConflict), string(reconcile.KindPastProviderWindow), string(reconcile.KindVoidRefused),
		string(reconcile.KindSucceededAfterDecline), string(reconcile.KindRefundFailedAfterSuccess)}); err != nil {
		return err
	}
	if err := tools(); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "runbookcheck-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "bin")
	for name, pkg := range map[string]string{"payonce": "./cmd/payonce", "lab": "./lab/cmd/lab"} {
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, name), pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	path := bin + string(os.PathListSeparator) + os.Getenv("PATH")
	if dir := pgBinDir(); dir != "" {
		path = bin + string(os.PathListSeparator) + dir + string(os.PathListSeparator) + os.Getenv("PATH")
	}

	// A fresh schema, selected by the URL for psql and pgx alike.
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	schema := "runbook_" + hex.EncodeToString(rnd[:])
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	defer func() {
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			fmt.Fprintln(os.Stderr, "runbookcheck: drop schema:", err)
		}
	}()
	dbURL, err := withSearchPath(base, schema)
	if err != nil {
		return err
	}
	env := append(os.Environ(), "PATH="+path, "DATABASE_URL="+dbURL, "PAGER=cat", "PSQL_PAGER=cat", "COLUMNS=200")
	payonce := func(args ...string) *exec.Cmd {
		c := exec.CommandContext(ctx, filepath.Join(bin, "payonce"), args...)
		c.Env = env
		return c
	}
	if out, err := payonce("migrate", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("payonce migrate up: %v\n%s", err, out)
	}

	fake := exec.CommandContext(ctx, filepath.Join(bin, "lab"), "fake", "stripe", "--addr", "127.0.0.1:0")
	fake.Env = env
	stripeURL, stopFake, err := startFake(fake)
	if err != nil {
		return err
	}
	defer stopFake()

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	checkoutURL, stopCheckout, err := startCheckout(ctx, dbURL, stripeURL)
	if err != nil {
		return err
	}
	defer stopCheckout()

	if err := plant(ctx, pool, stripeURL); err != nil {
		return err
	}
	env = append(env, "STRIPE_API_BASE="+stripeURL, "STRIPE_SECRET_KEY="+stripeSecret, "CHECKOUT_URL="+checkoutURL)
	if err := runBlocks(ctx, tmp, env, blocks); err != nil {
		return err
	}
	if err := booksMatch(ctx, pool, stripeURL); err != nil {
		return err
	}
	fmt.Printf("runbookcheck: ok: %d runbook blocks ran as written (%s)\n", len(blocks), time.Since(start).Round(time.Millisecond))
	return nil
}

// tools checks for the programs the runbook's commands use besides payonce
// and psql. Missing ones are installed from Debian's packages when we are
// root (CI), as deploy/monitoring/check.sh installs promtool.
func tools() error {
	var missing []string
	for _, t := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil || os.Getuid() != 0 {
		return fmt.Errorf("the runbook's commands need %s: install them (Debian/Ubuntu: sudo apt-get install %s)",
			strings.Join(missing, ", "), strings.Join(missing, " "))
	}
	fmt.Println("runbookcheck: installing", strings.Join(missing, " "), "from Debian's packages")
	for _, args := range [][]string{{"update", "-qq"}, append([]string{"install", "-y", "-qq", "--no-install-recommends"}, missing...)} {
		c := exec.Command("apt-get", args...)
		c.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// pgBinDir is the newest /usr/lib/postgresql/*/bin holding psql, as
// pgtest/localpg finds the server binaries; "" leaves psql to PATH.
func pgBinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "psql")); err == nil {
			return d
		}
	}
	return ""
}

func pgMajor(dir string) int {
	var n int
	fmt.Sscanf(filepath.Base(filepath.Dir(dir)), "%d", &n)
	return n
}

// withSearchPath selects schema through the "options" parameter, which
// both libpq (psql) and pgx (payonce) pass to the server.
func withSearchPath(base, schema string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("TEST_DATABASE_URL: %w", err)
	}
	q := u.Query()
	q.Set("options", "-csearch_path="+schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// startFake starts `lab fake stripe` in a process group of its own and
// returns its base URL, read from its first line, and a function that
// stops the group and waits for it.
func startFake(c *exec.Cmd) (string, func(), error) {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	out, err := c.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		return "", nil, fmt.Errorf("lab fake stripe: %w", err)
	}
	exited := make(chan struct{})
	stop := func() {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	lines := bufio.NewScanner(out)
	first := ""
	if lines.Scan() {
		first = lines.Text()
	}
	go func() {
		_, _ = io.Copy(io.Discard, out)
		_ = c.Wait()
		close(exited)
	}()
	const prefix = "fake stripe: listening on "
	if !strings.HasPrefix(first, prefix) {
		stop()
		return "", nil, fmt.Errorf("lab fake stripe: want %q..., got %q", prefix, first)
	}
	return strings.TrimPrefix(first, prefix), stop, nil
}

// startCheckout serves the checkout example's service (the application
// whose refund endpoint the runbook calls) on a loopback port.
func startCheckout(ctx context.Context, dbURL, stripeURL string) (string, func(), error) {
	svc, err := service.Open(ctx, service.Config{DatabaseURL: dbURL, Config: providers.Config{
		Stripe: providers.StripeConfig{APIBase: stripeURL, SecretKey: stripeSecret}, Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		return "", nil, fmt.Errorf("checkout service: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		svc.Close()
		return "", nil, err
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	return "http://" + l.Addr().String(), func() {
		_ = srv.Close()
		<-done
		svc.Close()
	}, nil
}

// runBlocks runs blocks in one bash session, each block's output and exit
// code into files of dir, stopping at the first exit code other than the
// block's expected one; then checks the outputs against the expectations.
func runBlocks(ctx context.Context, dir string, env []string, blocks []block) error {
	var script strings.Builder
	script.WriteString("SCOPE= KEY= KEEP=\ncd " + shellQuote(dir) + "\n")
	for i, b := range blocks {
		name := filepath.Join(dir, fmt.Sprintf("block%02d", i))
		out, rc := shellQuote(name+".out"), shellQuote(name+".rc")
		switch b.lang {
		case "sh":
			if err := os.WriteFile(name+".sh", []byte(b.body), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(&script, "{ . %s; } >%s 2>&1 </dev/null; rc=$?\n", shellQuote(name+".sh"), out)
		case "sql":
			if err := os.WriteFile(name+".sql", []byte(b.body), 0o644); err != nil {
				return err
			}
			// Exactly the invocation the runbook gives.
			fmt.Fprintf(&script, "psql \"$DATABASE_URL\" -X -v ON_ERROR_STOP=1 -v scope=\"$SCOPE\" -v key=\"$KEY\" -v keep=\"$KEEP\" -f %s >%s 2>&1 </dev/null; rc=$?\n",
				shellQuote(name+".sql"), out)
		}
		fmt.Fprintf(&script, "echo $rc >%s\n[ $rc -eq %d ] || exit 0\n", rc, b.exit)
	}
	c := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-c", script.String())
	c.Env = env
	c.Dir = dir
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("the runbook session failed: %v\n%s", err, out)
	}
	for i, b := range blocks {
		name := filepath.Join(dir, fmt.Sprintf("block%02d", i))
		rcText, err := os.ReadFile(name + ".rc")
		if err != nil {
			return fmt.Errorf("%s did not run (a block before it stopped the session)", b)
		}
		out, _ := os.ReadFile(name + ".out")
		if *verbose {
			fmt.Printf("--- %s\n%s\n", b, indent(out))
		}
		var rc int
		fmt.Sscanf(string(rcText), "%d", &rc)
		if rc != b.exit {
			return fmt.Errorf("%s exited %d, want %d; its output:\n%s", b, rc, b.exit, indent(out))
		}
		for _, want := range b.expect {
			if !strings.Contains(string(out), want) {
				return fmt.Errorf("%s: its output lacks %q; its output:\n%s", b, want, indent(out))
			}
		}
		fmt.Printf("ok  %s\n", b)
	}
	return nil
}

// booksMatch checks what following the runbook must leave: Stripe's
// cash in the ledger equals the fake's net in EUR (every charge it holds
// minus every refund), and the key charged twice at Stripe is settled on
// one of its two PaymentIntents.
func booksMatch(ctx context.Context, pool *pgxpool.Pool, stripeURL string) error {
	var ledgerMinor int64
	err := pool.QueryRow(ctx, `SELECT coalesce(sum(p.amount), 0) * 100 FROM ledger_postings p
		JOIN ledger_accounts a ON a.id = p.account_id WHERE a.code = 'provider:stripe' AND a.currency = 'EUR'`).Scan(&ledgerMinor)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	var totals map[string]struct{ Succeeded, Refunded, Net int64 }
	if err := getJSON(ctx, stripeURL+"/_fake/totals", &totals); err != nil {
		return err
	}
	if net := totals["eur"].Net; net != ledgerMinor || net == 0 {
		return fmt.Errorf("books: the ledger holds %d cents of Stripe cash in EUR, the fake's net is %d (totals %+v)", ledgerMinor, net, totals)
	}
	var counts struct {
		PaymentIntents int `json:"payment_intents"`
	}
	if err := getJSON(ctx, stripeURL+"/_fake/counts?metadata_key=payonce_key&metadata_value=usr_bob_charge_order-2002", &counts); err != nil {
		return err
	}
	var status string
	if err := pool.QueryRow(ctx, `SELECT status FROM payment_intents WHERE user_id = 'usr_bob' AND idempotency_key = 'usr_bob_charge_order-2002'`).Scan(&status); err != nil {
		return err
	}
	if counts.PaymentIntents != 2 || status != "SUCCEEDED" {
		return fmt.Errorf("the key charged twice: %d PaymentIntents at the fake (want 2), intent %s (want SUCCEEDED)", counts.PaymentIntents, status)
	}
	fmt.Printf("ok  books: the ledger's Stripe cash equals the fake's net, %d.%02d EUR\n", ledgerMinor/100, ledgerMinor%100)
	return nil
}

func getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func indent(b []byte) string {
	s := strings.TrimRight(string(b), "\n")
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
