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
		// payments' own errors, each answering for itself.
		{ErrUnderReview, false},
		{&UnderReviewError{Reason: "x"}, false},
		{&RefusedRetryError{Provider: "stripe", Refusal: &provider.InvalidRequestError{Provider: "stripe"}}, true},
		{&ConfigError{"Amount", "negative"}, false},
		{ErrChanged, false},
		{ErrNotOpen, false},
		{ErrNotUnderReview, false},
		// What Charge and Refund pass on from below.
		{&provider.NotSentError{Provider: "stripe"}, true},
		{&provider.UnknownOutcomeError{Provider: "stripe"}, true},
		{&provider.InProgressError{Provider: "stripe"}, true},
		{&idempotency.InProgressError{}, true},
		{fmt.Errorf("charge: %w", &idempotency.InProgressError{}), true},
		{idempotency.ErrInProgress, true},
		{&provider.DeclineError{Provider: "stripe"}, false},
		{&provider.InvalidRequestError{Provider: "stripe"}, false},
		{&provider.KeyMismatchError{Provider: "stripe"}, false},
		{&provider.CredentialsError{Provider: "stripe"}, false},
		{idempotency.ErrFingerprintMismatch, false},
	} {
		var r interface{ SafeToRetry() bool }
		if !errors.As(tc.err, &r) {
			t.Errorf("%T %v does not answer SafeToRetry", tc.err, tc.err)
		}
		if got := idempotency.SafeToRetry(tc.err); got != tc.safe {
			t.Errorf("SafeToRetry(%T %v) = %v, want %v", tc.err, tc.err, got, tc.safe)
		}
	}
}
