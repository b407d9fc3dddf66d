package payments_test

import (
	"context"
	"testing"

	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// intentRef names the intent of a charge by its client's key, as
// idempotency.ComposeKey writes payonce's keys.
func intentRef(scope, key string) payments.IntentRef {
	return payments.IntentRef{Scope: scope, Key: scope + "_charge_" + key}
}

// An operator's reads of intents: summaries by (scope, key) without a
// client, counts by status, and a note on a review.
func TestOperatorIntentReads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const scope = "cus_ops"
	charge := func(key string) payments.ChargeParams {
		return payments.ChargeParams{Scope: scope, Key: key, Provider: "stripe", Amount: eur(t, "9.99"),
			Recipient: "acct", PaymentMethod: "pm_card_visa"}
	}
	if _, err := b.client.Charge(ctx, charge("order-1")); err != nil {
		t.Fatal(err)
	}
	b.fake.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	if _, err := b.client.Charge(ctx, charge("order-2")); !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v", err)
	}
	ref := func(key string) payments.IntentRef { return intentRef(scope, key) }

	got, err := payments.IntentSummaries(ctx, b.pool, ref("order-1"), ref("order-2"), ref("order-none"),
		payments.IntentRef{Scope: "cus_other", Key: ref("order-1").Key})
	if err != nil {
		t.Fatal(err)
	}
	want := map[payments.IntentRef]payments.IntentSummary{
		ref("order-1"): {Provider: "stripe", Status: payments.IntentSucceeded},
		ref("order-2"): {Provider: "stripe", Status: payments.IntentUnknown},
	}
	if len(got) != len(want) || got[ref("order-1")] != want[ref("order-1")] || got[ref("order-2")] != want[ref("order-2")] {
		t.Fatalf("summaries %+v, want %+v", got, want)
	}
	if none, err := payments.IntentSummaries(ctx, b.pool); err != nil || len(none) != 0 {
		t.Fatalf("no refs: %v, %v", none, err)
	}

	op := b.client.Operator()
	for _, tc := range []struct {
		statuses []payments.IntentStatus
		want     int
	}{
		{[]payments.IntentStatus{payments.IntentPending, payments.IntentUnknown}, 1},
		{[]payments.IntentStatus{payments.IntentSucceeded}, 1},
		{[]payments.IntentStatus{payments.IntentSucceeded, payments.IntentUnknown}, 2},
		{nil, 0},
	} {
		if n, err := op.CountIntents(ctx, tc.statuses...); err != nil || n != tc.want {
			t.Errorf("CountIntents(%v) = %d, %v; want %d", tc.statuses, n, err, tc.want)
		}
	}

	if _, err := b.pool.Exec(ctx, `UPDATE payment_intents SET review_reason = 'no proof' WHERE idempotency_key = $1`,
		ref("order-2").Key); err != nil {
		t.Fatal(err)
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // after the commit, a no-op
	if err := op.NoteReviewTx(ctx, tx, scope, ref("order-2").Key, "resolved by alice: INC-1"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var reason string
	if err := b.pool.QueryRow(ctx, `SELECT review_reason FROM payment_intents WHERE idempotency_key = $1`,
		ref("order-2").Key).Scan(&reason); err != nil || reason != "no proof; resolved by alice: INC-1" {
		t.Fatalf("review reason %q (%v)", reason, err)
	}
}
