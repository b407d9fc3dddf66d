package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/examples/checkout/service"
	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/internal/fakes"
	"github.com/payonce/payonce/internal/localpg"
	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/providers/stripe/stripetest"
	"github.com/payonce/payonce/reconcile"
)

const demoUsage = `Usage: payonce demo [--payments N] [--customers N] [--seed N] [--no-kill] [--database-url URL]
       payonce demo core     the idempotency core alone (see: payonce demo core --help)

A checkout storm. The checkout example service (examples/checkout) runs as a
worker process on a throwaway PostgreSQL, charging through payonce's Stripe
adapter against the Stripe fake, which loses 10% of responses after
committing the charge and fails 5% of requests before. N payments by
customers are each sent 2 to 5 times by impatient clients: double clicks,
concurrent retries, clients that give up early. Midway the worker is killed
with SIGKILL and restarted. Then every payment is retried with its key until
it resolves, some are partly refunded, and the demo checks what the provider
really holds against what payonce recorded.

It prints a summary and exits 1 if any payment has more than one
PaymentIntent at the provider, a succeeded payment has none, two answers
for one key disagree, or the ledger differs from the provider's totals.

Without --database-url or DATABASE_URL it starts a throwaway PostgreSQL;
it works in its own schema, payonce_storm, dropped first.

Example:
  make demo
  payonce demo --payments 2000 --customers 100 --seed 7
`

type stormConfig struct {
	payments, customers int
	seed                uint64
	kill                bool
	dbURL               string
}

func runDemo(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "core":
			return runCoreDemo(args[1:])
		case "worker":
			return runDemoWorker()
		}
	}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, demoUsage) }
	dbURL := databaseURL(fs)
	var c stormConfig
	fs.IntVar(&c.payments, "payments", 500, "payments in the storm")
	fs.IntVar(&c.customers, "customers", 50, "customers paying concurrently")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the amounts, payment methods, retries and the provider's faults")
	noKill := fs.Bool("no-kill", false, "do not kill the worker mid-storm")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("demo: unexpected argument %q", fs.Arg(0))}
	}
	if c.payments < 1 || c.customers < 1 {
		return usageError{"--payments and --customers must be at least 1"}
	}
	c.kill, c.dbURL = !*noKill, *dbURL
	if c.dbURL == "" {
		c.dbURL = os.Getenv("DATABASE_URL")
	}
	return storm(context.Background(), c)
}

// runDemoWorker is the worker process: the checkout service, configured
// by the environment like examples/checkout.
func runDemoWorker() error {
	ctx, stop := signalContext()
	defer stop()
	cfg, err := service.ConfigFromEnv()
	if err != nil {
		return err
	}
	cfg.LockTimeout = 2 * time.Second
	// Lost responses must reach payonce: no keep-alive resends.
	cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	svc, err := service.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer svc.Close()
	l, err := net.Listen("tcp", os.Getenv("ADDR"))
	if err != nil {
		return err
	}
	// A flaky receiver: the demo refuses a share of the providers'
	// notifications with 503, as a receiver briefly unable to store them
	// would; the providers redeliver (a few times, in the fakes).
	handler := svc.Handler()
	if v := os.Getenv("PAYONCE_DEMO_LOSE_WEBHOOKS"); v != "" {
		share, err := strconv.ParseFloat(v, 64)
		if err != nil || share < 0 || share > 1 {
			return fmt.Errorf("PAYONCE_DEMO_LOSE_WEBHOOKS=%q: a share between 0 and 1", v)
		}
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 7))
		inner := handler
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/webhooks/") {
				mu.Lock()
				lose := rng.Float64() < share
				mu.Unlock()
				if lose {
					_, _ = io.Copy(io.Discard, r.Body)
					http.Error(w, "receiver unavailable (demo)", http.StatusServiceUnavailable)
					return
				}
			}
			inner.ServeHTTP(w, r)
		})
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	fmt.Printf("worker: listening on http://%s\n", l.Addr())
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// worker runs the checkout service as a child process on a fixed address.
type worker struct {
	env      []string
	addr     string
	mu       sync.Mutex
	cmd      *exec.Cmd
	restarts int
}

