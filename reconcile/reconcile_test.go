package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/internal/crashpoint"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers"
	"github.com/payonce/payonce/providers/fakes"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
	"github.com/payonce/payonce/providers/stripe/stripetest"
	"github.com/payonce/payonce/reconcile"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		crashChild()
		return
	}
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// world is a checkout service (payments client with the three providers'
// fakes, webhooks received) on its own schema.
type world struct {
	url    string
	env    map[string]string
	pool   *pgxpool.Pool
	fakes  *fakes.Set
	client *payments.Client
	drop   *atomic.Bool // webhooks answered 200 and dropped: "the webhook that never came"
}

func newWorld(t *testing.T) world {
	t.Helper()
	var h atomic.Pointer[http.Handler]
	drop := new(atomic.Bool)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if drop.Load() {
			return
		}
		(*h.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	fk := fakes.Start(fakes.Options{Stripe: true, Adyen: true, PayPal: true, WebhookBase: srv.URL})
	t.Cleanup(fk.Close)
	env := fk.Env()
	env["DATABASE_URL"] = pgtest.MigratedURL(t)
	svc := openService(t, env)
	handler := svc.Handler()
	h.Store(&handler)
	return world{url: env["DATABASE_URL"], env: env, pool: pgtest.PoolURL(t, env["DATABASE_URL"]), fakes: fk, client: svc.Client(), drop: drop}
}

// service is what the tests need of a payments service: a client wired
// from the fakes' environment and the providers' webhook endpoints.
type service struct {
	pool    *pgxpool.Pool
	client  *payments.Client
	handler http.Handler
}

func (s *service) Client() *payments.Client { return s.client }
func (s *service) Handler() http.Handler    { return s.handler }
func (s *service) Close()                   { s.pool.Close() }

// newService wires a payments client as a service would (providers.FromEnv,
// providers.Client), with a lease of lock and webhooks at /webhooks/<name>.
func newService(env map[string]string, lock time.Duration, hc *http.Client) (*service, error) {
	cfg, err := providers.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		return nil, err
	}
	cfg.LockTimeout, cfg.HTTPClient = lock, hc
	pool, err := pgxpool.New(context.Background(), env["DATABASE_URL"])
	if err != nil {
		return nil, err
	}
	client, err := providers.NewClient(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	for _, name := range cfg.ProviderNames() {
		if _, ok := client.Provider(name).(provider.WebhookVerifier); !ok {
			continue
		}
		h, err := client.WebhookHandler(name, nil)
		if err != nil {
			pool.Close()
			return nil, err
		}
		mux.Handle("POST /webhooks/"+name, h)
	}
	return &service{pool: pool, client: client, handler: mux}, nil
}

func openService(t testing.TB, env map[string]string) *service {
	svc, err := newService(env, 2*time.Second, &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc
}

func (w world) reconciler(t *testing.T, cfg *reconcile.Config) *reconcile.Reconciler {
	t.Helper()
	c := reconcile.Config{Grace: time.Millisecond, VoidAfter: time.Millisecond, Schedule: []time.Duration{time.Millisecond}, MaxChecks: 4}
	if cfg != nil {
		c = *cfg
	}
	r, err := reconcile.New(w.pool, w.client, &c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func params(provider, key string) payments.ChargeParams {
	return payments.ChargeParams{Scope: "cus_r", Key: key, Provider: provider, Amount: money.MustParse("12.34", money.EUR),
		Recipient: "acct_r", PaymentMethod: "pm_card_visa"}
}

func composed(key string) string {
	k, _ := idempotency.ComposeKey("cus_r", "charge", key)
	return k
}

func (w world) intent(t *testing.T, key string) payments.Intent {
	t.Helper()
	in, err := w.client.Intent(context.Background(), "cus_r", key)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func (w world) entries(t *testing.T, key string) int {
	t.Helper()
	var n int
	if err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM ledger_entries WHERE key = $1`, composed(key)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// settle runs the reconciler until the intent is no longer open (or gives
// up), waiting for webhooks in between (Adyen's void is answered by one).
func (w world) settle(t *testing.T, r *reconcile.Reconciler, key string) payments.Intent {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatalf("run: %v", err)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := w.fakes.WaitDeliveries(wctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		in := w.intent(t, key)
		switch in.Status {
		case payments.IntentSucceeded, payments.IntentFailed, payments.IntentDeclined, payments.IntentNeedsReview:
			return in
		}
		time.Sleep(20 * time.Millisecond)
	}
	return w.intent(t, key)
}

// The crash matrix with the client giving up: a child process charges
// and is SIGKILLed at a point; nobody retries; the reconciler alone brings
// the intent to its true final state: one charge and one ledger entry if
// the provider charged, none and a failed intent if the request never got
// there.
const (
	envChild    = "PAYONCE_RECONCILE_CHILD"
	envPoint    = "PAYONCE_RECONCILE_POINT"
	envProvider = "PAYONCE_RECONCILE_PROVIDER"
)

func crashChild() {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				env[kv[:i]] = kv[i+1:]
				break
			}
		}
	}
	// Seconds: on a loaded machine a child whose heartbeats went
	// unconfirmed for a short lease would stop before its crash point.
	svc, err := newService(env, 2*time.Second, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	point := os.Getenv(envPoint)
	crashpoint.Set(func(p, _ string) {
		if p == point {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	})
	_, err = svc.Client().Charge(context.Background(), params(os.Getenv(envProvider), "order-"+point))
	fmt.Fprintf(os.Stderr, "the child survived %s: %v\n", point, err)
	os.Exit(4)
}

func TestCrashMatrixResolvedByTheReconcilerAlone(t *testing.T) {
	t.Parallel()
	for _, provName := range []string{"stripe", "adyen", "paypal"} {
		for _, point := range []string{"after_claim", "after_intent", "after_provider", "after_commit"} {
			t.Run(provName+"/"+point, func(t *testing.T) {
				t.Parallel()
				w := newWorld(t)
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), envChild+"=1", envPoint+"="+point, envProvider+"="+provName)
				for k, v := range w.env {
					cmd.Env = append(cmd.Env, k+"="+v)
				}
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() {
					t.Fatalf("the child was not killed at %s: %v\n%s", point, err, out)
				}
				// Let the provider's own webhooks land first (they may
				// settle the intent; the reconciler must agree with them).
				wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := w.fakes.WaitDeliveries(wctx); err != nil {
					t.Fatal(err)
				}
				waitLeasesEnded(t, w.pool) // the dead child's
				r := w.reconciler(t, nil)
				key := "order-" + point
				charges := w.fakes.Charges(provName, composed(key))
				switch point {
				case "after_claim":
					// Nothing was recorded beyond the claim: no intent, no
					// charge; the stuck record is reported.
					rep, err := r.RunOnce(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					if _, err := w.client.Intent(context.Background(), "cus_r", key); !errors.Is(err, idempotency.ErrNotFound) || charges != 0 {
						t.Fatalf("after the claim: intent %v, %d charges", err, charges)
					}
					_ = rep
					return
				case "after_intent":
					if charges != 0 {
						t.Fatalf("the provider was called before the crash: %d charges", charges)
					}
				default:
					if charges != 1 {
						t.Fatalf("%d charges at the provider after the crash, want 1", charges)
					}
				}
				in := w.settle(t, r, key)
				after := w.fakes.Charges(provName, composed(key))
				switch point {
				case "after_intent":
					// Stripe and PayPal prove the absence with a consistent
					// lookup. Adyen cannot: a technical cancel by reference
					// that cancels nothing (TECHNICAL_CANCEL success=false)
					// is also what a captured payment answers, so the intent
					// goes to a human with Adyen's reason, never FAILED.
					want := payments.IntentFailed
					if provName == "adyen" {
						want = payments.IntentNeedsReview
					}
					if in.Status != want || after != 0 || w.entries(t, key) != 0 {
						t.Fatalf("a request that never reached %s: intent %s, %d charges, %d entries; want %s, 0, 0",
							provName, in.Status, after, w.entries(t, key), want)
					}
				default:
					if in.Status != payments.IntentSucceeded || after != 1 || w.entries(t, key) != 1 {
						t.Fatalf("a charge made before the crash: intent %s, %d charges, %d entries; want SUCCEEDED, 1, 1",
							in.Status, after, w.entries(t, key))
					}
				}
				// The key now answers the final state, without a new charge.
				res, err := w.client.Charge(context.Background(), params(provName, key))
				switch {
				case in.Status == payments.IntentSucceeded && (err != nil || res.ProviderID != in.ProviderID):
					t.Fatalf("a retry after the repair: %+v %v", res, err)
				case in.Status == payments.IntentFailed && !errors.Is(err, provider.ErrInvalidRequest):
					t.Fatalf("a retry after a proven void: %+v %v, want the recorded failure", res, err)
				case in.Status == payments.IntentNeedsReview && !errors.Is(err, payments.ErrUnderReview):
					t.Fatalf("a retry of an intent under review: %+v %v, want ErrUnderReview", res, err)
				}
				if got := w.fakes.Charges(provName, composed(key)); got != after {
					t.Fatalf("the retry charged: %d -> %d", after, got)
				}
			})
		}
	}
}

// Two reconcilers at once never repair an intent twice.
func TestTwoReconcilersNeverDoubleRepair(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.drop.Store(true) // no webhooks: only the reconcilers settle
	ctx := context.Background()
	const n = 12
	for i := 0; i < n; i++ {
		provider := []string{"stripe", "paypal"}[i%2]
		switch provider {
		case "stripe":
			w.fakes.Stripe.Inject(stripeReset())
		case "paypal":
			w.fakes.PayPal.Inject(paypalReset())
		}
		if _, err := w.client.Charge(ctx, params(provider, fmt.Sprintf("two-%d", i))); !payments.OutcomeUnknown(err) {
			t.Fatalf("charge %d: %v, want a lost response", i, err)
		}
	}
	a := w.reconciler(t, &reconcile.Config{Instance: "a", Grace: time.Millisecond, Batch: 5})
	b := w.reconciler(t, &reconcile.Config{Instance: "b", Grace: time.Millisecond, Batch: 5})
	var wg sync.WaitGroup
	var repaired atomic.Int64
	for _, r := range []*reconcile.Reconciler{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 4; i++ {
				rep, err := r.RunOnce(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				repaired.Add(int64(rep.Repaired))
			}
		}()
	}
	wg.Wait()
	if repaired.Load() != n {
		t.Fatalf("repaired %d intents in all, want %d (each exactly once)", repaired.Load(), n)
	}
	var rows int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM reconcile_items WHERE action = $1`, reconcile.ActionCompleted).Scan(&rows); err != nil || rows != n {
		t.Fatalf("%d repair rows (%v), want %d", rows, err, n)
	}
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("two-%d", i)
		if in := w.intent(t, key); in.Status != payments.IntentSucceeded || w.entries(t, key) != 1 {
			t.Fatalf("%s: %s with %d entries", key, in.Status, w.entries(t, key))
		}
	}
}

// A provider outage leaves items scheduled for later, never failed.
func TestProviderOutageReschedules(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.drop.Store(true)
	ctx := context.Background()
	w.fakes.Stripe.Inject(stripeReset())
	if _, err := w.client.Charge(ctx, params("stripe", "out-1")); !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v", err)
	}
	w.fakes.Stripe.Close() // the outage
	r := w.reconciler(t, &reconcile.Config{Grace: time.Millisecond, Schedule: []time.Duration{time.Hour}, MaxChecks: 1})
	for i := 0; i < 2; i++ {
		rep, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && (rep.Rescheduled != 1 || rep.NeedsReview != 0 || rep.FailedWithProof != 0 || len(rep.Items) == 0 ||
			rep.Items[0].Kind != reconcile.KindProviderUnavailable) {
			t.Fatalf("run during an outage: %+v", rep)
		}
		if i == 1 && rep.Examined != 0 {
			t.Fatalf("a rescheduled item was examined again before its time: %+v", rep)
		}
	}
	if in := w.intent(t, "out-1"); in.Status != payments.IntentUnknown {
		t.Fatalf("intent after an outage: %s, want still UNKNOWN", in.Status)
	}
}

func stripeReset() stripetest.Fault {
	return stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"}
}

func paypalReset() paypaltest.Fault {
	return paypaltest.Fault{Kind: paypaltest.ResetAfter, Method: "POST", Path: "/v2/checkout/orders"}
}

// Injected divergences of every kind appear in the report, classified.
func TestDivergencesAreClassified(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	stripe := w.client.Provider("stripe")
	direct := func(localKey, attemptKey, amount string) {
		t.Helper()
		_, err := stripe.Charge(ctx, provider.ChargeRequest{Key: localKey, ProviderKey: attemptKey,
			Amount: money.MustParse(amount, money.EUR), Recipient: "acct_r", PaymentMethod: "pm_card_visa"})
		if err != nil {
			t.Fatal(err)
		}
	}
	// A provider object carrying our metadata with no local intent.
	direct(composed("ghost"), "ghost-attempt", "5.00")
	// The provider charged another amount for this key.
	direct(composed("amount"), provider.DeriveKey(composed("amount"), "charge", 0, 255), "20.00")
	if _, err := w.client.Charge(ctx, params("stripe", "amount")); err == nil {
		t.Fatal("a charge whose provider key was used with another amount succeeded")
	}
	// Two charges at the provider for one key.
	direct(composed("dup"), "dup-a", "12.34")
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.fakes.WaitDeliveries(wctx); err != nil { // its webhook finds no intent yet
		t.Fatal(err)
	}
	w.drop.Store(true)
	w.fakes.Stripe.Inject(stripeReset())
	if _, err := w.client.Charge(ctx, params("stripe", "dup")); !payments.OutcomeUnknown(err) {
		t.Fatalf("dup: %v", err)
	}
	// Failed before the provider did anything: missing there.
	w.fakes.Stripe.Inject(stripetest.Fault{Kind: stripetest.FailBefore, Method: "POST", Path: "/v1/payment_intents"})
	if _, err := w.client.Charge(ctx, params("stripe", "missing")); !payments.OutcomeUnknown(err) {
		t.Fatalf("missing: %v", err)
	}
	// An Adyen refund whose REFUND notification never comes.
	w.drop.Store(false)
	if _, err := w.client.Charge(ctx, params("adyen", "refunded")); err != nil {
		t.Fatal(err)
	}
	if err := w.fakes.WaitDeliveries(wctx); err != nil {
		t.Fatal(err)
	}
	w.drop.Store(true)
	if out, err := w.client.Refund(ctx, payments.RefundParams{Scope: "cus_r", Key: "r1", ChargeKey: "refunded",
		Amount: money.MustParse("2.00", money.EUR)}); err != nil || out.Status != payments.IntentPending {
		t.Fatalf("adyen refund: %+v %v", out, err)
	}
	if err := w.fakes.WaitDeliveries(wctx); err != nil {
		t.Fatal(err)
	}
	w.drop.Store(false)
	// The provider contradicts a final local state.
	if _, err := w.client.Charge(ctx, payments.ChargeParams{Scope: "cus_r", Key: "declined", Provider: "stripe",
		Amount: money.MustParse("3.00", money.EUR), Recipient: "acct_r", PaymentMethod: "pm_card_chargeDeclined"}); !errors.Is(err, provider.ErrDeclined) {
		t.Fatalf("declined: %v", err)
	}
	if _, err := w.client.Operator().ApplyEvents(ctx, "stripe", []provider.WebhookEvent{{ID: "evt_contradiction", Type: "payment_intent.succeeded",
		Kind: provider.EventChargeSucceeded, Key: composed("declined"), Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	// A record stuck PROCESSING (its holder died before recording anything).
	if _, err := w.pool.Exec(ctx, `INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, locked_until, expires_at)
		VALUES ('cus_r_orders_stuck', 'cus_r', repeat('a', 64), 'PROCESSING', now() - interval '1 hour', now() + interval '1 day')`); err != nil {
		t.Fatal(err)
	}
	if err := w.fakes.WaitDeliveries(wctx); err != nil {
		t.Fatal(err)
	}

	// Succeeded locally, but the provider has no such charge, a failed one,
	// or another amount.
	if _, err := w.pool.Exec(ctx, `INSERT INTO payment_intents (idempotency_key, user_id, kind, provider, provider_key,
		provider_id, amount, currency, recipient, payment_method, status)
		VALUES ($1::text, 'cus_r', 'CHARGE', 'stripe', $1::text || '_charge_0', 'pi_never', 8.00, 'EUR', 'acct_r', 'pm_card_visa', 'SUCCEEDED')`,
		composed("ghost-success")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.client.Charge(ctx, params("stripe", "wrong-amount")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.client.Charge(ctx, payments.ChargeParams{Scope: "cus_r", Key: "failed-there", Provider: "stripe",
		Amount: money.MustParse("3.00", money.EUR), Recipient: "acct_r", PaymentMethod: "pm_card_chargeDeclined"}); !errors.Is(err, provider.ErrDeclined) {
		t.Fatalf("failed-there: %v", err)
	}
	if _, err := w.pool.Exec(ctx, `UPDATE payment_intents SET amount = 99.00 WHERE idempotency_key = $1`, composed("wrong-amount")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.pool.Exec(ctx, `UPDATE payment_intents SET status = 'SUCCEEDED' WHERE idempotency_key = $1`, composed("failed-there")); err != nil {
		t.Fatal(err)
	}

	// A refund made at the provider outside payonce; and one through
	// payonce, which matches.
	out, err := w.client.Charge(ctx, params("stripe", "refunded-outside"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stripe.Refund(ctx, provider.RefundRequest{Key: composed("refunded-outside"), ProviderKey: "dashboard-refund",
		ChargeID: out.ProviderID, Amount: money.MustParse("2.00", money.EUR)}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.client.Charge(ctx, params("stripe", "refunded-inside")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.client.Refund(ctx, payments.RefundParams{Scope: "cus_r", Key: "ri", ChargeKey: "refunded-inside",
		Amount: money.MustParse("2.00", money.EUR)}); err != nil {
		t.Fatal(err)
	}

	r := w.reconciler(t, &reconcile.Config{Grace: time.Millisecond, StuckAfter: time.Minute,
		Schedule: []time.Duration{time.Millisecond}, MaxChecks: 2})
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		rep, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range rep.Items {
			seen[string(x.Kind)+" / "+string(x.Action)+" / "+x.IntentKey] = true
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, want := range []string{
		string(reconcile.KindUnmatchedProviderObject) + " / " + string(reconcile.ActionReported) + " / ",
		string(reconcile.KindAmountDiffers) + " / " + string(reconcile.ActionNeedsReview) + " / " + composed("amount"),
		string(reconcile.KindDuplicateAtProvider) + " / " + string(reconcile.ActionNeedsReview) + " / " + composed("dup"),
		string(reconcile.KindPendingMissingAtProvider) + " / " + string(reconcile.ActionFailedWithProof) + " / " + composed("missing"),
		string(reconcile.KindRefundOutcomeMissing) + " / " + string(reconcile.ActionNeedsReview) + " / cus_r_refund_r1",
		string(reconcile.KindWebhookConflict) + " / " + string(reconcile.ActionReported) + " / " + composed("declined"),
		string(reconcile.KindStuckRecord) + " / " + string(reconcile.ActionReported) + " / cus_r_orders_stuck",
		string(reconcile.KindSucceededMissingAtProvider) + " / " + string(reconcile.ActionReported) + " / " + composed("ghost-success"),
		string(reconcile.KindAmountDiffers) + " / " + string(reconcile.ActionReported) + " / " + composed("wrong-amount"),
		string(reconcile.KindSucceededFailedAtProvider) + " / " + string(reconcile.ActionReported) + " / " + composed("failed-there"),
		string(reconcile.KindRefundTotalsDiffer) + " / " + string(reconcile.ActionReported) + " / " + composed("refunded-outside"),
	} {
		if !seen[want] {
			t.Errorf("missing from the reports: %q (all: %v)", want, seen)
		}
	}
	// Verified once: a later run reports them no more.
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range rep.Items {
		if x.Kind == reconcile.KindSucceededMissingAtProvider {
			t.Fatalf("verified twice: %+v", x)
		}
	}
	for k := range seen {
		if strings.Contains(k, composed("refunded-inside")) {
			t.Fatalf("a refund made through payonce was reported: %s", k)
		}
	}
	// The report is stored and readable later, filterable by kind.
	items, err := reconcile.Items(ctx, w.pool, reconcile.Filter{Kind: reconcile.KindDuplicateAtProvider})
	if err != nil || len(items) == 0 || items[0].Scope != "cus_r" || items[0].IntentKey != composed("dup") {
		t.Fatalf("stored items of one kind: %+v %v", items, err)
	}
	if in := w.intent(t, "dup"); in.Status != payments.IntentNeedsReview {
		t.Fatalf("dup intent: %s", in.Status)
	}
	// A retry of a key under review never calls the provider again.
	before := w.fakes.Charges("stripe", composed("dup"))
	if _, err := w.client.Charge(ctx, params("stripe", "dup")); !errors.Is(err, payments.ErrUnderReview) {
		t.Fatalf("retry under review: %v", err)
	}
	if after := w.fakes.Charges("stripe", composed("dup")); after != before {
		t.Fatalf("a retry under review charged: %d -> %d", before, after)
	}
}

// Start runs the reconciler on its cron spec until stopped.
func TestStartRunsOnSchedule(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r := w.reconciler(t, &reconcile.Config{Spec: "@every 1s", Grace: time.Millisecond})
	stop := r.Start(context.Background())
	deadline := time.Now().Add(time.Minute)
	var runs int
	for time.Now().Before(deadline) {
		if err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM reconcile_runs WHERE finished_at IS NOT NULL`).Scan(&runs); err != nil {
			t.Fatal(err)
		}
		if runs >= 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	stop() // idempotent
	if runs < 2 {
		t.Fatalf("%d scheduled runs in a minute, want at least 2", runs)
	}
	var after int
	time.Sleep(1500 * time.Millisecond)
	if err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM reconcile_runs`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after > runs+1 {
		t.Fatalf("runs went on after stop: %d -> %d", runs, after)
	}
}

func TestConfigRefusals(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for field, cfg := range map[string]reconcile.Config{
		"Grace":       {Grace: -time.Second},
		"Schedule[1]": {Schedule: []time.Duration{time.Minute, 0}},
		"MaxChecks":   {MaxChecks: -1},
		"Batch":       {Batch: -5},
		"Spec":        {Spec: "every minute"},
		"Redrive":     {Redrive: 7},
	} {
		_, err := reconcile.New(w.pool, w.client, &cfg)
		var ce *reconcile.ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: err = %v, want a ConfigError naming it", field, err)
		}
		// Validate answers as New does, without a database.
		if err := cfg.Validate(); !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: Validate: err = %v, want a ConfigError naming it", field, err)
		}
	}
	if err := (&reconcile.Config{Spec: "@every 5m"}).Validate(); err != nil {
		t.Errorf("a good config: %v", err)
	}
}

// Balance-level drift: the provider's totals over a period against the
// ledger's, per currency.
func TestBalanceDrift(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"stripe", "paypal"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			testBalanceDrift(t, provider)
		})
	}
}

func testBalanceDrift(t *testing.T, provName string) {
	w := newWorld(t)
	ctx := context.Background()
	for _, k := range []string{"b1", "b2"} {
		if _, err := w.client.Charge(ctx, params(provName, k)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.client.Refund(ctx, payments.RefundParams{Scope: "cus_r", Key: "br", ChargeKey: "b1",
		Amount: money.MustParse("2.00", money.EUR)}); err != nil {
		t.Fatal(err)
	}
	r := w.reconciler(t, &reconcile.Config{Grace: time.Millisecond, DriftLag: time.Millisecond, DriftEvery: time.Millisecond})
	drift := func() []reconcile.Item {
		t.Helper()
		time.Sleep(1100 * time.Millisecond) // the providers' times are in seconds
		rep, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []reconcile.Item
		for _, x := range rep.Items {
			if x.Kind == reconcile.KindBalanceDrift {
				out = append(out, x)
			}
		}
		return out
	}
	if got := drift(); len(got) != 0 {
		t.Fatalf("books that agree reported as drift: %+v", got)
	}
	// A refund made at the provider outside payonce.
	in := w.intent(t, "b2")
	if _, err := w.client.Provider(provName).Refund(ctx, provider.RefundRequest{Key: composed("b2"), ProviderKey: "outside",
		ChargeID: in.ProviderID, Amount: money.MustParse("1.00", money.EUR)}); err != nil {
		t.Fatal(err)
	}
	got := drift()
	if len(got) != 1 || got[0].Provider != provName || got[0].Currency != "EUR" ||
		got[0].LocalState != "ledger: charged 24.68, refunded 2.00" || got[0].ProviderState != "charged 24.68, refunded 3.00" {
		t.Fatalf("drift after a refund outside payonce: %+v", got)
	}
}

// Refund intents whose outcome was lost are looked up at the provider: a
// refund made is completed locally (one ledger entry), a refund never made
// is failed with proof and its reservation on the charge released.
func TestRefundOutcomesResolved(t *testing.T) {
	t.Parallel()
	for _, provName := range []string{"stripe", "paypal"} {
		t.Run(provName, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			w.drop.Store(true) // no notifications: the reconciler alone
			ctx := context.Background()
			if _, err := w.client.Charge(ctx, params(provName, "rc")); err != nil {
				t.Fatal(err)
			}
			refund := func(key string, amount string) error {
				_, err := w.client.Refund(ctx, payments.RefundParams{Scope: "cus_r", Key: key, ChargeKey: "rc",
					Amount: money.MustParse(amount, money.EUR)})
				return err
			}
			inject := func(after bool) {
				switch provName {
				case "stripe":
					kind := stripetest.FailBefore
					if after {
						kind = stripetest.ResetAfter
					}
					w.fakes.Stripe.Inject(stripetest.Fault{Kind: kind, Method: "POST", Path: "/v1/refunds"})
				case "paypal":
					kind := paypaltest.FailBefore
					if after {
						kind = paypaltest.ResetAfter
					}
					w.fakes.PayPal.Inject(paypaltest.Fault{Kind: kind, Method: "POST", Path: "/v2/payments/captures/*/refund"})
				}
			}
			inject(true)
			if err := refund("lost", "5.00"); !payments.OutcomeUnknown(err) {
				t.Fatalf("lost refund response: %v", err)
			}
			inject(false)
			if err := refund("never", "5.00"); !payments.OutcomeUnknown(err) && !idempotency.SafeToRetry(err) {
				t.Fatalf("refund failed before the provider: %v", err)
			}
			if err := refund("more", "2.35"); !errors.Is(err, provider.ErrRefundExceedsCharge) {
				t.Fatalf("both open refunds hold their reservation: %v", err)
			}
			r := w.reconciler(t, nil)
			if _, err := r.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			lost, err := w.client.RefundIntent(ctx, "cus_r", "lost")
			if err != nil || lost.Status != payments.IntentSucceeded || lost.ProviderID == "" {
				t.Fatalf("lost refund after the reconciler: %+v %v", lost, err)
			}
			never, err := w.client.RefundIntent(ctx, "cus_r", "never")
			if err != nil || never.Status != payments.IntentFailed {
				t.Fatalf("refund never made after the reconciler: %+v %v", never, err)
			}
			var entries int
			if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM ledger_entries WHERE step = 'refund'`).Scan(&entries); err != nil || entries != 1 {
				t.Fatalf("%d refund ledger entries (%v), want 1", entries, err)
			}
			// The failed refund's reservation is released: what is left
			// of the charge (12.34 - 5.00) can be refunded.
			if err := refund("rest", "7.34"); err != nil {
				t.Fatalf("refund of the rest: %v", err)
			}
		})
	}
}

// waitLeasesEnded waits until no record's lease is live on the database's
// clock.
func waitLeasesEnded(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var live int
		if err := pool.QueryRow(context.Background(),
			`SELECT count(*) FROM idempotency_store WHERE status = 'PROCESSING' AND locked_until > now()`).Scan(&live); err != nil {
			t.Fatal(err)
		}
		if live == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d leases still live", live)
		}
	}
}
