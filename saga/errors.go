package saga

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
)

var (
	// ErrPending: the saga has not finished: a step's outcome is unknown,
	// a step failed transiently, or a compensation is still to succeed.
	// Its lease is released; a retry with the same key (or
	// [Orchestrator.Recover]) resumes it. Returned wrapped in a
	// *PendingError.
	ErrPending = sentinel("saga: outcome pending", true)
	// ErrRolledBack: a step failed permanently and the steps done before
	// it were compensated. Returned wrapped in a *RolledBackError, with
	// the Result; every retry of the key gets the same.
	ErrRolledBack = sentinel("saga: rolled back", false)
	// ErrNeedsReview: a compensation failed permanently; a human decides
	// ([StatusNeedsReview]). (A payment under review is
	// payments.ErrUnderReview: another thing.)
	// Returned wrapped in a *NeedsReviewError, with the Result; every
	// retry of the key gets the same.
	ErrNeedsReview = sentinel("saga: needs review", false)
	// ErrDefinitionChanged: the registered definition's steps are not
	// those the saga started with. Nothing was run; register the new steps
	// under a new name.
	ErrDefinitionChanged = sentinel("saga: definition changed under a running saga", false)
	// ErrNotFound: no saga with this scope and key. It matches
	// idempotency.ErrNotFound too, and answers SafeToRetry as it does.
	ErrNotFound = fmt.Errorf("saga: not found (%w)", idempotency.ErrNotFound)
)

// PendingError is returned when a run stops before the saga's outcome:
// retry with the same key, or leave it to [Orchestrator.Recover].
type PendingError struct {
	// Step is the step whose action (or compensation) must run again.
	Step string
	// Compensating is true when it is the step's compensation.
	Compensating bool
	// Unknown is true when the last call's outcome is unknown (it may
	// have had its effect; it is never compensated blindly).
	Unknown bool
	// RetryAfter is set when the step (or compensation) waits for
	// something outside ([Wait]): how long until recovery looks at it
	// again. A retry before then only finds it still waiting.
	RetryAfter time.Duration
	// Err is the step's error.
	Err error
}

func (e *PendingError) Error() string {
	what := "step " + e.Step
	if e.Compensating {
		what = "compensation of step " + e.Step
	}
	if e.Unknown {
		return fmt.Sprintf("%v: %s: outcome unknown: %v", ErrPending, what, e.Err)
	}
	if e.RetryAfter > 0 {
		return fmt.Sprintf("%v: %s waits (again in %s): %v", ErrPending, what, e.RetryAfter, e.Err)
	}
	return fmt.Sprintf("%v: %s: %v", ErrPending, what, e.Err)
}

// Is reports ErrPending.
func (e *PendingError) Is(target error) bool { return target == ErrPending }

// Unwrap returns the step's error.
func (e *PendingError) Unwrap() error { return e.Err }

// SafeToRetry reports true: a retry with the same key resumes the saga
// with the same sub-keys.
func (e *PendingError) SafeToRetry() bool { return true }

// RolledBackError carries a rolled-back saga's failing step and reason.
type RolledBackError struct{ Step, Reason string }

func (e *RolledBackError) Error() string {
	return fmt.Sprintf("%v: step %s failed: %s", ErrRolledBack, e.Step, e.Reason)
}

// Is reports ErrRolledBack.
func (e *RolledBackError) Is(target error) bool { return target == ErrRolledBack }

// SafeToRetry reports false: every retry of the key gets the same
// rollback.
func (e *RolledBackError) SafeToRetry() bool { return false }

// NeedsReviewError carries the reason a saga needs a human.
type NeedsReviewError struct{ Step, Reason string }

func (e *NeedsReviewError) Error() string {
	return fmt.Sprintf("%v: %s", ErrNeedsReview, e.Reason)
}

// Is reports ErrNeedsReview.
func (e *NeedsReviewError) Is(target error) bool { return target == ErrNeedsReview }

// SafeToRetry reports false: every retry of the key gets the same answer;
// a human finishes the saga.
func (e *NeedsReviewError) SafeToRetry() bool { return false }

// ConfigError names a bad configuration or definition field.
type ConfigError struct{ Field, Reason string }

func (e *ConfigError) Error() string { return "saga: " + e.Field + ": " + e.Reason }

// Is reports idempotency.ErrInvalid: bad input or configuration, named.
func (e *ConfigError) Is(target error) bool { return target == idempotency.ErrInvalid }

// SafeToRetry reports false: fix the field first.
func (e *ConfigError) SafeToRetry() bool { return false }

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

