package payments_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// A charge whose key's record is finished goes to review: a 3-D Secure
// charge answered REQUIRES_ACTION (a finished record, replayed to
// retries) that the reconciler gave up on. A human decides it from the
// provider's records; from then on a retry of the key must get that
// decision, not the REQUIRES_ACTION first recorded (nor a new charge). The
// decision and the record's new answer commit together: an audit that
// fails rolls both back.
func TestResolvedReviewIsWhatRetriesGet(t *testing.T) {
	t.Parallel()
	for _, decision := range []payments.IntentStatus{payments.IntentSucceeded, payments.IntentFailed} {
		t.Run(string(decision), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			p := params(t, "3ds", "25.00", stripetest.PaymentMethodAuthenticationRequired)
			first, err := b.client.Charge(ctx, p)
			if err != nil || first.Status != payments.IntentRequiresAction || first.ProviderID == "" {
				t.Fatalf("charge: %+v %v, want REQUIRES_ACTION naming the PaymentIntent", first, err)
			}
			pi := first.ProviderID
			underReview(t, b, "3ds")

			proof := payments.Proof{Status: decision, Reason: "operator: nothing at the provider"}
			if decision == payments.IntentSucceeded {
				// The customer authenticated after all.
				if st, err := b.fake.ConfirmPaymentIntent(pi, stripetest.PaymentMethodVisa); err != nil || st != "succeeded" {
					t.Fatalf("the customer's authentication: %s %v", st, err)
				}
				proof = payments.Proof{Status: decision, ProviderID: pi, Reason: "operator: the dashboard shows it succeeded"}
			}
			key := composed(t, "charge", "3ds")
			refused := errors.New("audit log unavailable")
			err = b.client.Operator().ResolveReview(ctx, "cus_1", key, proof, func(context.Context, pgx.Tx) error { return refused })
			if !errors.Is(err, refused) {
				t.Fatalf("a decision whose audit fails: %v, want the audit's error", err)
			}
			if in, err := b.client.Intent(ctx, "cus_1", "3ds"); err != nil || in.Status != payments.IntentNeedsReview {
				t.Fatalf("after the failed audit: %+v %v, want still NEEDS_REVIEW", in, err)
			}
			if out, err := b.client.Charge(ctx, p); err != nil || out.Status != payments.IntentRequiresAction || !out.Replayed {
				t.Fatalf("retry after the failed audit: %+v %v, want the first answer, unchanged", out, err)
			}

			audited := false
			err = b.client.Operator().ResolveReview(ctx, "cus_1", key, proof, func(ctx context.Context, tx pgx.Tx) error {
				audited = true
				return nil
			})
			if err != nil || !audited {
				t.Fatalf("the decision: %v (audited %v)", err, audited)
			}
			if in, err := b.client.Intent(ctx, "cus_1", "3ds"); err != nil || in.Status != decision {
				t.Fatalf("intent after the decision: %+v %v, want %s", in, err, decision)
			}
			for i := range 2 {
				out, err := b.client.Charge(ctx, p)
				switch decision {
				case payments.IntentSucceeded:
					if err != nil || out.Status != payments.IntentSucceeded || out.ProviderID != pi || !out.Replayed || out.Amount != "25.00" {
						t.Fatalf("retry %d after the decision: %+v %v, want the success of %s replayed", i, out, err, pi)
					}
				default:
					var invalid *provider.InvalidRequestError
					if !errors.As(err, &invalid) || invalid.Code != "payment_void" || out.Status != payments.IntentFailed || !out.Replayed {
						t.Fatalf("retry %d after the decision: %+v %v, want the failure replayed (payment_void)", i, out, err)
					}
				}
			}
			wantCash := "0.00"
			if decision == payments.IntentSucceeded {
				wantCash = "25.00"
			}
			if n := pis(t, b, "3ds"); n != 1 || balance(t, b) != wantCash {
				t.Fatalf("%d PaymentIntents, cash %s after the retries; want 1 and %s", n, balance(t, b), wantCash)
			}
			booksBalanced(t, b.pool)
		})
	}
}

