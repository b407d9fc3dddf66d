package payments_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments"

	"github.com/payonce/payonce/payments/provider"
)

func TestProviderKey(t *testing.T) {
	t.Parallel()
	if k := provider.DeriveKey("usr_1_charge_abc", "charge", 0, 255); k != "usr_1_charge_abc_charge_0" {
		t.Fatalf("short key: %q", k)
	}
	long := strings.Repeat("k", 300)
	a := provider.DeriveKey(long, "charge", 0, 255)
	if len(a) != 255 || a != provider.DeriveKey(long, "charge", 0, 255) {
		t.Fatalf("long key: %d bytes, deterministic=%v", len(a), a == provider.DeriveKey(long, "charge", 0, 255))
	}
	if a == provider.DeriveKey(long, "charge", 1, 255) || a == provider.DeriveKey(long, "refund", 0, 255) {
		t.Fatal("attempt and step must change the derived key")
	}
	if b := provider.DeriveKey(long, "charge", 0, 64); len(b) != 64 {
		t.Fatalf("64-byte limit: %d", len(b))
	}
	if c := provider.DeriveKey(long, "charge", 0, 40); len(c) != 40 {
		t.Fatalf("limit below a hash: %d", len(c))
	}
}

func TestOutcomeClasses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err            error
		unknown, retry bool
		is             error
	}{
		{&provider.DeclineError{Provider: "stripe", DeclineCode: "insufficient_funds"}, false, false, provider.ErrDeclined},
		{&provider.InvalidRequestError{Provider: "stripe"}, false, false, provider.ErrInvalidRequest},
		{&provider.NotSentError{Provider: "stripe", Err: errors.New("dial")}, false, true, provider.ErrNotSent},
		{&provider.UnknownOutcomeError{Provider: "stripe", Status: 502}, true, true, provider.ErrOutcomeUnknown},
		{&provider.InProgressError{Provider: "stripe"}, false, true, provider.ErrInProgress},
		{&provider.KeyMismatchError{Provider: "stripe"}, false, false, provider.ErrKeyMismatch},
	}
	for _, c := range cases {
		if payments.OutcomeUnknown(c.err) != c.unknown || idempotency.SafeToRetry(c.err) != c.retry || !errors.Is(c.err, c.is) {
			t.Errorf("%v: unknown=%v retry=%v", c.err, payments.OutcomeUnknown(c.err), idempotency.SafeToRetry(c.err))
		}
	}
}