// Class is what a step's error means for the saga (see Config.Classify).
type Class int

const (
	// ClassTransient: nothing is known to have happened; the saga waits
	// for a retry, which runs the step again with the same key.
	ClassTransient Class = iota + 1
	// ClassUnknown: the step may have had its effect. It stays UNKNOWN,
	// is never compensated blindly, and runs again with the same key.
	ClassUnknown
	// ClassPermanent: the step failed for good and left no effect: the
	// steps done before it are compensated. For a compensation: the saga
	// needs review.
	ClassPermanent
	// ClassWaiting: the step (or compensation) cannot be decided yet: it
	// waits for something outside (a charge to settle). It is not retried
	// within the run; the saga is rescheduled (see [Wait]).
	ClassWaiting
)

func (c Class) String() string {
	switch c {
	case ClassTransient:
		return "transient"
	case ClassUnknown:
		return "unknown"
	case ClassPermanent:
		return "permanent"
	case ClassWaiting:
		return "waiting"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

type unknownError struct{ err error }

func (e *unknownError) Error() string { return e.err.Error() }
func (e *unknownError) Unwrap() error { return e.err }

// Fail marks a step's error as permanent: the step left no effect and
// never will succeed with this input (for a compensation: the saga needs
// review). The step's error text is the saga's reason.
func Fail(err error) error {
	if err == nil {
		err = errors.New("failed")
	}
	return &permanentError{err}
}

// Unknown marks a step's error as leaving its outcome unknown: the step
// may have had its effect (a timeout after the request was sent).
func Unknown(err error) error {
	if err == nil {
		err = errors.New("outcome unknown")
	}
	return &unknownError{err}
}

type waitError struct {
	err   error
	after time.Duration
}

func (e *waitError) Error() string { return e.err.Error() }
func (e *waitError) Unwrap() error { return e.err }

// Wait marks a step's (or compensation's) error as a wait: it cannot be
// decided until something outside happens (a charge to settle before its
// refund). The run stops at once, without the in-run retries of a
// transient failure, and answers a *PendingError with RetryAfter set; the
// saga is rescheduled: [Orchestrator.Recover] leaves it until after has
// passed (a client's retry drives it at once). The next run calls the
// step again with the same [Call.Key], and it decides again: done, a
// failure, or another wait. A wait must be bounded by the step itself
// (see [RefundCharge]: past its bound, a failure). after is at least 0.
func Wait(err error, after time.Duration) error {
	if err == nil {
		err = errors.New("waiting")
	}
	return &waitError{err: err, after: max(after, 0)}
}

// waitOf is how long err waits (0 when it is not a [Wait]).
func waitOf(err error) time.Duration {
	var w *waitError
	if errors.As(err, &w) {
		return w.after
	}
	return 0
}

type nothingToUndoError struct{ reason string }

func (e *nothingToUndoError) Error() string { return "nothing to undo: " + e.reason }

// NothingToUndo is what a compensation returns when the step it undoes
// left no effect after all (a charge that was declined after its step was
// done needs no refund): the step is COMPENSATED, with reason as its note
// ([StepState].Note, [StepResult].Note), and the rollback goes on. Only a
// compensation may return it: from an action, it fails the step.
func NothingToUndo(reason string) error {
	if reason == "" {
		reason = "the step left no effect"
	}
	return &nothingToUndoError{reason}
}

// DefaultClassify is the default Config.Classify:
//   - permanent: errors made with [Fail]; payments' declines and invalid
//     requests (provider.ErrDeclined, provider.ErrInvalidRequest);
//   - waiting: errors made with [Wait];
//   - unknown: errors made with [Unknown]; errors that say a retry with
//     the same key is safe (idempotency.SafeToRetry: the payment's outcome
//     is unknown, the provider or another call still holds the key, the
//     request was not sent); payments under review (payments.ErrUnderReview);
//     deadlines exceeded
//     (the call may have arrived);
//   - transient: anything else.
//
// The markers win over what they wrap.
func DefaultClassify(err error) Class {
	var perm *permanentError
	var unk *unknownError
	var wait *waitError
	switch {
	case errors.As(err, &perm):
		return ClassPermanent
	case errors.As(err, &unk):
		return ClassUnknown
	case errors.As(err, &wait):
		return ClassWaiting
	case errors.Is(err, provider.ErrDeclined), errors.Is(err, provider.ErrInvalidRequest):
		return ClassPermanent
	case idempotency.SafeToRetry(err), errors.Is(err, payments.ErrUnderReview), errors.Is(err, context.DeadlineExceeded):
		return ClassUnknown
	}
	return ClassTransient
}