// underReview sends the charge intent of key to review the way the
// reconciler does when it gives up on it: held, then resolved with a
// NEEDS_REVIEW proof. Its key's record is left as it was.
func underReview(t *testing.T, b bundle, key string) {
	t.Helper()
	ctx := context.Background()
	in, err := b.client.Intent(ctx, "cus_1", key)
	if err != nil {
		t.Fatal(err)
	}
	held, err := b.client.Operator().Hold(ctx, payments.Examined{Scope: "cus_1", Key: composed(t, "charge", key), Kind: payments.KindCharge,
		Provider: in.Provider, Status: in.Status})
	if err != nil {
		t.Fatalf("hold: %v", err)
	}
	if err := b.client.Operator().Resolve(ctx, held, payments.Proof{Status: payments.IntentNeedsReview,
		Reason: "still waiting for the customer at the provider after 6 checks"}, nil); err != nil {
		t.Fatalf("to review: %v", err)
	}
	if in, err := b.client.Intent(ctx, "cus_1", key); err != nil || in.Status != payments.IntentNeedsReview {
		t.Fatalf("intent: %+v %v, want NEEDS_REVIEW", in, err)
	}
}

// A human's proof that cannot be right is refused before anything
// changes: a kept id that is not the provider's id of such an object (a
// typo, a Charge's id where Stripe's adapter records the PaymentIntent's),
// a blank decline code or reason. The audit is not called, the intent
// stays under review, and the right proof then settles it.
func TestResolveReviewRefusesBadProof(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	p := params(t, "3ds-bad-proof", "25.00", stripetest.PaymentMethodAuthenticationRequired)
	first, err := b.client.Charge(ctx, p)
	if err != nil || first.Status != payments.IntentRequiresAction {
		t.Fatalf("charge: %+v %v", first, err)
	}
	underReview(t, b, "3ds-bad-proof")
	if st, err := b.fake.ConfirmPaymentIntent(first.ProviderID, stripetest.PaymentMethodVisa); err != nil || st != "succeeded" {
		t.Fatalf("the customer's authentication: %s %v", st, err)
	}
	key := composed(t, "charge", "3ds-bad-proof")
	why := "operator: the dashboard shows it"
	for name, proof := range map[string]payments.Proof{
		"not an id":            {Status: payments.IntentSucceeded, ProviderID: "not a stripe id", Reason: why},
		"padded":               {Status: payments.IntentSucceeded, ProviderID: " " + first.ProviderID, Reason: why},
		"a Charge's id":        {Status: payments.IntentSucceeded, ProviderID: "ch_3Qx0fake", Reason: why},
		"a Refund's id":        {Status: payments.IntentSucceeded, ProviderID: "re_3Qx0fake", Reason: why},
		"blank decline code":   {Status: payments.IntentDeclined, DeclineCode: "  ", Reason: why},
		"blank reason":         {Status: payments.IntentSucceeded, ProviderID: first.ProviderID, Reason: " \t"},
		"control character id": {Status: payments.IntentSucceeded, ProviderID: first.ProviderID + "\n", Reason: why},
	} {
		audited := false
		err := b.client.Operator().ResolveReview(ctx, "cus_1", key, proof, func(context.Context, pgx.Tx) error {
			audited = true
			return nil
		})
		if !errors.Is(err, idempotency.ErrInvalid) || audited {
			t.Errorf("%s: %v (audited %v), want a refusal naming the field, before the audit", name, err, audited)
		}
		if in, err := b.client.Intent(ctx, "cus_1", "3ds-bad-proof"); err != nil || in.Status != payments.IntentNeedsReview {
			t.Fatalf("%s: intent %+v %v, want still NEEDS_REVIEW", name, in, err)
		}
	}
	if err := b.client.Operator().ResolveReview(ctx, "cus_1", key, payments.Proof{Status: payments.IntentSucceeded,
		ProviderID: first.ProviderID, Reason: why}, nil); err != nil {
		t.Fatalf("the right proof: %v", err)
	}
	if in, err := b.client.Intent(ctx, "cus_1", "3ds-bad-proof"); err != nil || in.Status != payments.IntentSucceeded || in.ProviderID != first.ProviderID {
		t.Fatalf("intent after the right proof: %+v %v", in, err)
	}
}
