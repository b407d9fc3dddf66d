package payments_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/fakes"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// The fault matrices: a child process (this test binary, re-executed)
// charges and is killed with SIGKILL at each point of the flow, and
// responses are lost or failed after the provider acted; the parent then
// retries with the same key. Whatever happens, the end state is one charge
// at the provider, one ledger entry with two postings, a SUCCEEDED intent
// and the same answer to every later retry. Stripe's first (its lost
// responses are in client_test.go), then Adyen's and PayPal's, then the
// refusals of a resumed attempt, for the three.

const (
	envCrashPoint  = "PAYONCE_CRASH_POINT"
	envCrashDB     = "PAYONCE_CRASH_DB"
	envCrashStripe = "PAYONCE_CRASH_STRIPE"
)

// crashLockTimeout is seconds, not a fraction of one: on a loaded machine a
// child whose heartbeats went unconfirmed for a short lease would stop
// before its crash point.
const crashLockTimeout = 2 * time.Second

var crashPoints = []string{"after_claim", "after_intent", "after_provider", "after_commit"}

func crashClient(t testing.TB, pool *pgxpool.Pool, stripeURL string) *payments.Client {
	t.Helper()
	store, l := openStoreLedger(t, pool)
	prov, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_crash", BaseURL: stripeURL, HTTPClient: noKeepAliveClient(nil)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := payments.New(pool, []provider.Provider{prov}, &payments.Config{Store: store, Ledger: l, LockTimeout: crashLockTimeout})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCrashMatrix(t *testing.T) {
	t.Parallel()
	for _, point := range crashPoints {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			url := pgtest.MigratedURL(t)
			pool := pgtest.PoolURL(t, url)
			fake := stripetest.NewServer(nil)
			t.Cleanup(fake.Close)
			c := crashClient(t, pool, fake.URL())
			p := params(t, "order-"+point, "31.40", stripetest.PaymentMethodVisa)

			runCrashChild(t, "TestCrashChild", point, envCrashPoint+"="+point, envCrashDB+"="+url, envCrashStripe+"="+fake.URL())

			// Retry as an impatient client would, until resolved.
			first := retryUntilResolved(t, c, p)
			checkResolvedAfterCrash(t, c, p, point, first)
			ctx := context.Background()
			key, _ := idempotency.ComposeKey(p.Scope, "charge", p.Key)
			if n := fake.CountsByMetadata(paystripe.MetadataKey, key).PaymentIntents; n != 1 {
				t.Fatalf("crash %s: %d PaymentIntents at the provider, want 1", point, n)
			}
			if e, ps := pvEntries(t, pool, key); e != 1 || ps != 2 {
				t.Fatalf("crash %s: %d ledger entries with %d postings, want 1 with 2", point, e, ps)
			}
			in, err := c.Intent(ctx, p.Scope, p.Key)
			if err != nil || in.Status != payments.IntentSucceeded || in.ProviderID != first.ProviderID {
				t.Fatalf("intent after a crash %s: %+v %v", point, in, err)
			}
			cash := fake.Totals()["eur"]
			if got := fmt.Sprintf("%d", cash.Net); got != "3140" {
				t.Fatalf("crash %s: provider net %s minor units, want 3140", point, got)
			}
		})
	}
}

// TestCrashChild is the child of TestCrashMatrix: it charges and kills
// itself at the point named in its environment.
func TestCrashChild(t *testing.T) {
	point := os.Getenv(envCrashPoint)
	if point == "" {
		t.Skip("runs only as the child process of TestCrashMatrix")
	}
	pool, err := pgxpool.New(context.Background(), os.Getenv(envCrashDB))
	if err != nil {
		t.Fatal(err)
	}
	c := crashClient(t, pool, os.Getenv(envCrashStripe))
	h, ok := crashHooksAt(point, func(context.Context, string) { die() })
	if !ok {
		t.Fatalf("unknown crash point %q", point)
	}
	payments.SetCrashHooks(c, h)
	out, err := c.Charge(context.Background(), params(t, "order-"+point, "31.40", stripetest.PaymentMethodVisa))
	t.Fatalf("the child survived its crash point %s: %+v %v", point, out, err)
}

// crashHooksAt is the hooks that call kill at the payments crash point
// named point ("after_claim", "after_intent", "after_provider",
// "after_commit"); ok is false for a point the hooks do not reach.
func crashHooksAt(point string, kill func(context.Context, string)) (h payments.CrashHooks, ok bool) {
	switch point {
	case "after_claim":
		h.AfterClaim = kill
	case "after_intent":
		h.AfterIntent = kill
	case "after_provider":
		h.AfterProvider = kill
	case "after_commit":
		h.AfterCommit = kill
	default:
		return h, false
	}
	return h, true
}

// die kills the process at once, as a crash would.
func die() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }

// runCrashChild re-executes the test binary to run only the test named
// child, with env added to its environment, and fails unless the child
// died by SIGKILL (at its crash point).
func runCrashChild(t testing.TB, child, point string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed at %s: %v\n%s", point, err, out)
	}
}

