package payments

import (
	"errors"
	"fmt"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments/provider"
)

// The outcome errors a provider's answer is classified into
// ([provider.DeclineError], [provider.InvalidRequestError],
// [provider.UnknownOutcomeError], [provider.NotSentError],
// [provider.InProgressError], [provider.KeyMismatchError],
// [provider.CredentialsError]) and their sentinels are package provider's:
// the adapters return them, and [Client.Charge] and [Client.Refund] pass
// them on to the caller as they are. The errors below are payments' own.

// ErrNeedsReview: the reconciler could not prove the payment's outcome
// and flagged it for a human; retrying does not help.
var ErrNeedsReview = errors.New("payments: payment under review")

// NeedsReviewError is returned for a key whose intent the reconciler
// flagged NEEDS_REVIEW: payonce will not call the provider again for it
// until a human resolves it.
type NeedsReviewError struct{ Reason string }

func (e *NeedsReviewError) Error() string { return "payments: payment under review: " + e.Reason }

// Is reports ErrNeedsReview.
func (e *NeedsReviewError) Is(target error) bool { return target == ErrNeedsReview }

// RefusedRetryError: the provider refused a resumed attempt (a retry
// re-sending the references of an attempt whose outcome is unknown) with
// an answer that is not its replay of the attempt's own answer: a missing
// resource, a validation the earlier send passed, a conflict. That
// refusal speaks of this send only, and an earlier send may have charged:
// the intent stays open (UNKNOWN) for a later retry with the same key or
// the reconciler, which settle it from the provider's record of the
// attempt. It matches provider.ErrOutcomeUnknown, never
// provider.ErrInvalidRequest.
type RefusedRetryError struct {
	Provider string
	// Refusal is the provider's answer to this send.
	Refusal *provider.InvalidRequestError
}

func (e *RefusedRetryError) Error() string {
	return fmt.Sprintf("payments: outcome at %s unknown: it refused the retry of an attempt that may already have charged (%v); "+
		"the payment stays open until a retry with the same key or the reconciler settles it", e.Provider, e.Refusal)
}

// Is reports provider.ErrOutcomeUnknown.
func (e *RefusedRetryError) Is(target error) bool { return target == provider.ErrOutcomeUnknown }

// SafeToRetry reports true: a retry re-sends the same references.
func (e *RefusedRetryError) SafeToRetry() bool { return true }

// OutcomeUnknown reports whether err leaves the provider's outcome unknown.
func OutcomeUnknown(err error) bool { return errors.Is(err, provider.ErrOutcomeUnknown) }

// Retrier is implemented by errors that know whether retrying the call
// with the same key is safe: the providers' outcome errors
// ([provider.NotSentError], [provider.UnknownOutcomeError],
// [provider.InProgressError], [provider.CredentialsError]), payments'
// [RefusedRetryError] and the idempotency core's
// *idempotency.InProgressError (another call holds the key).
type Retrier interface{ SafeToRetry() bool }

// SafeToRetry reports whether retrying with the same key cannot do harm
// and may succeed: the request was not sent, the outcome is unknown (the
// provider deduplicates the retry), the provider or another call is still
// processing the key. Each error answers for itself ([Retrier]); the
// sentinels count too. Declines, invalid requests and reviews are final;
// refused credentials are not final but need a fix first (false).
func SafeToRetry(err error) bool {
	var r Retrier
	if errors.As(err, &r) {
		return r.SafeToRetry()
	}
	return errors.Is(err, provider.ErrNotSent) || errors.Is(err, provider.ErrOutcomeUnknown) || errors.Is(err, provider.ErrInProgress) ||
		errors.Is(err, idempotency.ErrInProgress)
}
