package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/examples/checkout/service"
	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers/fakes"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/saga"
)

// The crash matrix over HTTP: the service runs as a child process (this
// test binary, CHECKOUT_SERVE=1) that PAYONCE_CHECKOUT_CRASH_AT kills with
// SIGKILL at one boundary of the checkout saga, in the middle of a
// POST /checkout. A new process is started on the same database and
// providers; then either the client retries with the same key, or it gives
// up and the new process's recovery job alone finishes the saga. Either
// way the saga ends COMPLETED (ROLLED_BACK when the confirm step refuses
// the order), with one charge at the provider (and one refund when rolled
// back), the stock right, and the books balanced.

// crashLease is the children's lease (CHECKOUT_LOCK_TIMEOUT): what the
// survivor waits for before it takes a dead process's saga over. A live
// holder stops when its heartbeats go unconfirmed for the lease less its
// margin: the 30 children of the matrix run at once under the race
// detector, so the lease leaves their heartbeats seconds, not a
// fraction of one.
const crashLease = "3s"

// doomedSKU is refused by the confirm step
// (PAYONCE_CHECKOUT_FAIL_CONFIRM_SKU): its checkouts roll back after the
// charge.
const doomedSKU = "doomed"

type crashCase struct {
	at       string // PAYONCE_CHECKOUT_CRASH_AT
	rollback bool   // the confirm step refuses the order
	by       string // "retry": the client retries; "recover": only the recovery job
}

// crashState is what the dead process left, by crash point: the steps'
// statuses (reserve, charge, confirm) and the charges and refunds already
// at the provider. It shows that each crash is where its name says.
var crashState = map[string]struct {
	steps            string
	charges, refunds int
}{
	"reserve:before":            {"PENDING PENDING PENDING", 0, 0},
	"reserve:commit":            {"PENDING PENDING PENDING", 0, 0}, // its transaction never committed
	"reserve:after":             {"DONE PENDING PENDING", 0, 0},
	"charge:before":             {"DONE RUNNING PENDING", 0, 0}, // a remote step's start is recorded first
	"charge:commit":             {"DONE RUNNING PENDING", 1, 0}, // charged, not recorded by the saga
	"charge:after":              {"DONE DONE PENDING", 1, 0},
	"confirm:before":            {"DONE DONE PENDING", 1, 0},
	"confirm:commit":            {"DONE DONE PENDING", 1, 0},
	"confirm:after":             {"DONE DONE DONE", 1, 0}, // the saga's own end not yet recorded
	"charge_compensate:before":  {"DONE COMPENSATING FAILED", 1, 0},
	"charge_compensate:commit":  {"DONE COMPENSATING FAILED", 1, 1}, // refunded, not recorded by the saga
	"charge_compensate:after":   {"DONE COMPENSATED FAILED", 1, 1},
	"reserve_compensate:before": {"DONE COMPENSATED FAILED", 1, 1},
	"reserve_compensate:commit": {"DONE COMPENSATED FAILED", 1, 1},
	"reserve_compensate:after":  {"COMPENSATED COMPENSATED FAILED", 1, 1},
}

func crashCases() []crashCase {
	var cases []crashCase
	for _, by := range []string{"retry", "recover"} {
		for _, step := range []string{service.StepReserve, service.StepCharge, service.StepConfirm} {
			for _, phase := range []string{"before", "commit", "after"} {
				cases = append(cases, crashCase{at: step + ":" + phase, by: by})
			}
		}
		for _, step := range []string{service.StepCharge, service.StepReserve} {
			for _, phase := range []string{"before", "commit", "after"} {
				cases = append(cases, crashCase{at: step + "_compensate:" + phase, rollback: true, by: by})
			}
		}
	}
	return cases
}

func TestCheckoutCrashMatrix(t *testing.T) {
	t.Parallel()
	for _, c := range crashCases() {
		name := c.at + "/" + c.by
		if c.rollback {
			name = "rollback/" + name
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testCrash(t, c)
		})
	}
}

