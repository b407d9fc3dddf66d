package payments_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// The crash fault matrix: a child process (this test binary, re-executed)
// charges and is killed with SIGKILL at one point of the flow; the parent
// then retries with the same key. Whatever the point, the end state is one
// PaymentIntent at the provider, one ledger entry, a SUCCEEDED intent, and
// the same answer to every later retry.

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
	store, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	prov, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_crash", BaseURL: stripeURL, HTTPClient: hc})
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

			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), envCrashPoint+"="+point, envCrashDB+"="+url, envCrashStripe+"="+fake.URL())
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child was not killed at %s: %v\n%s", point, err, out)
			}

			// Retry as an impatient client would, until resolved.
			ctx := context.Background()
			deadline := time.Now().Add(2 * time.Minute)
			var first payments.Outcome
			for {
				first, err = c.Charge(ctx, p)
				if err == nil {
					break
				}
				if !errors.Is(err, idempotency.ErrInProgress) && !idempotency.SafeToRetry(err) {
					t.Fatalf("retry after a crash %s: %v", point, err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("unresolved 2 minutes after a crash %s: %v", point, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if first.Status != payments.IntentSucceeded || first.ProviderID == "" {
				t.Fatalf("outcome after a crash %s: %+v", point, first)
			}
			for i := 0; i < 3; i++ {
				again, err := c.Charge(ctx, p)
				if err != nil || !again.Replayed || again.ProviderID != first.ProviderID || again.Status != first.Status {
					t.Fatalf("later retry %d: %+v %v, want a replay of %+v", i, again, err, first)
				}
			}
			key, _ := idempotency.ComposeKey(p.Scope, "charge", p.Key)
			if n := fake.CountsByMetadata(paystripe.MetadataKey, key).PaymentIntents; n != 1 {
				t.Fatalf("crash %s: %d PaymentIntents at the provider, want 1", point, n)
			}
			var entries, postings int
			if err := pool.QueryRow(ctx, `SELECT count(DISTINCT e.id), count(p.*) FROM ledger_entries e
				JOIN ledger_postings p ON p.entry_id = e.id WHERE e.key = $1`, key).Scan(&entries, &postings); err != nil {
				t.Fatal(err)
			}
			if entries != 1 || postings != 2 {
				t.Fatalf("crash %s: %d ledger entries with %d postings, want 1 with 2", point, entries, postings)
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
	die := func(context.Context, string) { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }
	var h payments.CrashHooks
	switch point {
	case "after_claim":
		h.AfterClaim = die
	case "after_intent":
		h.AfterIntent = die
	case "after_provider":
		h.AfterProvider = die
	case "after_commit":
		h.AfterCommit = die
	default:
		t.Fatalf("unknown crash point %q", point)
	}
	payments.SetCrashHooks(c, h)
	out, err := c.Charge(context.Background(), params(t, "order-"+point, "31.40", stripetest.PaymentMethodVisa))
	t.Fatalf("the child survived its crash point %s: %+v %v", point, out, err)
}
