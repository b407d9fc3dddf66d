package saga

import (
	"context"
	"errors"
	"fmt"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments"
)

var (
	// ErrPending: the saga has not finished: a step's outcome is unknown,
	// a step failed transiently, or a compensation is still to succeed.
	// Its lease is released; a retry with the same key (or
	// [Orchestrator.Recover]) resumes it. Returned wrapped in a
	// *PendingError.
	ErrPending = errors.New("saga: outcome pending")
	// ErrRolledBack: a step failed permanently and the steps done before
	// it were compensated. Returned wrapped in a *RolledBackError, with
	// the Result; every retry of the key gets the same.
	ErrRolledBack = errors.New("saga: rolled back")
	// ErrNeedsReview: a compensation failed permanently; a human decides.
	// Returned wrapped in a *NeedsReviewError, with the Result; every
	// retry of the key gets the same.
	ErrNeedsReview = errors.New("saga: needs review")
	// ErrDefinitionChanged: the registered definition's steps are not
	// those the saga started with. Nothing was run; register the new steps
	// under a new name.
	ErrDefinitionChanged = errors.New("saga: definition changed under a running saga")
	// ErrNotFound: no saga with this scope and key. It matches
	// idempotency.ErrNotFound too.
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

// NeedsReviewError carries the reason a saga needs a human.
type NeedsReviewError struct{ Step, Reason string }

func (e *NeedsReviewError) Error() string {
	return fmt.Sprintf("%v: %s", ErrNeedsReview, e.Reason)
}

// Is reports ErrNeedsReview.
func (e *NeedsReviewError) Is(target error) bool { return target == ErrNeedsReview }

// ConfigError names a bad configuration or definition field.
type ConfigError struct{ Field, Reason string }

func (e *ConfigError) Error() string { return "saga: " + e.Field + ": " + e.Reason }

// Is reports idempotency.ErrInvalid: bad input or configuration, named.
func (e *ConfigError) Is(target error) bool { return target == idempotency.ErrInvalid }

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
)

func (c Class) String() string {
	switch c {
	case ClassTransient:
		return "transient"
	case ClassUnknown:
		return "unknown"
	case ClassPermanent:
		return "permanent"
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

// DefaultClassify is the default Config.Classify:
//   - permanent: errors made with [Fail]; payments' declines and invalid
//     requests (payments.ErrDeclined, payments.ErrInvalidRequest);
//   - unknown: errors made with [Unknown]; errors that say a retry with
//     the same key is safe (payments.SafeToRetry: the payment's outcome is
//     unknown, the provider or another call still holds the key, the
//     request was not sent); payments under review; deadlines exceeded
//     (the call may have arrived);
//   - transient: anything else.
//
// The markers win over what they wrap.
func DefaultClassify(err error) Class {
	var perm *permanentError
	var unk *unknownError
	switch {
	case errors.As(err, &perm):
		return ClassPermanent
	case errors.As(err, &unk):
		return ClassUnknown
	case errors.Is(err, payments.ErrDeclined), errors.Is(err, payments.ErrInvalidRequest):
		return ClassPermanent
	case payments.SafeToRetry(err), errors.Is(err, payments.ErrNeedsReview), errors.Is(err, context.DeadlineExceeded):
		return ClassUnknown
	}
	return ClassTransient
}
