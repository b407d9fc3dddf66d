package payments_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
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
// responses are in client_test.go), then Adyen's and PayPal's.

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

// Adyen and PayPal.

const (
	envPCrashPoint    = "PAYONCE_PCRASH_POINT"
	envPCrashProvider = "PAYONCE_PCRASH_PROVIDER"
	envPCrashDB       = "PAYONCE_PCRASH_DB"
	envPCrashURL      = "PAYONCE_PCRASH_URL"
)

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
	store, l := openStoreLedger(t, pool)
	c, err := payments.New(pool, []provider.Provider{prov}, &payments.Config{Store: store, Ledger: l, LockTimeout: lock})
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
	for _, provName := range []string{"adyen", "paypal"} {
		t.Run(provName, func(t *testing.T) {
			t.Parallel()
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
}