func testCrash(t *testing.T, c crashCase) {
	const user, key = "alice", "order-crash-1"
	sku, wantStatus, wantCode, wantStock := "crate", "COMPLETED", http.StatusCreated, 0
	if c.rollback {
		sku, wantStatus, wantCode, wantStock = doomedSKU, "ROLLED_BACK", http.StatusConflict, 1
	}
	body := fmt.Sprintf(`{"sku": %q, "qty": 1, "amount": "31.40", "currency": "EUR", "payment_method": "pm_card_visa", "provider": "stripe", "recipient": "acct_shop"}`, sku)

	fk := fakes.Start(fakes.Options{Stripe: true, Adyen: true, PayPal: true})
	t.Cleanup(fk.Close)
	db := pgtest.SchemaURL(t)
	env := []string{"CHECKOUT_SERVE=1", "ADDR=127.0.0.1:0", "DATABASE_URL=" + db, "CHECKOUT_LOCK_TIMEOUT=" + crashLease,
		"PAYONCE_CHECKOUT_FAIL_CONFIRM_SKU=" + doomedSKU}
	for k, v := range fk.Env() {
		env = append(env, k+"="+v)
	}

	doomed := startChild(t, append(env, "CHECKOUT_RECOVER_SPEC=off", "PAYONCE_CHECKOUT_CRASH_AT="+c.at))
	if a := call(t, doomed.url, "POST", "/inventory", user, "", fmt.Sprintf(`{"sku": %q, "stock": 1}`, sku)); a.code != 200 {
		t.Fatalf("set stock: %d %s", a.code, a.raw)
	}
	if a, err := try(doomed.url, "POST", "/checkout", user, key, body); err == nil {
		t.Fatalf("the service survived its crash point %s: %d %s\n%s", c.at, a.code, a.raw, doomed.logs.String())
	}
	doomed.waitKilled(t)
	pool := pgtest.PoolURL(t, db)
	ck, _ := idempotency.ComposeKey(user, "charge", saga.SubKey(key, service.StepCharge))
	rk, _ := idempotency.ComposeKey(user, "refund", saga.CompensationKey(key, service.StepCharge))
	counts := func() (charges, refunds int) {
		return fk.Stripe.CountsByMetadata(paystripe.MetadataKey, ck).PaymentIntents, fk.Stripe.CountsByMetadata(paystripe.MetadataKey, rk).Refunds
	}
	want := crashState[c.at]
	if steps, final := sagaSteps(t, pool, user, key); steps != want.steps || final {
		t.Fatalf("after the crash at %s: steps %s (final %v), want %s", c.at, steps, final, want.steps)
	}
	if charges, refunds := counts(); charges != want.charges || refunds != want.refunds {
		t.Fatalf("after the crash at %s: %d charges and %d refunds at Stripe, want %d and %d", c.at, charges, refunds, want.charges, want.refunds)
	}

	recoverSpec := "off"
	if c.by == "recover" {
		recoverSpec = "@every 1s"
	}
	next := startChild(t, append(env, "CHECKOUT_RECOVER_SPEC="+recoverSpec))
	var final answer
	if c.by == "retry" {
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
			final = call(t, next.url, "POST", "/checkout", user, key, body)
			if final.code != http.StatusAccepted && final.problem() != "request-in-progress" || time.Now().After(deadline) {
				break
			}
		}
	} else {
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
			got := call(t, next.url, "GET", "/checkout/"+key, user, "", "")
			if got.body["status"] == wantStatus || time.Now().After(deadline) {
				break
			}
		}
		// The client comes back: it gets the stored answer, nothing runs.
		final = call(t, next.url, "POST", "/checkout", user, key, body)
		if final.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the client's retry after recovery ran the saga again: %d %s", final.code, final.raw)
		}
	}
	if final.code != wantCode || final.body["status"] != wantStatus {
		t.Fatalf("outcome: %d %s, want %d %s\nfirst process:\n%s\nsecond process:\n%s", final.code, final.raw, wantCode, wantStatus,
			doomed.logs.String(), next.logs.String())
	}
	if got := call(t, next.url, "GET", "/checkout/"+key, user, "", ""); got.body["status"] != wantStatus {
		t.Fatalf("stored state: %s", got.raw)
	}

	// One charge at the provider; one refund when rolled back.
	wantRefunds := 0
	if c.rollback {
		wantRefunds = 1
	}
	if charges, refunds := counts(); charges != 1 || refunds != wantRefunds {
		t.Fatalf("%d charges and %d refunds at Stripe, want 1 and %d", charges, refunds, wantRefunds)
	}
	checkStock(t, pool, sku, 1, wantStock)
	checkBooks(t, pool, fk.Stripe.Totals()["eur"].Net)
}

