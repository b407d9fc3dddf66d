package reconcile_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/payments"

	"github.com/payonce/payonce/payments/provider"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/reconcile"
)

// A lookup refused for payonce's credentials (a key rolled at the
// provider, still configured here) is an outage, reported as a credentials
// problem: the intent stays open, however many checks, and the reconciler
// settles it once the key works.
func TestLookupCredentialsRefusedIsAnOutage(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.drop.Store(true)
	ctx := context.Background()
	w.fakes.Stripe.Inject(stripeReset())
	if _, err := w.client.Charge(ctx, params("stripe", "creds-1")); !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v", err)
	}

	rolled, err := paystripe.New(&paystripe.Config{SecretKey: "sk_live_rolled", BaseURL: w.fakes.Stripe.URL(),
		HTTPClient: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}})
	if err != nil {
		t.Fatal(err)
	}
	stale, err := payments.New(w.pool, []provider.Provider{rolled}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := reconcile.New(w.pool, stale, &reconcile.Config{Grace: time.Millisecond, Schedule: []time.Duration{time.Millisecond}, MaxChecks: 1})
	if err != nil {
		t.Fatal(err)
	}
	for run := range 3 { // past MaxChecks: an outage never leads to review
		rep, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var item *reconcile.Item
		for i := range rep.Items {
			if rep.Items[i].IntentKey == composed("creds-1") {
				item = &rep.Items[i]
			}
		}
		if item == nil {
			if run == 0 {
				t.Fatalf("run %d: the intent was not examined: %+v", run, rep)
			}
			continue // not due yet
		}
		if item.Kind != reconcile.KindProviderUnavailable || item.Action != reconcile.ActionRescheduled ||
			item.ProviderState != "lookup refused our credentials" || !strings.Contains(item.Detail, "check Config.SecretKey") ||
			rep.NeedsReview != 0 || rep.FailedWithProof != 0 {
			t.Fatalf("run %d: %+v in %+v, want an outage naming the credentials", run, *item, rep)
		}
	}
	if in := w.intent(t, "creds-1"); in.Status != payments.IntentUnknown {
		t.Fatalf("intent while the key is refused: %s, want still UNKNOWN", in.Status)
	}

	rep, err := w.reconciler(t, nil).RunOnce(ctx) // the key fixed
	if err != nil || rep.Repaired != 1 {
		t.Fatalf("run with the fixed key: %+v %v, want the charge completed", rep, err)
	}
	if in := w.intent(t, "creds-1"); in.Status != payments.IntentSucceeded {
		t.Fatalf("intent: %s, want SUCCEEDED", in.Status)
	}
}
