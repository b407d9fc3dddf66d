package payments

import (
	"errors"
	"fmt"

	"github.com/payonce/payonce/payments/provider"
)

// The outcome errors a provider's answer is classified into
// ([provider.DeclineError], [provider.InvalidRequestError],
// [provider.UnknownOutcomeError], [provider.NotSentError],
// [provider.InProgressError], [provider.KeyMismatchError],
// [provider.CredentialsError]) and their sentinels are package provider's:
// the adapters return them, and [Client.Charge] and [Client.Refund] pass
// them on to the caller as they are. The errors below are payments' own.

// ErrUnderReview: the reconciler could not prove the payment's outcome
// and flagged its intent for a human ([IntentNeedsReview]); retrying does
// not help. (A saga that needs review is saga.ErrNeedsReview: another
// thing.)
var ErrUnderReview = sentinel("payments: payment under review", false)

// UnderReviewError is returned for a key whose intent the reconciler
// flagged NEEDS_REVIEW: payonce will not call the provider again for it
// until a human resolves it.
type UnderReviewError struct{ Reason string }

func (e *UnderReviewError) Error() string { return "payments: payment under review: " + e.Reason }

// Is reports ErrUnderReview.
func (e *UnderReviewError) Is(target error) bool { return target == ErrUnderReview }

// SafeToRetry reports false: every retry gets the same answer until a
// human resolves the intent ([Client.ResolveReview]).
func (e *UnderReviewError) SafeToRetry() bool { return false }

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

// OutcomeUnknown reports whether err leaves the provider's outcome
// unknown. Whether a retry with the same key is safe, each error answers
// for itself: [idempotency.SafeToRetry].
func OutcomeUnknown(err error) bool { return errors.Is(err, provider.ErrOutcomeUnknown) }

// sentinelError is a sentinel error that answers
// [idempotency.SafeToRetry] for itself.
type sentinelError struct {
	text string
	safe bool
}

func sentinel(text string, safeToRetry bool) error {
	return &sentinelError{text: text, safe: safeToRetry}
}

func (s *sentinelError) Error() string { return s.text }

// SafeToRetry reports what the sentinel stands for.
func (s *sentinelError) SafeToRetry() bool { return s.safe }
