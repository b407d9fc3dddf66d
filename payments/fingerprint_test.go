package payments_test

import (
	"context"
	"errors"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	paystripe "github.com/payonce/payonce/providers/stripe"
)

// Every field a charge sends to the provider is bound to its key: a retry
// with another description, metadata or shopper is refused before
// anything is sent (Stripe would refuse it as idempotency_error), and a
// retry that sends the same thing is not.
func TestRetryWithOtherSentFieldsRefused(t *testing.T) {
	t.Parallel()
	r := newRefusalRig(t, "stripe")
	ctx := context.Background()
	p := r.params(t, "order-9")
	p.Metadata = map[string]string{"order": "9", "channel": "web"}
	k := composed(t, "charge", p.Key)

	r.loseNext(provider.StepCharge)
	if _, err := r.client.Charge(ctx, p); !payments.OutcomeUnknown(err) {
		t.Fatalf("first attempt: %v, want its answer lost", err)
	}
	for name, edit := range map[string]func(*payments.ChargeParams){
		"description":    func(q *payments.ChargeParams) { q.Description = "order 9, gift wrapped" },
		"metadata value": func(q *payments.ChargeParams) { q.Metadata = map[string]string{"order": "9", "channel": "app"} },
		"metadata key":   func(q *payments.ChargeParams) { q.Metadata = map[string]string{"order": "9"} },
		"shopper":        func(q *payments.ChargeParams) { q.Shopper = "usr_someone_else" },
	} {
		q := p
		edit(&q)
		_, err := r.client.Charge(ctx, q)
		if !errors.Is(err, idempotency.ErrFingerprintMismatch) {
			t.Fatalf("retry with another %s: %v, want a fingerprint mismatch", name, err)
		}
		noFullKey(t, err, k)
	}
	if n := r.fakes.Stripe.CountsByMetadata(paystripe.MetadataKey, k).PaymentIntents; n != 1 {
		t.Fatalf("%d PaymentIntents, want the first attempt's only", n)
	}
	if in, err := r.client.Intent(ctx, "cus_1", p.Key); err != nil || in.Status != payments.IntentUnknown {
		t.Fatalf("intent after the refused retries: %+v %v, want it untouched (UNKNOWN)", in, err)
	}

	// The same fields (a new map, the default shopper named): the original
	// charge.
	same := p
	same.Metadata = map[string]string{"channel": "web", "order": "9"}
	same.Shopper = same.Scope
	out, err := r.client.Charge(ctx, same)
	if err != nil || out.Status != payments.IntentSucceeded {
		t.Fatalf("retry with the same fields: %+v %v", out, err)
	}
	pvCheckOneCharge(t, r.pool, r.client, r.fakes, "stripe", p.Key, out.ProviderID, 1234)
}

// A key whose record was made before the fingerprint covered the
// description, the metadata and the shopper (payonce db587c8 and
// earlier), retried after the upgrade, is not refused: the retry resumes
// its attempt. A retry of such a key that sends another description
// reaches Stripe, which refuses it (idempotency_error): the error's text
// holds no key, and the intent stays open.
func TestLegacyRecordRetriedAfterUpgrade(t *testing.T) {
	t.Parallel()
	r := newRefusalRig(t, "stripe")
	ctx := context.Background()
	p := r.params(t, "order-legacy")
	k := composed(t, "charge", p.Key)
	r.loseNext(provider.StepCharge)
	if _, err := r.client.Charge(ctx, p); !payments.OutcomeUnknown(err) {
		t.Fatalf("first attempt: %v, want its answer lost", err)
	}
	// The record as the earlier version wrote it.
	legacy, err := idempotency.NewFingerprint().Decimal("amount", p.Amount.AmountString()).String("currency", string(p.Amount.Currency())).
		String("recipient", p.Recipient).String("payment_method", p.PaymentMethod).String("provider", p.Provider).Sum()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.pool.Exec(ctx, `UPDATE idempotency_store SET fingerprint = $3 WHERE idempotency_key = $1 AND user_id = $2`,
		k, p.Scope, string(legacy)); err != nil {
		t.Fatal(err)
	}

	other := p
	other.Description = "another description"
	_, err = r.client.Charge(ctx, other)
	if !errors.Is(err, provider.ErrKeyMismatch) {
		t.Fatalf("a legacy key retried with another description: %v, want Stripe's refusal of other parameters", err)
	}
	noFullKey(t, err, k)
	if in, err := r.client.Intent(ctx, "cus_1", p.Key); err != nil || in.Status != payments.IntentUnknown {
		t.Fatalf("intent: %+v %v, want it open", in, err)
	}

	out, err := r.client.Charge(ctx, p)
	if err != nil || out.Status != payments.IntentSucceeded {
		t.Fatalf("the legacy key retried as it was sent: %+v %v, want its charge", out, err)
	}
	again, err := r.client.Charge(ctx, p)
	if err != nil || !again.Replayed || again.ProviderID != out.ProviderID {
		t.Fatalf("replay: %+v %v", again, err)
	}
	pvCheckOneCharge(t, r.pool, r.client, r.fakes, "stripe", p.Key, out.ProviderID, 1234)
}
