package saga_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/saga"
)

// Every exported error of saga answers idempotency.SafeToRetry for
// itself, sentinels included: a pending saga resumes on a retry with the
// same key; a finished one answers the same to every retry.
func TestSafeToRetryAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{saga.ErrPending, true},
		{&saga.PendingError{Step: "charge", Err: errors.New("boom")}, true},
		// A pending saga's own answer wins over its step's error.
		{&saga.PendingError{Step: "charge", Err: idempotency.ErrInvalid}, true},
		{saga.ErrRolledBack, false},
		{&saga.RolledBackError{Step: "charge", Reason: "declined"}, false},
		{saga.ErrNeedsReview, false},
		{&saga.NeedsReviewError{Step: "charge", Reason: "refund refused"}, false},
		{saga.ErrDefinitionChanged, false},
		{saga.ErrNotFound, false},
		{&saga.ConfigError{Field: "Steps", Reason: "empty"}, false},
	} {
		var r interface{ SafeToRetry() bool }
		if !errors.As(tc.err, &r) {
			t.Errorf("%T %v does not answer SafeToRetry", tc.err, tc.err)
		}
		if got := idempotency.SafeToRetry(fmt.Errorf("checkout: %w", tc.err)); got != tc.want {
			t.Errorf("SafeToRetry(%T %v) = %v, want %v", tc.err, tc.err, got, tc.want)
		}
	}
}