// sagaSteps reads the checkout saga's steps' statuses, in order, as the
// saga package keeps them.
func sagaSteps(t *testing.T, pool *pgxpool.Pool, user, key string) (steps string, final bool) {
	t.Helper()
	orch, err := saga.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := orch.State(context.Background(), user, key)
	if err != nil {
		t.Fatalf("saga state: %v", err)
	}
	var out []string
	for _, st := range s.Steps {
		out = append(out, string(st.Status))
	}
	return strings.Join(out, " "), s.Status.Final()
}

// checkStock checks that sku was never oversold: its stock is want, and
// it plus what reservations hold is what was put in.
func checkStock(t *testing.T, pool *pgxpool.Pool, sku string, initial, want int) {
	t.Helper()
	var stock, held, orders int
	err := pool.QueryRow(context.Background(), `SELECT
		(SELECT stock FROM inventory WHERE sku = $1),
		(SELECT coalesce(sum(qty), 0) FROM reservations WHERE sku = $1 AND status <> 'RELEASED'),
		(SELECT count(*) FROM orders WHERE sku = $1)`, sku).Scan(&stock, &held, &orders)
	if err != nil {
		t.Fatal(err)
	}
	if stock != want || stock+held != initial || orders != initial-want {
		t.Fatalf("sku %s: stock %d, %d held, %d orders; want stock %d of %d", sku, stock, held, orders, want, initial)
	}
}

// checkBooks checks that the ledger balances (per currency) and that
// Stripe's cash account holds what the provider holds (net, in cents).
func checkBooks(t *testing.T, pool *pgxpool.Pool, net int64) {
	t.Helper()
	var unbalanced int
	var cash string
	err := pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM (SELECT currency FROM ledger_postings GROUP BY currency HAVING sum(amount) <> 0) x),
		(SELECT coalesce(sum(p.amount), 0)::numeric(20, 2)::text FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
		  WHERE a.code = 'provider:stripe' AND a.currency = 'EUR')`).Scan(&unbalanced, &cash)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d.%02d", net/100, net%100); unbalanced != 0 || cash != want {
		t.Fatalf("books: %d unbalanced currencies; provider:stripe holds %s EUR, Stripe %s", unbalanced, cash, want)
	}
}

// child is a service process.
type child struct {
	cmd  *exec.Cmd
	url  string
	logs *syncBuffer
	done chan error
}

// startChild starts this binary as the service with env, and waits until
// it listens.
func startChild(t *testing.T, env []string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, logs: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = c.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "checkout: listening on "); ok {
				urls <- u
			}
		}
		close(urls)
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	select {
	case c.url = <-urls:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the service did not start within 2 minutes; logs:\n%s", c.logs.String())
	}
	if c.url == "" {
		t.Fatalf("the service exited; logs:\n%s", c.logs.String())
	}
	return c
}

// waitKilled waits for the child's death by SIGKILL.
func (c *child) waitKilled(t *testing.T) {
	t.Helper()
	select {
	case err := <-c.done:
		c.done <- err // for the cleanup
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("the service was not killed: %v\n%s", err, c.logs.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the service did not die; logs:\n%s", c.logs.String())
	}
}

type answer struct {
	code   int
	header http.Header
	body   map[string]any
	raw    []byte
}

func (a answer) problem() string {
	s, _ := a.body["type"].(string)
	return strings.TrimPrefix(s, "https://payonce.dev/problems/")
}

var client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func try(base, method, path, user, key, body string) (answer, error) {
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+user)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{code: resp.StatusCode, header: resp.Header, raw: raw}
	if err := json.Unmarshal(raw, &a.body); err != nil {
		return a, fmt.Errorf("%s %s: body %q is not JSON: %v", method, path, raw, err)
	}
	return a, nil
}

func call(t *testing.T, base, method, path, user, key, body string) answer {
	t.Helper()
	a, err := try(base, method, path, user, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