func (w *worker) start() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "demo", "worker")
	cmd.Env = append(os.Environ(), w.env...)
	cmd.Env = append(cmd.Env, "ADDR="+w.addr)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "worker: listening on ") {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = cmd.Wait()
			return errors.New("the worker exited before listening")
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		return errors.New("the worker did not listen within 60s")
	}
	w.mu.Lock()
	w.cmd = cmd
	w.mu.Unlock()
	return nil
}

// crash kills the worker with SIGKILL mid-flight and starts a new one.
func (w *worker) crash() error {
	w.mu.Lock()
	cmd := w.cmd
	w.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	_ = cmd.Wait()
	w.restarts++
	time.Sleep(time.Second) // down for a second: requests and webhooks meanwhile fail
	return w.start()
}

func (w *worker) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd != nil {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		_ = w.cmd.Wait()
	}
}

// payment is one customer's payment and what its clients saw.
type payment struct {
	provider string
	// abandoned: the client sends once and never retries, whatever the
	// answer (the reconciler resolves it).
	abandoned           bool
	customer, key       string
	amount, currency    string
	method              string
	sends               int
	mu                  sync.Mutex
	codes               map[int]int
	providerIDs         map[string]bool
	final               int // last final status code seen (201, 202, 402, 422), 0 if none
	status              string
	unknownSeen         bool
	refundKey, refunded string
}

func (p *payment) record(code int, body map[string]any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.codes[code]++
	switch code {
	case 201, 202, 402, 422:
		p.final = code
		if s, ok := body["status"].(string); ok {
			p.status = s
		}
		if id, ok := body["provider_id"].(string); ok && id != "" {
			p.providerIDs[id] = true
		}
	case 503:
		p.unknownSeen = true
	}
}

type stormStats struct {
	requests, connErrors, gaveUp atomic.Int64
	started, resolved            atomic.Int64
}

func storm(ctx context.Context, c stormConfig) error {
	began := time.Now()
	rng := rand.New(rand.NewPCG(c.seed, c.seed^0x5eed))
	kept := c.dbURL != "" // the user's database: the demo's schema stays for inspection
	if c.dbURL == "" {
		fmt.Println("starting a throwaway PostgreSQL ...")
		pg, err := localpg.Start(ctx, localpg.Options{Fast: true})
		if err != nil {
			return err
		}
		defer pg.Stop()
		c.dbURL = pg.URL
	}
	u, err := localpg.FreshSchema(ctx, c.dbURL, "payonce_storm")
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := l.Addr().String()
	l.Close()
	base := "http://" + addr

	// The providers: each loses 10% of responses after committing (a
	// reset once the payment exists) and fails 5% of requests before
	// doing anything; their webhooks go to the worker, retried (as the
	// providers retry them for days) long enough to outlast its restart.
	fk := fakes.Start(fakes.Options{Stripe: true, Adyen: true, PayPal: true, WebhookBase: base,
		LoseAfter: 0.10, FailBefore: 0.05, Seed: int64(c.seed), WebhookRetryFor: 20 * time.Second})
	defer fk.Close()
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	env := []string{"DATABASE_URL=" + u + sep + "pool_max_conns=24", "PAYONCE_DEMO_LOSE_WEBHOOKS=0.3"}
	for k, v := range fk.Env() {
		env = append(env, k+"="+v)
	}
	w := &worker{addr: addr, env: env}
	if err := w.start(); err != nil {
		return err
	}
	defer w.stop()

	pays := makePayments(c, rng, fk.Providers())
	fmt.Printf("storm: %d payments by %d customers through %s, to the checkout worker on %s (seed %d)\n",
		len(pays), c.customers, strings.Join(fk.Providers(), ", "), base, c.seed)

	var st stormStats
	stopBar := progress(&st, int64(len(pays)))
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer hc.CloseIdleConnections()

	// Phase 1: the storm, with the worker killed once midway.
	byCustomer := map[string][]*payment{}
	for _, p := range pays {
		byCustomer[p.customer] = append(byCustomer[p.customer], p)
	}
	killed := make(chan error, 1)
	if c.kill {
		go func() {
			for st.started.Load() < int64(len(pays))*2/5 {
				time.Sleep(10 * time.Millisecond)
			}
			killed <- w.crash()
		}()
	} else {
		killed <- nil
	}
	var wg sync.WaitGroup
	for cust, ps := range byCustomer {
		wg.Add(1)
		seed := rng.Uint64()
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(len(cust))))
			for _, p := range ps {
				st.started.Add(1)
				impatient(hc, base, p, r, &st)
			}
		}()
	}
	wg.Wait()
	if err := <-killed; err != nil {
		return fmt.Errorf("restarting the worker: %w", err)
	}

	// Phase 2: every payment is retried with its key until it resolves.
	var wg2 sync.WaitGroup
	var unresolved atomic.Int64
	for _, ps := range byCustomer {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			for _, p := range ps {
				if p.abandoned {
					continue // the reconciler's
				}
				if !resolve(hc, base, p, &st) {
					unresolved.Add(1)
				}
			}
		}()
	}
	wg2.Wait()

	// Phase 3: partial refunds of one succeeded payment in ten, each sent
	// twice at once and retried until resolved.
	refunds := 0
	for i, p := range pays {
		if p.status == "SUCCEEDED" && i%10 == 3 && !p.abandoned {
			if refund(hc, base, p) {
				refunds++
			}
		}
	}
	// Let the providers' last webhooks (Adyen's refund outcomes) land.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := fk.WaitDeliveries(wctx); err != nil {
		return err
	}
	stopBar()

	// Phase 4: the payments whose clients gave up after one send are the
	// reconciler's: it runs until none is open (the killed worker's leases
	// end after its 2s lock timeout).
	rec, err := reconcileAll(ctx, pool, fk, pays)
	if err != nil {
		return err
	}
	err = report(ctx, stormReport{pays: pays, st: &st, fakes: fk, pool: pool, w: w, unresolved: unresolved.Load(),
		refunds: refunds, rec: rec, elapsed: time.Since(began)})
	if kept {
		fmt.Printf("\n  the demo's schema stays: payonce report --database-url '%s'\n", u)
	}
	return err
}