// retryUntilResolved retries a charge as an impatient client would, until
// it has an outcome.
func retryUntilResolved(t testing.TB, c *payments.Client, p payments.ChargeParams) payments.Outcome {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := c.Charge(context.Background(), p)
		if err == nil {
			return out
		}
		if !errors.Is(err, idempotency.ErrInProgress) && !idempotency.SafeToRetry(err) {
			t.Fatalf("retry: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("unresolved after 2 minutes: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkResolvedAfterCrash asserts that the outcome found after a crash at
// point succeeded, and that 3 later retries replay it.
func checkResolvedAfterCrash(t testing.TB, c *payments.Client, p payments.ChargeParams, point string, first payments.Outcome) {
	t.Helper()
	if first.Status != payments.IntentSucceeded || first.ProviderID == "" {
		t.Fatalf("outcome after a crash %s: %+v", point, first)
	}
	for i := 0; i < 3; i++ {
		again, err := c.Charge(context.Background(), p)
		if err != nil || !again.Replayed || again.ProviderID != first.ProviderID || again.Status != first.Status {
			t.Fatalf("later retry %d: %+v %v, want a replay of %+v", i, again, err, first)
		}
	}
}

// Adyen and PayPal: their crash matrix, lost responses and lost refund
// responses, on their fakes.

const (
	envPCrashPoint    = "PAYONCE_PCRASH_POINT"
	envPCrashProvider = "PAYONCE_PCRASH_PROVIDER"
	envPCrashDB       = "PAYONCE_PCRASH_DB"
	envPCrashURL      = "PAYONCE_PCRASH_URL"
)

// forAdyenAndPayPal runs test for "adyen" and for "paypal", each in a
// parallel subtest named after the provider.
func forAdyenAndPayPal(t *testing.T, test func(t *testing.T, provider string)) {
	for _, provider := range []string{"adyen", "paypal"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			test(t, provider)
		})
	}
}

// pvProvider is the adapter of name ("adyen" or "paypal") on the fake at
// url, with the credentials providers/fakes uses.
func pvProvider(t testing.TB, name, url string, hc *http.Client) provider.Provider {
	t.Helper()
	var (
		p   provider.Provider
		err error
	)
	switch name {
	case "adyen":
		p, err = adyen.New(&adyen.Config{APIKey: fakes.AdyenAPIKey, MerchantAccount: fakes.AdyenMerchantAccount,
			BaseURL: url, HTTPClient: hc, ReturnURL: "https://shop.example/return", HMACKeys: []string{fakes.AdyenHMACKey}})
	case "paypal":
		p, err = paypal.New(&paypal.Config{ClientID: fakes.PayPalClientID, Secret: fakes.PayPalSecret,
			BaseURL: url, HTTPClient: hc, WebhookID: fakes.PayPalWebhookID})
	default:
		t.Fatalf("unknown provider %q", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// pvFakes starts name's fake (no webhook delivery unless webhookURL is
// set), closed when the test ends.
func pvFakes(t testing.TB, name, webhookURL string, dup int) *fakes.Set {
	t.Helper()
	s := &fakes.Set{}
	switch name {
	case "adyen":
		s.Adyen = adyentest.NewServer(&adyentest.Config{APIKey: fakes.AdyenAPIKey, MerchantAccount: fakes.AdyenMerchantAccount,
			WebhookURL: webhookURL, DuplicateWebhooks: dup})
	case "paypal":
		s.PayPal = paypaltest.NewServer(&paypaltest.Config{WebhookURL: webhookURL, DuplicateWebhooks: dup})
	default:
		t.Fatalf("unknown provider %q", name)
	}
	t.Cleanup(s.Close)
	return s
}

func pvURL(s *fakes.Set) string {
	if s.Adyen != nil {
		return s.Adyen.URL()
	}
	return s.PayPal.URL()
}

func pvClient(t testing.TB, pool *pgxpool.Pool, prov provider.Provider, lock time.Duration) (*payments.Client, *ledger.Ledger) {
	t.Helper()
	return pvClientLogging(t, pool, prov, lock, nil)
}

// syncBuffer is a log's output, written by any goroutine and read by the
// test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// pvClientLogging is pvClient with log as Config.Logger.
func pvClientLogging(t testing.TB, pool *pgxpool.Pool, prov provider.Provider, lock time.Duration, log *slog.Logger) (*payments.Client, *ledger.Ledger) {
	t.Helper()
	store, l := openStoreLedger(t, pool)
	c, err := payments.New(pool, []provider.Provider{prov}, &payments.Config{Store: store, Ledger: l, LockTimeout: lock, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return c, l
}

func pvParams(t testing.TB, provider, key, amount string) payments.ChargeParams {
	m, err := money.Parse(amount, money.EUR)
	if err != nil {
		t.Fatal(err)
	}
	return payments.ChargeParams{Scope: "cus_1", Key: key, Provider: provider, Amount: m,
		Recipient: "acct_shop", PaymentMethod: adyentest.PaymentMethodVisa, Description: "order"}
}

func pvEUR(t testing.TB, s string) money.Money {
	t.Helper()
	m, err := money.Parse(s, money.EUR)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func composed(t testing.TB, action, key string) string {
	t.Helper()
	k, err := idempotency.ComposeKey("cus_1", action, key)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// pvEntries counts the ledger entries of a composed key and their postings.
func pvEntries(t testing.TB, pool *pgxpool.Pool, key string) (entries, postings int) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT count(DISTINCT e.id), count(p.*) FROM ledger_entries e
		LEFT JOIN ledger_postings p ON p.entry_id = e.id WHERE e.key = $1`, key).Scan(&entries, &postings); err != nil {
		t.Fatal(err)
	}
	return entries, postings
}

// checkRefundPosted fails unless the refund of key was posted once: one
// ledger entry with two postings.
func checkRefundPosted(t testing.TB, pool *pgxpool.Pool, key string) {
	t.Helper()
	if e, p := pvEntries(t, pool, composed(t, "refund", key)); e != 1 || p != 2 {
		t.Fatalf("refund %s: %d ledger entries with %d postings, want 1 with 2", key, e, p)
	}
}

// pvOrders counts PayPal orders for a charge key (attempt 0's custom_id).
func pvOrders(s *fakes.Set, key string) int {
	return s.PayPal.CountsByCustomID(provider.DeriveKey(key, "charge", 0, paypal.MaxProviderKeyLen)).Orders
}

// pvCheckOneCharge asserts the end state of a charge of amount (EUR) for
// the client key: one charge at the fake (and one PayPal order), one
// ledger entry with two postings, a SUCCEEDED intent naming providerID,
// and the fake's net in EUR.
func pvCheckOneCharge(t testing.TB, pool *pgxpool.Pool, c *payments.Client, s *fakes.Set, provider, key, providerID string, net int64) {
	t.Helper()
	k := composed(t, "charge", key)
	if n := s.Charges(provider, k); n != 1 {
		t.Errorf("%s: %d charges at the provider, want 1", provider, n)
	}
	if provider == "paypal" {
		if n := pvOrders(s, k); n != 1 {
			t.Errorf("paypal: %d orders, want 1", n)
		}
		if n := s.PayPal.MismatchedReplays(); n != 0 {
			t.Errorf("paypal: %d request ids replayed with other parameters", n)
		}
	}
	if e, p := pvEntries(t, pool, k); e != 1 || p != 2 {
		t.Errorf("%s: %d ledger entries with %d postings, want 1 with 2", provider, e, p)
	}
	in, err := c.Intent(context.Background(), "cus_1", key)
	if err != nil || in.Status != payments.IntentSucceeded || in.ProviderID != providerID {
		t.Errorf("%s: intent %+v %v, want SUCCEEDED naming %q", provider, in, err, providerID)
	}
	if got := s.Net(provider)["EUR"]; got != net {
		t.Errorf("%s: provider net %d minor units, want %d", provider, got, net)
	}
}

// pvCrashPoints are the points the child dies at, per provider. PayPal
// adds a point the payments hooks cannot reach, taken in the child's HTTP
// transport: after_create (the create with a payment source captured at
// PayPal, the order id is not recorded: the retry must replay the create,
// not make and charge a second order). PayPal's create is single-step, so
// a vaulted card's charge sends no capture to crash before.
var pvCrashPoints = map[string][]string{
	"adyen":  {"after_claim", "after_intent", "after_provider", "after_commit"},
	"paypal": {"after_claim", "after_intent", "after_create", "after_provider", "after_commit"},
}

func TestCrashMatrixAdyenPayPal(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"adyen", "paypal"} {
		for _, point := range pvCrashPoints[provider] {
			t.Run(provider+"/"+point, func(t *testing.T) {
				t.Parallel()
				url := pgtest.MigratedURL(t)
				pool := pgtest.PoolURL(t, url)
				s := pvFakes(t, provider, "", 0)
				c, _ := pvClient(t, pool, pvProvider(t, provider, pvURL(s), noKeepAliveClient(nil)), crashLockTimeout)
				p := pvParams(t, provider, "order-"+point, "31.40")

				runCrashChild(t, "TestCrashChildAdyenPayPal", point, envPCrashPoint+"="+point, envPCrashProvider+"="+provider,
					envPCrashDB+"="+url, envPCrashURL+"="+pvURL(s))
				k := composed(t, "charge", p.Key)
				if provider == "paypal" && point == "after_create" {
					// The crash left an order, captured by its create.
					if o, n := pvOrders(s, k), s.Charges(provider, k); o != 1 || n != 1 {
						t.Fatalf("after the crash %s: %d orders, %d captures; want 1 and 1", point, o, n)
					}
				}

				first := retryUntilResolved(t, c, p)
				checkResolvedAfterCrash(t, c, p, point, first)
				pvCheckOneCharge(t, pool, c, s, provider, p.Key, first.ProviderID, 3140)
			})
		}
	}
}

// killTransport kills the process after PayPal's create answered.
type killTransport struct {
	base  http.RoundTripper
	point string
}

func (k killTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := k.base.RoundTrip(r)
	if k.point == "after_create" && err == nil && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v2/checkout/orders") {
		die()
	}
	return resp, err
}

// TestCrashChildAdyenPayPal is the child of TestCrashMatrixAdyenPayPal: it
// charges and kills itself at the point named in its environment.
func TestCrashChildAdyenPayPal(t *testing.T) {
	point := os.Getenv(envPCrashPoint)
	if point == "" {
		t.Skip("runs only as the child process of TestCrashMatrixAdyenPayPal")
	}
	provider := os.Getenv(envPCrashProvider)
	pool, err := pgxpool.New(context.Background(), os.Getenv(envPCrashDB))
	if err != nil {
		t.Fatal(err)
	}
	rt := killTransport{base: &http.Transport{DisableKeepAlives: true}, point: point}
	c, _ := pvClient(t, pool, pvProvider(t, provider, os.Getenv(envPCrashURL), noKeepAliveClient(rt)), crashLockTimeout)
	h, ok := crashHooksAt(point, func(context.Context, string) { die() })
	if !ok && point != "after_create" { // after_create: in the transport
		t.Fatalf("unknown crash point %q", point)
	}
	payments.SetCrashHooks(c, h)
	out, err := c.Charge(context.Background(), pvParams(t, provider, "order-"+point, "31.40"))
	t.Fatalf("the child survived its crash point %s: %+v %v", point, out, err)
}

// A response lost (or failed) after the provider acted leaves the intent
// UNKNOWN; a retry with the same key resolves it with the same references:
// one charge, one ledger entry.
func TestLostResponsesAdyenPayPal(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, provider string
		adyen          adyentest.Fault
		paypal         paypaltest.Fault
		// recorded: the order id is known locally after the first call.
		recorded bool
	}{
		{name: "adyen/reset_after_payment", provider: "adyen", adyen: adyentest.Fault{Kind: adyentest.ResetAfter, Path: "/payments"}},
		{name: "adyen/transient_500_before", provider: "adyen", adyen: adyentest.Fault{Kind: adyentest.FailBefore, Path: "/payments"}},
		// PayPal's create with a payment source captures at once: its lost
		// answer is the charge's (the order id is lost with it).
		{name: "paypal/reset_after_create", provider: "paypal",
			paypal: paypaltest.Fault{Kind: paypaltest.ResetAfter, Method: "POST", Path: "/v2/checkout/orders"}},
		{name: "paypal/500_after_create", provider: "paypal",
			paypal: paypaltest.Fault{Kind: paypaltest.FailAfter, Method: "POST", Path: "/v2/checkout/orders"}},
		{name: "paypal/transient_500_before_create", provider: "paypal",
			paypal: paypaltest.Fault{Kind: paypaltest.FailBefore, Method: "POST", Path: "/v2/checkout/orders"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			s := pvFakes(t, tc.provider, "", 0)
			c, _ := pvClient(t, pool, pvProvider(t, tc.provider, pvURL(s), noKeepAliveClient(nil)), 2*time.Second)
			ctx := context.Background()
			if s.Adyen != nil {
				s.Adyen.Inject(tc.adyen)
			} else {
				s.PayPal.Inject(tc.paypal)
			}
			p := pvParams(t, tc.provider, "lost", "12.34")
			_, err := c.Charge(ctx, p)
			if !idempotency.SafeToRetry(err) {
				t.Fatalf("first call: %v, want an error safe to retry", err)
			}
			in, ierr := c.Intent(ctx, "cus_1", "lost")
			if ierr != nil || in.Status != payments.IntentUnknown {
				t.Fatalf("intent after the lost response: %+v %v, want UNKNOWN", in, ierr)
			}
			if tc.recorded && in.ProviderID == "" {
				t.Fatalf("the order id was not recorded before the capture: %+v", in)
			}
			out, err := c.Charge(ctx, p)
			if err != nil || out.Status != payments.IntentSucceeded || out.ProviderID == "" || out.Replayed {
				t.Fatalf("retry: %+v %v", out, err)
			}
			if tc.recorded && out.ProviderID != in.ProviderID {
				t.Fatalf("retry answered %s, the recorded order is %s", out.ProviderID, in.ProviderID)
			}
			again, err := c.Charge(ctx, p)
			if err != nil || !again.Replayed || again.ProviderID != out.ProviderID {
				t.Fatalf("replay: %+v %v", again, err)
			}
			pvCheckOneCharge(t, pool, c, s, tc.provider, "lost", out.ProviderID, 1234)
		})
	}
}

// A refund's lost response: the retry reaches the provider with the same
// references and makes no second refund.
func TestLostRefundResponseAdyenPayPal(t *testing.T) {
	t.Parallel()
	forAdyenAndPayPal(t, func(t *testing.T, provName string) {
		pool := pgtest.Pool(t)
		s := pvFakes(t, provName, "", 0)
		c, _ := pvClient(t, pool, pvProvider(t, provName, pvURL(s), noKeepAliveClient(nil)), 2*time.Second)
		ctx := context.Background()
		if _, err := c.Charge(ctx, pvParams(t, provName, "c1", "10.00")); err != nil {
			t.Fatal(err)
		}
		refKey := composed(t, "refund", "r1")
		var refunds func() int
		if s.Adyen != nil {
			s.Adyen.Inject(adyentest.Fault{Kind: adyentest.ResetAfter, Path: "/payments/*/refunds"})
			ref := provider.DeriveKey(refKey, "refund", 0, adyen.MaxReferenceLen)
			refunds = func() int { return s.Adyen.Counts(ref).Refunds }
		} else {
			s.PayPal.Inject(paypaltest.Fault{Kind: paypaltest.ResetAfter, Method: "POST", Path: "/v2/payments/captures/*/refund"})
			ref := provider.DeriveKey(refKey, "refund", 0, paypal.MaxProviderKeyLen)
			refunds = func() int { return s.PayPal.CountsByCustomID(ref).Refunds }
		}
		rp := payments.RefundParams{Scope: "cus_1", Key: "r1", ChargeKey: "c1", Amount: pvEUR(t, "4.00")}
		if _, err := c.Refund(ctx, rp); !payments.OutcomeUnknown(err) {
			t.Fatalf("lost refund response: %v, want an unknown outcome", err)
		}
		if in, err := c.RefundIntent(ctx, "cus_1", "r1"); err != nil || in.Status != payments.IntentUnknown {
			t.Fatalf("refund intent: %+v %v, want UNKNOWN", in, err)
		}
		out, err := c.Refund(ctx, rp)
		if err != nil || out.ProviderID == "" {
			t.Fatalf("refund retry: %+v %v", out, err)
		}
		want, entries := payments.IntentSucceeded, 1
		if provName == "adyen" { // only acknowledged: the REFUND notification decides
			want, entries = payments.IntentPending, 0
		}
		if out.Status != want {
			t.Fatalf("refund retry: %+v, want %s", out, want)
		}
		if n := refunds(); n != 1 {
			t.Fatalf("%d refunds at the provider, want 1", n)
		}
		if e, _ := pvEntries(t, pool, refKey); e != entries {
			t.Fatalf("%d ledger refund entries, want %d", e, entries)
		}
		if got := s.Net(provName)["EUR"]; got != 600 {
			t.Fatalf("provider net %d, want 600", got)
		}
	})
}

// A refusal of a resumed attempt (a retry re-sending the references of an
// attempt whose answer was lost) proves nothing about that attempt: the
// first send may have charged. Whatever the provider refuses the retry
// with, the intent stays open, no record answers FAILED, and the next
// retry the provider answers normally gets the original charge. Refused
// credentials are never final, on a first attempt either.

var refusalProviders = []string{"stripe", "adyen", "paypal"}

// refuser stands between an adapter and its fake: while armed with a
// status, it answers every money-moving request itself with the
// provider's documented error body for that status (the fakes produce
// only some of these answers), as the provider's edge would before
// looking at the request. Other requests (PayPal's token, reads) pass.
type refuser struct {
	next http.RoundTripper

	mu      sync.Mutex
	status  int
	refused int
}

func (r *refuser) arm(status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status = status
}

// count is how many requests it refused.
func (r *refuser) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

func (r *refuser) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	status := r.status
	if status != 0 && movesMoney(req) {
		r.refused++
	}
	r.mu.Unlock()
	if status == 0 || !movesMoney(req) {
		return r.next.RoundTrip(req)
	}
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	body := refusalBody(req.URL.Path, status)
	return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: req, ContentLength: int64(len(body)),
		Header: http.Header{"Content-Type": {"application/json"}, "Request-Id": {"req_refused"}},
		Body:   io.NopCloser(strings.NewReader(body))}, nil
}

// movesMoney: Stripe's PaymentIntent create and refund, Adyen's payment
// and its refund, PayPal's order create (captured on creation with a
// vaulted card), capture and refund.
func movesMoney(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	p := r.URL.Path
	return p == "/v1/payment_intents" || p == "/v1/refunds" || p == "/v2/checkout/orders" ||
		strings.HasSuffix(p, "/payments") || strings.HasSuffix(p, "/refunds") ||
		strings.HasSuffix(p, "/capture") || strings.HasSuffix(p, "/refund")
}

// refusalBody is the provider's error body for status, in its documented
// shape: Stripe's {"error":{type,code,message}}
// (https://docs.stripe.com/api/errors; 409 idempotency_key_in_use,
// https://docs.stripe.com/error-codes), Adyen's {status, errorCode,
// message, errorType} (https://docs.adyen.com/development-resources/error-codes;
// 704 for a key in progress,
// https://docs.adyen.com/development-resources/api-idempotency), PayPal's
// {name, message, debug_id, details[].issue}
// (https://developer.paypal.com/api/rest/responses/).
func refusalBody(path string, status int) string {
	switch {
	case strings.HasPrefix(path, "/v1/"): // Stripe
		e := map[int][2]string{
			401: {"", "Invalid API Key provided: sk_live_****olled"},
			403: {"", "The provided key 'rk_live_****1234' does not have the required permissions for this endpoint."},
			404: {"resource_missing", "No such PaymentMethod: 'pm_card_visa'"},
			409: {"idempotency_key_in_use", "There is currently another in-progress request using this Idempotent Key."},
			429: {"rate_limit", "Too many requests hit the API too quickly."},
			400: {"parameter_invalid_empty", "You passed an empty string for 'description'."},
		}[status]
		return fmt.Sprintf(`{"error":{"type":"invalid_request_error","code":%q,"message":%q}}`, e[0], e[1])
	case strings.HasPrefix(path, "/v2/"): // PayPal
		e := map[int][3]string{
			401: {"AUTHENTICATION_FAILURE", "Authentication failed due to invalid authentication credentials or a missing Authorization header.", ""},
			403: {"NOT_AUTHORIZED", "Authorization failed due to insufficient permissions.", "PERMISSION_DENIED"},
			404: {"RESOURCE_NOT_FOUND", "The specified resource does not exist.", "INVALID_RESOURCE_ID"},
			409: {"RESOURCE_CONFLICT", "The server has detected a conflict while processing this request.", "PREVIOUS_REQUEST_IN_PROGRESS"},
			429: {"RATE_LIMIT_REACHED", "Too many requests. Blocked due to rate limiting.", ""},
			400: {"INVALID_REQUEST", "Request is not well-formed, syntactically incorrect, or violates schema.", "MISSING_REQUIRED_PARAMETER"},
		}[status]
		details := ""
		if e[2] != "" {
			details = fmt.Sprintf(`,"details":[{"issue":%q}]`, e[2])
		}
		return fmt.Sprintf(`{"name":%q,"message":%q,"debug_id":"f00refused"%s}`, e[0], e[1], details)
	default: // Adyen
		e := map[int][3]string{
			401: {"000", "HTTP Status Response - Unauthorized", "security"},
			403: {"010", "Not allowed", "security"},
			404: {"000", "HTTP Status Response - Not Found", "validation"},
			409: {"704", "request already processed or in progress", "validation"},
			429: {"429", "Too many requests", "validation"},
			400: {"702", "Structure of the request is invalid", "validation"},
		}[status]
		return fmt.Sprintf(`{"status":%d,"errorCode":%q,"message":%q,"errorType":%q}`, status, e[0], e[1], e[2])
	}
}

// refusalRig is one provider's fake, an adapter on it behind a refuser,
// and a payments client.
type refusalRig struct {
	provider string
	pool     *pgxpool.Pool
	fakes    *fakes.Set
	gate     *refuser
	client   *payments.Client
}

func newRefusalRig(t *testing.T, provider string) refusalRig {
	t.Helper()
	pool := pgtest.Pool(t)
	var s *fakes.Set
	if provider == "stripe" {
		s = &fakes.Set{Stripe: stripetest.NewServer(nil)}
		t.Cleanup(s.Close)
	} else {
		s = pvFakes(t, provider, "", 0)
	}
	gate := &refuser{next: &http.Transport{DisableKeepAlives: true}}
	c, _ := pvClient(t, pool, refusalProvider(t, provider, s, noKeepAliveClient(gate), ""), 2*time.Second)
	return refusalRig{provider: provider, pool: pool, fakes: s, gate: gate, client: c}
}

// forRefusals runs test for each provider of refusalProviders and each
// of statuses, in a parallel subtest named provider/status, on a new rig.
func forRefusals(t *testing.T, statuses []int, test func(t *testing.T, r refusalRig, provName string, status int)) {
	for _, provName := range refusalProviders {
		for _, status := range statuses {
			t.Run(fmt.Sprintf("%s/%d", provName, status), func(t *testing.T) {
				t.Parallel()
				test(t, newRefusalRig(t, provName), provName, status)
			})
		}
	}
}

// refusalProvider is provider's adapter on its fake in s, with the fake's
// credentials, or with the key (secret) rolled when rolled is set.
func refusalProvider(t *testing.T, provider string, s *fakes.Set, hc *http.Client, rolled string) provider.Provider {
	t.Helper()
	switch provider {
	case "stripe":
		key := fakes.StripeSecretKey
		if rolled != "" {
			key = rolled
		}
		p, err := paystripe.New(&paystripe.Config{SecretKey: key, BaseURL: s.Stripe.URL(), HTTPClient: hc})
		if err != nil {
			t.Fatal(err)
		}
		return p
	case "adyen":
		if rolled == "" {
			return pvProvider(t, provider, s.Adyen.URL(), hc)
		}
		p, err := adyen.New(&adyen.Config{APIKey: rolled, MerchantAccount: fakes.AdyenMerchantAccount,
			BaseURL: s.Adyen.URL(), HTTPClient: hc, ReturnURL: "https://shop.example/return", HMACKeys: []string{fakes.AdyenHMACKey}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if rolled == "" {
		return pvProvider(t, provider, s.PayPal.URL(), hc)
	}
	p, err := paypal.New(&paypal.Config{ClientID: fakes.PayPalClientID, Secret: rolled, BaseURL: s.PayPal.URL(),
		HTTPClient: hc, WebhookID: fakes.PayPalWebhookID})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// loseNext has the fake execute the next charge (step
// provider.StepCharge) or refund and lose its answer.
func (r refusalRig) loseNext(step string) {
	charge := step == provider.StepCharge
	switch r.provider {
	case "stripe":
		path := "/v1/refunds"
		if charge {
			path = "/v1/payment_intents"
		}
		r.fakes.Stripe.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: path})
	case "adyen":
		path := "/payments/*/refunds"
		if charge {
			path = "/payments"
		}
		r.fakes.Adyen.Inject(adyentest.Fault{Kind: adyentest.ResetAfter, Path: path})
	default:
		path := "/v2/payments/captures/*/refund"
		if charge {
			path = "/v2/checkout/orders"
		}
		r.fakes.PayPal.Inject(paypaltest.Fault{Kind: paypaltest.ResetAfter, Method: "POST", Path: path})
	}
}

func (r refusalRig) params(t *testing.T, key string) payments.ChargeParams {
	p := pvParams(t, r.provider, key, "12.34")
	p.Metadata = map[string]string{"order": key}
	return p
}

// recordStatus is the idempotency record's status for a composed key.
func recordStatus(t *testing.T, pool *pgxpool.Pool, key string) string {
	t.Helper()
	var st string
	if err := pool.QueryRow(context.Background(), `SELECT status FROM idempotency_store WHERE idempotency_key = $1 AND user_id = 'cus_1'`,
		key).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// wantOpen fails unless err is not final for the key: the intent (charge
// or refund) is UNKNOWN and its record is not FAILED.
func wantOpen(t *testing.T, r refusalRig, action, key string, err error) {
	t.Helper()
	if err == nil || errors.Is(err, provider.ErrInvalidRequest) || errors.Is(err, provider.ErrDeclined) {
		t.Fatalf("answer %v: a refusal of this send was taken as final", err)
	}
	noFullKey(t, err, composed(t, action, key))
	read := r.client.Intent
	if action == "refund" {
		read = r.client.RefundIntent
	}
	in, ierr := read(context.Background(), "cus_1", key)
	if ierr != nil || in.Status != payments.IntentUnknown {
		t.Fatalf("%s intent after %v: %+v %v, want UNKNOWN", action, err, in, ierr)
	}
	if st := recordStatus(t, r.pool, composed(t, action, key)); st == string(idempotency.StatusFailed) {
		t.Fatalf("the %s's record is %s after %v", action, st, err)
	}
}

// wantClass checks the error a refusal of status gives: refused
// credentials for 401 and 403 (saying to check the key), an unknown
// outcome for the rest, 409 being the provider still processing the key.
func wantClass(t *testing.T, status int, err error) {
	t.Helper()
	switch status {
	case 401, 403:
		var ce *provider.CredentialsError
		if !errors.As(err, &ce) || ce.Status != status || idempotency.SafeToRetry(err) ||
			!strings.Contains(err.Error(), "refused our credentials: check the API key") {
			t.Fatalf("%d: %v, want the configuration error", status, err)
		}
	case 409:
		if !errors.Is(err, provider.ErrInProgress) || !idempotency.SafeToRetry(err) {
			t.Fatalf("409: %v, want in progress", err)
		}
	default:
		if !payments.OutcomeUnknown(err) || !idempotency.SafeToRetry(err) {
			t.Fatalf("%d: %v, want an unknown outcome", status, err)
		}
	}
}

func TestResumedChargeRefusedStaysOpen(t *testing.T) {
	t.Parallel()
	forRefusals(t, []int{401, 403, 404, 409, 429, 400}, func(t *testing.T, r refusalRig, provName string, status int) {
		ctx := context.Background()
		p := r.params(t, "lost")
		k := composed(t, "charge", p.Key)

		r.loseNext(provider.StepCharge)
		if _, err := r.client.Charge(ctx, p); !payments.OutcomeUnknown(err) {
			t.Fatalf("first attempt: %v, want its answer lost", err)
		}
		if n := r.fakes.Charges(provName, k); n != 1 {
			t.Fatalf("%d charges at the provider after the first attempt, want 1 (it charged)", n)
		}

		r.gate.arm(status)
		for i := range 2 { // twice: the first refusal recorded nothing a retry would replay
			_, err := r.client.Charge(ctx, p)
			wantOpen(t, r, "charge", p.Key, err)
			wantClass(t, status, err)
			if i == 0 && status == 404 && !errors.As(err, new(*payments.RefusedRetryError)) {
				t.Fatalf("404: %v, want a *RefusedRetryError", err)
			}
		}
		if r.gate.count() == 0 {
			t.Fatal("no retry reached the provider's edge")
		}

		r.gate.arm(0)
		out, err := r.client.Charge(ctx, p)
		if err != nil || out.Status != payments.IntentSucceeded || out.Replayed {
			t.Fatalf("retry once the provider answers: %+v %v, want the original charge", out, err)
		}
		pvCheckOneCharge(t, r.pool, r.client, r.fakes, provName, p.Key, out.ProviderID, 1234)
	})
}

// A refund's resumed attempt refused: the refund stays open with its
// reservation, and the next retry gets the original refund.
func TestResumedRefundRefusedStaysOpen(t *testing.T) {
	t.Parallel()
	forRefusals(t, []int{403, 404, 400}, func(t *testing.T, r refusalRig, provName string, status int) {
		ctx := context.Background()
		if _, err := r.client.Charge(ctx, r.params(t, "c1")); err != nil {
			t.Fatal(err)
		}
		rp := payments.RefundParams{Scope: "cus_1", Key: "r1", ChargeKey: "c1", Amount: pvEUR(t, "4.00")}
		rk := composed(t, "refund", "r1")
		r.loseNext(provider.StepRefund)
		if _, err := r.client.Refund(ctx, rp); !payments.OutcomeUnknown(err) {
			t.Fatalf("first attempt: %v, want its answer lost", err)
		}
		if n := r.fakes.Refunds(provName, rk); n != 1 {
			t.Fatalf("%d refunds at the provider after the first attempt, want 1", n)
		}

		r.gate.arm(status)
		_, err := r.client.Refund(ctx, rp)
		wantOpen(t, r, "refund", "r1", err)
		wantClass(t, status, err)
		// The reservation holds: the rest of the charge can be
		// refunded, not more.
		over := payments.RefundParams{Scope: "cus_1", Key: "r2", ChargeKey: "c1", Amount: pvEUR(t, "8.35")}
		if _, err := r.client.Refund(ctx, over); !errors.Is(err, provider.ErrRefundExceedsCharge) {
			t.Fatalf("a refund beyond what the open one left: %v, want refund_exceeds_charge", err)
		}

		r.gate.arm(0)
		out, err := r.client.Refund(ctx, rp)
		want := payments.IntentSucceeded
		if provName == "adyen" { // acknowledged: the REFUND notification decides
			want = payments.IntentPending
		}
		if err != nil || out.Status != want || out.ProviderID == "" {
			t.Fatalf("retry once the provider answers: %+v %v, want %s", out, err, want)
		}
		if n := r.fakes.Refunds(provName, rk); n != 1 {
			t.Fatalf("%d refunds at the provider, want 1", n)
		}
	})
}

// Refused credentials on a first attempt: nothing was charged, the
// intent stays open, the error says to check the key and is logged to the
// client's Config.Logger (the key as its short hash), and once the key is
// fixed a retry with the same key charges, once. Each fake refuses the
// rolled key itself.
func TestFirstAttemptCredentialsRefused(t *testing.T) {
	t.Parallel()
	rolled := map[string]string{"stripe": "sk_live_rolled", "adyen": "AQE_rolled_key", "paypal": "rolled-secret"}
	for _, provName := range refusalProviders {
		t.Run(provName, func(t *testing.T) {
			t.Parallel()
			r := newRefusalRig(t, provName)
			ctx := context.Background()
			var logged syncBuffer
			stale, _ := pvClientLogging(t, r.pool, refusalProvider(t, provName, r.fakes, noKeepAliveClient(nil), rolled[provName]), 2*time.Second,
				slog.New(slog.NewTextHandler(&logged, nil)))
			p := r.params(t, "creds")
			k := composed(t, "charge", p.Key)

			_, err := stale.Charge(ctx, p)
			var ce *provider.CredentialsError
			if !errors.As(err, &ce) || ce.Status != http.StatusUnauthorized || errors.Is(err, provider.ErrInvalidRequest) ||
				!strings.Contains(err.Error(), "refused our credentials: check the API key") {
				t.Fatalf("a charge with a rolled key: %v, want the configuration error", err)
			}
			noFullKey(t, err, k)
			if out := logged.String(); !strings.Contains(out, "provider refused our credentials") ||
				!strings.Contains(out, idempotency.ShortHash(k)) || strings.Contains(out, p.Key) {
				t.Fatalf("Config.Logger got %q, want the refusal with the key's short hash only", out)
			}
			in, ierr := stale.Intent(ctx, "cus_1", p.Key)
			if ierr != nil || (in.Status != payments.IntentUnknown && in.Status != payments.IntentPending) {
				t.Fatalf("intent after refused credentials: %+v %v, want it open", in, ierr)
			}
			if st := recordStatus(t, r.pool, k); st == string(idempotency.StatusFailed) {
				t.Fatalf("record %s after refused credentials", st)
			}
			if n := r.fakes.Charges(provName, k); n != 0 {
				t.Fatalf("%d charges at the provider, want none", n)
			}

			out, err := r.client.Charge(ctx, p) // the key fixed
			if err != nil || out.Status != payments.IntentSucceeded || out.Replayed {
				t.Fatalf("retry with the fixed key: %+v %v", out, err)
			}
			pvCheckOneCharge(t, r.pool, r.client, r.fakes, provName, p.Key, out.ProviderID, 1234)
		})
	}
}

// What Stripe replays to a resumed attempt is the attempt's own answer,
// and final: a decline, or a refusal the first send got after it began
// executing (Idempotent-Replayed: true).
func TestResumedAttemptReplayedRefusalIsFinal(t *testing.T) {
	t.Parallel()
	r := newRefusalRig(t, "stripe")
	ctx := context.Background()

	declined := r.params(t, "declined")
	declined.PaymentMethod = stripetest.PaymentMethodDeclined
	r.loseNext(provider.StepCharge)
	if _, err := r.client.Charge(ctx, declined); !payments.OutcomeUnknown(err) {
		t.Fatalf("first attempt: %v, want its answer lost", err)
	}
	if _, err := r.client.Charge(ctx, declined); !errors.Is(err, provider.ErrDeclined) {
		t.Fatalf("retry: %v, want Stripe's replayed decline", err)
	}
	if in, err := r.client.Intent(ctx, "cus_1", "declined"); err != nil || in.Status != payments.IntentDeclined {
		t.Fatalf("intent %+v %v, want DECLINED", in, err)
	}

	// A refund the first send had refused at execution (the charge was
	// refunded in full at Stripe meanwhile): the replayed refusal settles
	// it and gives its reservation back.
	ch, err := r.client.Charge(ctx, r.params(t, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	oob := refusalProvider(t, "stripe", r.fakes, noKeepAliveClient(nil), "")
	if _, err := oob.Refund(ctx, provider.RefundRequest{Key: "dashboard", ProviderKey: "dashboard_refund", ChargeID: ch.ProviderID,
		Amount: pvEUR(t, "12.34")}); err != nil {
		t.Fatal(err)
	}
	rp := payments.RefundParams{Scope: "cus_1", Key: "r1", ChargeKey: "c1", Amount: pvEUR(t, "4.00")}
	r.loseNext(provider.StepRefund)
	if _, err := r.client.Refund(ctx, rp); !payments.OutcomeUnknown(err) {
		t.Fatalf("first refund attempt: %v, want its answer lost", err)
	}
	_, err = r.client.Refund(ctx, rp)
	var inv *provider.InvalidRequestError
	if !errors.As(err, &inv) || inv.Code != "charge_already_refunded" {
		t.Fatalf("retry: %v, want Stripe's replayed refusal, final", err)
	}
	if in, err := r.client.RefundIntent(ctx, "cus_1", "r1"); err != nil || in.Status != payments.IntentFailed {
		t.Fatalf("refund intent %+v %v, want FAILED", in, err)
	}
	if st := recordStatus(t, r.pool, composed(t, "refund", "r1")); st != string(idempotency.StatusFailed) {
		t.Fatalf("record %s, want FAILED", st)
	}
}

// noFullKey fails when err's text holds the composed key, or the provider
// reference derived from it.
func noFullKey(t *testing.T, err error, key string) {
	t.Helper()
	text := err.Error()
	for _, k := range []string{key, provider.DeriveKey(key, provider.StepCharge, 0, 255), provider.DeriveKey(key, provider.StepRefund, 0, 255)} {
		if strings.Contains(text, k) {
			t.Fatalf("the error's text holds a full key: %s", text)
		}
	}
}
