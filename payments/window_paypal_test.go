package payments_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers/fakes"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// PayPal captures a vaulted-card order in its create and keeps the
// request id 6 hours. A create whose answer was lost, retried at +7h: the
// same request id would create and capture a second order. payments looks
// the attempt up instead (Transaction Search, matched on custom_id), and
// settles it: one order, one capture, one ledger entry. With nothing at
// PayPal the search, once its lag has passed, proves it: the intent fails
// with that proof.
func TestRetryPastPayPalWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fault    paypaltest.FaultKind
		past     time.Duration
		captures int
		want     payments.IntentStatus
	}{
		{"charged", paypaltest.ResetAfter, 7 * time.Hour, 1, payments.IntentSucceeded},
		{"nothing there", paypaltest.FailBefore, 10 * time.Hour, 0, payments.IntentFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			ctx := context.Background()
			store, err := pgstore.New(pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			l, err := ledger.New(pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			clock := paypaltest.NewManualClock(time.Now().Add(-tc.past))
			fake := paypaltest.NewServer(&paypaltest.Config{Clock: clock.Now, SearchLag: 3 * time.Hour})
			t.Cleanup(fake.Close)
			hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			prov, err := paypal.New(&paypal.Config{ClientID: fakes.PayPalClientID, Secret: fakes.PayPalSecret,
				BaseURL: fake.URL(), HTTPClient: hc, WebhookID: fakes.PayPalWebhookID, Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			client, err := payments.New(pool, []provider.Provider{prov}, &payments.Config{Store: store, Ledger: l})
			if err != nil {
				t.Fatal(err)
			}
			p := payments.ChargeParams{Scope: "cus_1", Key: "pp", Provider: "paypal", Amount: money.MustParse("10.00", money.EUR),
				Recipient: "acct_shop", PaymentMethod: paypaltest.PaymentMethodVisa}
			fake.Inject(paypaltest.Fault{Kind: tc.fault, Method: "POST", Path: "/v2/checkout/orders"})
			if _, err := client.Charge(ctx, p); !payments.OutcomeUnknown(err) {
				t.Fatalf("lost create: %v", err)
			}
			k, _ := idempotency.ComposeKey("cus_1", "charge", "pp")
			for _, q := range []string{
				`UPDATE payment_intents SET created_at = created_at - $2::interval, updated_at = updated_at - $2::interval,
				 attempt_sent_at = attempt_sent_at - $2::interval WHERE idempotency_key = $1`,
				`UPDATE idempotency_store SET created_at = created_at - $2::interval, locked_until = locked_until - $2::interval
				 WHERE idempotency_key = $1`,
			} {
				if _, err := pool.Exec(ctx, q, k, tc.past); err != nil {
					t.Fatal(err)
				}
			}
			clock.Advance(tc.past)
			res, err := client.Charge(ctx, p)
			switch tc.want {
			case payments.IntentSucceeded:
				if err != nil || res.Status != payments.IntentSucceeded {
					t.Fatalf("retry past the window: %+v %v", res, err)
				}
			case payments.IntentFailed:
				if !errors.Is(err, provider.ErrInvalidRequest) {
					t.Fatalf("retry past the window: %+v %v, want the attempt failed with proof", res, err)
				}
			}
			got := fake.CountsByCustomID(provider.DeriveKey(k, provider.StepCharge, 0, paypal.MaxProviderKeyLen))
			if got.Orders != tc.captures || got.Captures != tc.captures {
				t.Fatalf("at PayPal: %+v, want %d order(s) and capture(s)", got, tc.captures)
			}
			in, err := client.Intent(ctx, "cus_1", "pp")
			if err != nil || in.Status != tc.want {
				t.Fatalf("intent %+v %v, want %s", in, err, tc.want)
			}
		})
	}
}
