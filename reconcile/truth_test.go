package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/stripe/stripetest"
	"github.com/payonce/payonce/reconcile"
)

// A second charge at the provider for an intent that already SUCCEEDED is
// reported from both paths: the webhook that names it (recorded
// second_object) and the verification of succeeded charges (the lookup
// finds two).
func TestSecondChargeOnSettledIntentIsReported(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	out, err := w.client.Charge(ctx, params("stripe", "twice"))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.fakes.WaitDeliveries(wctx); err != nil {
		t.Fatal(err)
	}
	// Another PaymentIntent carrying the same local key (a re-send of a
	// pruned key, a second system): its success webhook comes in.
	second, err := w.client.Provider("stripe").Charge(ctx, provider.ChargeRequest{Key: composed("twice"), ProviderKey: "other-attempt",
		Amount: money.MustParse("12.34", money.EUR), Recipient: "acct_r", PaymentMethod: "pm_card_visa"})
	if err != nil || second.ProviderID == out.ProviderID {
		t.Fatalf("second charge: %+v %v", second, err)
	}
	if err := w.fakes.WaitDeliveries(wctx); err != nil {
		t.Fatal(err)
	}
	var outcome string
	if err := w.pool.QueryRow(ctx, `SELECT outcome FROM webhook_events WHERE provider_id = $1 AND event_type = 'payment_intent.succeeded'`,
		second.ProviderID).Scan(&outcome); err != nil {
		t.Fatal(err)
	}
	if outcome != payments.EventSecondObject {
		t.Fatalf("success webhook of a second PaymentIntent: outcome %q, want %q", outcome, payments.EventSecondObject)
	}
	r := w.reconciler(t, nil)
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var fromWebhook, fromVerify bool
	for _, x := range rep.Items {
		if x.Kind != reconcile.KindDuplicateAtProvider {
			continue
		}
		switch {
		case strings.Contains(x.ProviderState, "(event "):
			fromWebhook = true
		case x.IntentKey == composed("twice") && strings.Contains(x.ProviderState, second.ProviderID) && strings.Contains(x.ProviderState, out.ProviderID):
			fromVerify = true
		}
	}
	if !fromWebhook || !fromVerify {
		t.Fatalf("several charges at provider reported from the webhook %v, from the verification %v: %+v", fromWebhook, fromVerify, rep.Items)
	}
	if in := w.intent(t, "twice"); in.Status != payments.IntentSucceeded || in.ProviderID != out.ProviderID {
		t.Fatalf("the settled intent changed: %+v", in)
	}
}

