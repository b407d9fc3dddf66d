package provider_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments/provider"
)

// Every exported error of the SPI answers idempotency.SafeToRetry for
// itself, sentinels included: true where a retry with the same key
// re-sends the same references (not sent, outcome unknown, still in
// progress), false where it is final or needs a fix first.
func TestSafeToRetryAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{provider.ErrNotSent, true},
		{&provider.NotSentError{Provider: "stripe", Err: errors.New("dial: refused")}, true},
		{provider.ErrOutcomeUnknown, true},
		{&provider.UnknownOutcomeError{Provider: "stripe", Status: 502}, true},
		{provider.ErrInProgress, true},
		{&provider.InProgressError{Provider: "stripe"}, true},
		{provider.ErrDeclined, false},
		{&provider.DeclineError{Provider: "stripe", DeclineCode: "insufficient_funds"}, false},
		{provider.ErrInvalidRequest, false},
		{&provider.InvalidRequestError{Provider: "stripe", Code: "parameter_invalid_integer"}, false},
		{provider.ErrRefundExceedsCharge, false},
		{provider.ErrKeyMismatch, false},
		{&provider.KeyMismatchError{Provider: "stripe"}, false},
		{provider.ErrCredentials, false},
		{&provider.CredentialsError{Provider: "stripe", Status: 401}, false},
		{provider.ErrCannotTell, false},
		{provider.ErrWebhookSignature, false},
		{provider.ErrWebhookMalformed, false},
	} {
		var r interface{ SafeToRetry() bool }
		if !errors.As(tc.err, &r) {
			t.Errorf("%T %v does not answer SafeToRetry", tc.err, tc.err)
		}
		if got := idempotency.SafeToRetry(tc.err); got != tc.want {
			t.Errorf("SafeToRetry(%T %v) = %v, want %v", tc.err, tc.err, got, tc.want)
		}
		// The error's own answer, not a cause it wraps, decides.
		if got := idempotency.SafeToRetry(fmt.Errorf("charge: %w", tc.err)); got != tc.want {
			t.Errorf("SafeToRetry(wrapped %T) = %v, want %v", tc.err, got, tc.want)
		}
	}
	// A NotSentError wrapping a cause that answers false still answers
	// true: the request never reached the provider.
	if !idempotency.SafeToRetry(&provider.NotSentError{Provider: "stripe", Err: idempotency.ErrInvalid}) {
		t.Error("a NotSentError's own answer does not win over its cause")
	}
}
