package payments

import (
	"errors"
	"fmt"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments/provider"
)

// One vocabulary: bad input answers idempotency.ErrInvalid wherever it is
// found; each error says whether a retry with the same key is safe.
func TestErrorVocabulary(t *testing.T) {
	if !errors.Is(&ConfigError{"Amount", "negative"}, idempotency.ErrInvalid) {
		t.Error("a ConfigError is not idempotency.ErrInvalid")
	}
	for _, tc := range []struct {
		err  error
		safe bool
	}{
		{&provider.NotSentError{Provider: "stripe"}, true},
		{&provider.UnknownOutcomeError{Provider: "stripe"}, true},
		{&provider.InProgressError{Provider: "stripe"}, true},
		{&idempotency.InProgressError{}, true},
		{fmt.Errorf("charge: %w", &idempotency.InProgressError{}), true},
		{idempotency.ErrInProgress, true},
		{&provider.DeclineError{Provider: "stripe"}, false},
		{&provider.InvalidRequestError{Provider: "stripe"}, false},
		{&NeedsReviewError{Reason: "x"}, false},
		{&provider.KeyMismatchError{Provider: "stripe"}, false},
		{idempotency.ErrFingerprintMismatch, false},
		{&ConfigError{"Amount", "negative"}, false},
	} {
		if got := SafeToRetry(tc.err); got != tc.safe {
			t.Errorf("SafeToRetry(%T %v) = %v, want %v", tc.err, tc.err, got, tc.safe)
		}
	}
}