// Config.Redrive reopens an intent proven to have left nothing, once per
// attempt that was sent: a reopened attempt nobody retried is not reopened
// again on every run (the attempt number would climb forever and MaxChecks
// never apply); when its checks run out it fails with the proof. A client
// retry after the reopening sends the new attempt: one charge.
func TestRedriveIsBounded(t *testing.T) {
	t.Parallel()
	for _, retry := range []bool{false, true} {
		w := newWorld(t)
		w.drop.Store(true)
		ctx := context.Background()
		w.fakes.Stripe.Inject(stripetest.Fault{Kind: stripetest.FailBefore, Method: "POST", Path: "/v1/payment_intents"})
		if _, err := w.client.Charge(ctx, params("stripe", "redrive")); !payments.OutcomeUnknown(err) {
			t.Fatalf("500: %v", err)
		}
		r := w.reconciler(t, &reconcile.Config{Grace: time.Millisecond, Schedule: []time.Duration{time.Millisecond}, MaxChecks: 3, Redrive: reconcile.NewAttempt})
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		in := w.intent(t, "redrive")
		var attempt int
		if err := w.pool.QueryRow(ctx, `SELECT attempt FROM payment_intents WHERE idempotency_key = $1`, composed("redrive")).Scan(&attempt); err != nil {
			t.Fatal(err)
		}
		if in.Status != payments.IntentPending || attempt != 1 {
			t.Fatalf("after the first run: %s attempt %d, want PENDING attempt 1", in.Status, attempt)
		}
		if retry {
			res, err := w.client.Charge(ctx, params("stripe", "redrive"))
			if err != nil || res.Status != payments.IntentSucceeded {
				t.Fatalf("retry of the reopened intent: %+v %v", res, err)
			}
		}
		for i := 0; i < 6; i++ {
			time.Sleep(5 * time.Millisecond)
			if _, err := r.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.pool.QueryRow(ctx, `SELECT attempt FROM payment_intents WHERE idempotency_key = $1`, composed("redrive")).Scan(&attempt); err != nil {
			t.Fatal(err)
		}
		in = w.intent(t, "redrive")
		want := payments.IntentFailed
		if retry {
			want = payments.IntentSucceeded
		}
		if attempt != 1 || in.Status != want {
			t.Fatalf("retry=%v: after more runs %s attempt %d, want %s attempt 1", retry, in.Status, attempt, want)
		}
		if n, wantN := w.fakes.Charges("stripe", composed("redrive")), map[bool]int{false: 0, true: 1}[retry]; n != wantN {
			t.Fatalf("retry=%v: charges at Stripe = %d, want %d", retry, n, wantN)
		}
	}
}

// blindStripe is Stripe whose lookup can no longer tell (as PayPal past
// its request-id window with no other way to look).
type blindStripe struct{ provider.Provider }

func (blindStripe) Lookup(context.Context, provider.LookupRequest) (provider.LookupResult, error) {
	return provider.LookupResult{}, errors.Join(errors.New("request id forgotten"), provider.ErrCannotTell)
}

// A lookup that cannot tell is not an outage: the intent goes to
// NEEDS_REVIEW at once with the reason, instead of being rescheduled
// forever.
func TestLookupThatCannotTellNeedsReview(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	client, fake := stripeClient(t, pool, nil, nil, func(p provider.Provider) provider.Provider { return blindStripe{p} })
	fake.Inject(stripeReset())
	if _, err := client.Charge(ctx, params("stripe", "blind")); !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v", err)
	}
	r, err := reconcile.New(pool, client, &reconcile.Config{Grace: time.Millisecond, Schedule: []time.Duration{time.Millisecond}, MaxChecks: 10})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.NeedsReview != 1 || len(rep.Items) == 0 || rep.Items[0].Kind != reconcile.KindPastProviderWindow ||
		!strings.Contains(rep.Items[0].Detail, "deduplication window") {
		t.Fatalf("report: %+v", rep)
	}
	in, err := client.Intent(ctx, "cus_r", "blind")
	if err != nil || in.Status != payments.IntentNeedsReview {
		t.Fatalf("intent: %+v %v", in, err)
	}
}

// Adyen captures automatically: a payment whose response and AUTHORISATION
// notification were both lost is captured. The reconciler's technical
// cancel by reference cannot cancel it (TECHNICAL_CANCEL success=false):
// the intent must not be FAILED (the customer paid); it goes to review with
// Adyen's reason, and the money stays where it is.
func TestAdyenCapturedPaymentWithLostAuthorisationGoesToReview(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	w.drop.Store(true) // the AUTHORISATION never arrives
	w.fakes.Adyen.Inject(adyentest.Fault{Kind: adyentest.ResetAfter, Path: "/payments"})
	if _, err := w.client.Charge(ctx, params("adyen", "captured")); !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.fakes.WaitDeliveries(wctx); err != nil {
		t.Fatal(err)
	}
	w.drop.Store(false) // the void's own notification does arrive
	if n := w.fakes.Charges("adyen", composed("captured")); n != 1 {
		t.Fatalf("payments at Adyen = %d, want 1", n)
	}
	r := w.reconciler(t, &reconcile.Config{Grace: time.Millisecond, VoidAfter: time.Millisecond, Schedule: []time.Duration{time.Millisecond}, MaxChecks: 8})
	in := w.settle(t, r, "captured")
	if in.Status != payments.IntentNeedsReview {
		t.Fatalf("intent %s, want NEEDS_REVIEW (a refused cancel is no proof that nothing was charged)", in.Status)
	}
	var reason string
	if err := w.pool.QueryRow(ctx, `SELECT review_reason FROM payment_intents WHERE idempotency_key = $1`, composed("captured")).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reason, "refused to void") {
		t.Fatalf("review reason %q does not say the void was refused", reason)
	}
	items, err := reconcile.Items(ctx, w.pool, reconcile.Filter{Kind: reconcile.KindVoidRefused})
	if err != nil || len(items) != 1 || items[0].IntentKey != composed("captured") {
		t.Fatalf("void refused items: %+v %v", items, err)
	}
	if n := w.fakes.Charges("adyen", composed("captured")); n != 1 {
		t.Fatalf("payments at Adyen = %d after the reconciler, want 1", n)
	}
	if net := w.fakes.Net("adyen")["EUR"]; net != 1234 {
		t.Fatalf("Adyen holds %d EUR cents, want the captured 1234", net)
	}
	if e := w.entries(t, "captured"); e != 0 {
		t.Fatalf("%d ledger entries before a human decided", e)
	}
}
