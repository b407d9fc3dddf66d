package reconcile_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers/stripe/stripetest"
	"github.com/payonce/payonce/reconcile"
)

// overturnWorld is a payments client on the Stripe fake, whose webhooks
// it receives. The fake's clock stands a minute in the past, so that the
// balance transactions it stamps (in whole seconds) fall inside a drift
// window that ends now, without waiting for a second to pass.
type overturnWorld struct {
	pool   *pgxpool.Pool
	client *payments.Client
	fake   *stripetest.Server
}

func newOverturnWorld(t *testing.T) overturnWorld {
	t.Helper()
	pool := pgtest.Pool(t)
	var handler http.Handler
	recv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	clock := stripetest.NewManualClock(time.Now().Add(-time.Minute))
	client, fake := stripeClient(t, pool, &stripetest.Config{WebhookURL: "http://" + recv.Listener.Addr().String(), Clock: clock.Now}, nil, nil)
	var err error
	if handler, err = client.WebhookHandler("stripe", nil); err != nil {
		t.Fatal(err)
	}
	recv.Start()
	t.Cleanup(recv.Close)
	return overturnWorld{pool: pool, client: client, fake: fake}
}

func (w overturnWorld) wait(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.fake.WaitDeliveries(ctx); err != nil {
		t.Fatal(err)
	}
}

// decline charges key with a declined card and returns its PaymentIntent.
func (w overturnWorld) decline(t *testing.T, key, amount string, cur money.Currency) string {
	t.Helper()
	_, err := w.client.Charge(context.Background(), payments.ChargeParams{Scope: "cus_r", Key: key, Provider: "stripe",
		Amount: money.MustParse(amount, cur), Recipient: "acct_r", PaymentMethod: stripetest.PaymentMethodDeclined})
	if !errors.Is(err, provider.ErrDeclined) {
		t.Fatalf("charge %s: %v, want a decline", key, err)
	}
	w.wait(t)
	in, err := w.client.Intent(context.Background(), "cus_r", key)
	if err != nil || in.Status != payments.IntentDeclined || in.ProviderID == "" {
		t.Fatalf("intent %s: %+v %v", key, in, err)
	}
	return in.ProviderID
}

// A provider that overturns final states is reported, run by run, with
// what payonce did: a success after a decline booked, one it could not
// match sent to review (and counted as the run's reviews), a refund that
// failed after it succeeded reversed; and the balance check finds the
// books equal to Stripe's in the currency where all of them happened.
func TestOverturnedOutcomesAreReported(t *testing.T) {
	t.Parallel()
	w := newOverturnWorld(t)
	ctx := context.Background()

	booked := w.decline(t, "od1", "30.00", money.EUR)
	if _, err := w.fake.ConfirmPaymentIntent(booked, stripetest.PaymentMethodVisa); err != nil {
		t.Fatal(err)
	}
	w.wait(t)

	// A decline recorded without its object (as before declines named
	// it), in another currency: its success cannot be matched.
	unmatched := w.decline(t, "od2", "15.00", money.USD)
	k2, _ := idempotency.ComposeKey("cus_r", "charge", "od2")
	if _, err := w.pool.Exec(ctx, `UPDATE payment_intents SET provider_id = NULL WHERE idempotency_key = $1`, k2); err != nil {
		t.Fatal(err)
	}
	if _, err := w.fake.ConfirmPaymentIntent(unmatched, stripetest.PaymentMethodVisa); err != nil {
		t.Fatal(err)
	}
	w.wait(t)

	if _, err := w.client.Charge(ctx, payments.ChargeParams{Scope: "cus_r", Key: "oc", Provider: "stripe",
		Amount: money.MustParse("20.00", money.EUR), Recipient: "acct_r", PaymentMethod: stripetest.PaymentMethodVisa}); err != nil {
		t.Fatal(err)
	}
	rf, err := w.client.Refund(ctx, payments.RefundParams{Scope: "cus_r", Key: "or", ChargeKey: "oc", Amount: money.MustParse("20.00", money.EUR)})
	if err != nil {
		t.Fatal(err)
	}
	w.wait(t)
	if err := w.fake.FailRefund(rf.ProviderID); err != nil {
		t.Fatal(err)
	}
	w.wait(t)

	r, err := reconcile.New(w.pool, w.client, &reconcile.Config{Grace: time.Millisecond, DriftLag: time.Millisecond, DriftEvery: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k1, _ := idempotency.ComposeKey("cus_r", "charge", "od1")
	kr, _ := idempotency.ComposeKey("cus_r", "refund", "or")
	type seen struct {
		kind   reconcile.Kind
		action reconcile.Action
	}
	want := map[string]seen{
		k1: {reconcile.KindSucceededAfterDecline, reconcile.ActionCompleted},
		k2: {reconcile.KindSucceededAfterDecline, reconcile.ActionNeedsReview},
		kr: {reconcile.KindRefundFailedAfterSuccess, reconcile.ActionReversed},
	}
	for _, x := range rep.Items {
		switch {
		case x.Kind == reconcile.KindBalanceDrift && x.Currency == "EUR":
			t.Errorf("the books differ from Stripe's in EUR: %+v", x)
		case x.Kind == reconcile.KindBalanceDrift:
			if !strings.HasSuffix(x.LocalState, "refunded 0.00") || !strings.HasSuffix(x.ProviderState, "refunded 0.00") {
				t.Errorf("drift in %s: %+v", x.Currency, x)
			}
		case x.Kind == reconcile.KindSucceededAfterDecline || x.Kind == reconcile.KindRefundFailedAfterSuccess:
			exp, ok := want[x.IntentKey]
			if !ok || x.Kind != exp.kind || x.Action != exp.action || x.Detail == "" || x.Provider != "stripe" {
				t.Errorf("item %+v, want %+v", x, exp)
			}
			delete(want, x.IntentKey)
		case x.Kind == reconcile.KindWebhookConflict:
			t.Errorf("reported as a conflict: %+v", x)
		}
	}
	if len(want) != 0 {
		t.Fatalf("not reported: %v (items %+v)", want, rep.Items)
	}
	if rep.NeedsReview != 1 {
		t.Fatalf("run counted %d reviews, want the 1 the receiver flagged", rep.NeedsReview)
	}
	in2, err := w.client.Intent(ctx, "cus_r", "od2")
	if err != nil || in2.Status != payments.IntentNeedsReview {
		t.Fatalf("intent od2: %+v %v, want NEEDS_REVIEW", in2, err)
	}
	var reason string
	if err := w.pool.QueryRow(ctx, `SELECT review_reason FROM payment_intents WHERE idempotency_key = $1`, k2).Scan(&reason); err != nil ||
		!strings.Contains(reason, unmatched) {
		t.Fatalf("review reason %q %v, want it to name %s", reason, err, unmatched)
	}
	// The next run reports them no more: each event once.
	again, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range again.Items {
		if x.Kind == reconcile.KindSucceededAfterDecline || x.Kind == reconcile.KindRefundFailedAfterSuccess {
			t.Fatalf("reported again: %+v", x)
		}
	}
}