// reconciled is what the reconciler did in the demo.
type reconciled struct {
	runs, repaired, failedWithProof, needsReview int
	review                                       []string
	open                                         int
}

func reconcileAll(ctx context.Context, pool *pgxpool.Pool, fk *fakes.Set, pays []*payment) (reconciled, error) {
	var out reconciled
	env := fk.Env()
	cfg, err := service.ConfigFrom(func(k string) string { return env[k] })
	if err != nil {
		return out, err
	}
	cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	client, err := service.NewClient(pool, cfg)
	if err != nil {
		return out, err
	}
	r, err := reconcile.New(pool, client, &reconcile.Config{Instance: "demo", Grace: time.Millisecond, VoidAfter: time.Millisecond,
		Schedule: []time.Duration{200 * time.Millisecond}, MaxChecks: 20, Batch: 1000})
	if err != nil {
		return out, err
	}
	for out.runs < 40 {
		rep, err := r.RunOnce(ctx)
		out.runs++
		if err != nil {
			return out, fmt.Errorf("reconciler run: %w", err)
		}
		out.repaired += rep.Repaired
		out.failedWithProof += rep.FailedWithProof
		out.needsReview += rep.NeedsReview
		for _, x := range rep.Items {
			if x.Action == reconcile.ActionNeedsReview {
				out.review = append(out.review, x.IntentKey+": "+x.Detail)
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = fk.WaitDeliveries(wctx) // Adyen answers a void by webhook
		cancel()
		if err != nil {
			return out, err
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM payment_intents WHERE status IN ('PENDING', 'UNKNOWN')`).Scan(&out.open); err != nil {
			return out, err
		}
		if out.open == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The abandoned payments' final states, as payonce recorded them.
	for _, p := range pays {
		if !p.abandoned {
			continue
		}
		var status string
		err := pool.QueryRow(ctx, `SELECT status FROM payment_intents WHERE idempotency_key = $1 AND user_id = $2`,
			mustCompose(p.customer, p.key), p.customer).Scan(&status)
		if err == nil {
			p.status = status
		}
	}
	return out, nil
}

func mustCompose(scope, key string) string {
	k, err := idempotency.ComposeKey(scope, "charge", key)
	if err != nil {
		panic(err)
	}
	return k
}

func makePayments(c stormConfig, rng *rand.Rand, providers []string) []*payment {
	currencies := []string{"EUR", "USD", "GBP"}
	var pays []*payment
	for i := 0; i < c.payments; i++ {
		method := stripetest.PaymentMethodVisa
		switch x := rng.IntN(100); {
		case x < 6:
			method = stripetest.PaymentMethodDeclined
		case x < 10:
			method = stripetest.PaymentMethodInsufficientFunds
		case x < 12:
			method = stripetest.PaymentMethodAuthenticationRequired
		}
		cents := 100 + rng.IntN(20000)
		pays = append(pays, &payment{
			provider: providers[i%len(providers)],
			customer: fmt.Sprintf("cus_%03d", i%c.customers),
			key:      fmt.Sprintf("order-%05d", i),
			amount:   fmt.Sprintf("%d.%02d", cents/100, cents%100),
			currency: currencies[rng.IntN(len(currencies))],
			method:   method,
			sends:    2 + rng.IntN(4),
			// One payment in ten: a single send, never retried.
			abandoned: i%10 == 7,
			codes:     map[int]int{}, providerIDs: map[string]bool{},
		})
	}
	return pays
}

func (p *payment) body() string {
	return fmt.Sprintf(`{"amount": %q, "currency": %q, "recipient": "acct_shop", "payment_method": %q, "provider": %q}`,
		p.amount, p.currency, p.method, p.provider)
}

// send posts path once; timeout 0 means a patient client.
func send(hc *http.Client, url, user, key, body string, timeout time.Duration) (int, map[string]any, error) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+user)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, m, nil
}

// impatient sends a payment 2 to 5 times: a double click (two at once),
// then retries fired without waiting for the earlier ones, some by clients
// that give up after a few milliseconds.
func impatient(hc *http.Client, base string, p *payment, r *rand.Rand, st *stormStats) {
	var wg sync.WaitGroup
	sends := p.sends
	if p.abandoned {
		sends = 1
	}
	for i := 0; i < sends; i++ {
		timeout := time.Duration(0)
		if r.IntN(4) == 0 {
			timeout = time.Duration(5+r.IntN(60)) * time.Millisecond
		}
		delay := time.Duration(0)
		if i >= 2 {
			delay = time.Duration(r.IntN(40)) * time.Millisecond
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(delay)
			st.requests.Add(1)
			code, body, err := send(hc, base+"/charges", p.customer, p.key, p.body(), timeout)
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				st.gaveUp.Add(1)
			case err != nil:
				st.connErrors.Add(1)
			default:
				p.record(code, body)
			}
		}()
		if i == 0 {
			continue // the double click: the second send leaves at once
		}
		time.Sleep(time.Duration(r.IntN(15)) * time.Millisecond)
	}
	wg.Wait()
}

// resolve retries a payment with its key until a final answer.
func resolve(hc *http.Client, base string, p *payment, st *stormStats) bool {
	deadline := time.Now().Add(90 * time.Second)
	for backoff := 20 * time.Millisecond; time.Now().Before(deadline); backoff = min(backoff*2, 500*time.Millisecond) {
		st.requests.Add(1)
		code, body, err := send(hc, base+"/charges", p.customer, p.key, p.body(), 0)
		if err != nil {
			st.connErrors.Add(1)
		} else {
			p.record(code, body)
			if code == 201 || code == 202 || code == 402 || code == 422 {
				st.resolved.Add(1)
				return true
			}
		}
		time.Sleep(backoff)
	}
	return false
}

// refund refunds about half of a payment, two sends at once, retried
// until final.
func refund(hc *http.Client, base string, p *payment) bool {
	m, err := money.Parse(p.amount, money.Currency(p.currency))
	if err != nil {
		return false
	}
	minor := m.Minor()
	half, err := money.FromMinor(max(minor/2, 1), m.Currency())
	if err != nil {
		return false
	}
	p.refundKey = "refund-" + p.key
	body := fmt.Sprintf(`{"charge_key": %q, "amount": %q}`, p.key, half.AmountString())
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _ = send(hc, base+"/refunds", p.customer, p.refundKey, body, 0)
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		code, _, err := send(hc, base+"/refunds", p.customer, p.refundKey, body, 0)
		if err == nil && (code == 201 || code == 202) { // 202: Adyen settles it by webhook
			p.refunded = half.AmountString()
			return true
		}
		if err == nil && code != 503 && code != 409 {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// progress draws a progress bar while stdout is a terminal; otherwise it
// prints nothing until the summary.
func progress(st *stormStats, total int64) (stop func()) {
	fi, err := os.Stdout.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	draw := func() {
		n := st.started.Load() + st.resolved.Load()
		const width = 30
		filled := int(n * width / (2 * total))
		fmt.Printf("\r  [%s%s] %3d%%  requests %d", strings.Repeat("#", filled), strings.Repeat("-", width-filled),
			n*100/(2*total), st.requests.Load())
	}
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				draw()
				fmt.Println()
				return
			case <-t.C:
				draw()
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
	elapsed    time.Duration
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
		key, err := idempotency.ComposeKey(p.customer, "charge", p.key)
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
	row("reconciler runs", r.rec.runs)
	row("  intents repaired (completed from provider proof)", r.rec.repaired)
	row("  intents failed with proof (nothing charged)", r.rec.failedWithProof)
	row("  intents needing review", r.rec.needsReview)
	row("  intents still open", r.rec.open)
	tw.Flush()
	for _, why := range r.rec.review {
		fmt.Println("  REVIEW:", why)
	}
	if r.rec.open > 0 {
		problems = append(problems, fmt.Sprintf("%d intents still open after the reconciler", r.rec.open))
	}

	// The books: payonce's ledger against each provider's totals, per
	// currency, and every currency's postings summing to zero.
	fmt.Println("\n  ledger vs provider")
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  provider\tcurrency\tledger cash\tprovider net\t")
	l, err := ledger.New(r.pool, nil)
	if err != nil {
		return err
	}
	books := 0
	for _, name := range r.fakes.Providers() {
		net, err := r.fakes.NetAmounts(name)
		if err != nil {
			return err
		}
		var currencies []string
		for c := range net {
			currencies = append(currencies, c)
		}
		sort.Strings(currencies)
		for _, code := range currencies {
			cur, err := money.ParseCurrency(code)
			if err != nil {
				return err
			}
			bal, err := l.Balance(ctx, ledger.ProviderCash(name), cur)
			if errors.Is(err, ledger.ErrUnknownAccount) {
				bal, _ = money.FromMinor(0, cur)
			} else if err != nil {
				return err
			}
			held := net[code]
			mark := "ok"
			if !bal.Equal(held) {
				mark = "DIFFERS"
				books++
				problems = append(problems, fmt.Sprintf("%s %s: ledger %s, provider %s", name, code, bal.AmountString(), held.AmountString()))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", name, code, bal.AmountString(), held.AmountString(), mark)
		}
	}
	tw.Flush()
	rows, err := r.pool.Query(ctx, `SELECT currency, sum(amount)::text FROM ledger_postings GROUP BY currency HAVING sum(amount) <> 0`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var code, sum string
		if err := rows.Scan(&code, &sum); err != nil {
			return err
		}
		books++
		problems = append(problems, fmt.Sprintf("ledger %s: postings sum to %s, not 0", code, sum))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	fmt.Printf("\n  wall time %s\n", r.elapsed.Round(time.Millisecond))

	if len(problems) > 0 || r.unresolved > 0 {
		for _, p := range problems {
			fmt.Println("  PROBLEM:", p)
		}
		return fmt.Errorf("demo failed: %d duplicate(s), %d succeeded without a charge, %d inconsistent answer(s), %d book problem(s), %d unresolved",
			dups, missing, inconsistent, books, r.unresolved)
	}
	fmt.Println("  zero duplicates; the books balance and match every provider")
	return nil
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
