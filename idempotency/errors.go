package idempotency

import (
	"errors"
	"fmt"
	"time"
)

// SafeToRetry reports whether retrying the call with the same key cannot
// do harm and may succeed: another request holds the key, the request was
// not sent, the outcome is unknown (the retry re-sends the same
// references, which the provider deduplicates), a saga is pending. Each
// error answers for itself with a method SafeToRetry() bool, the
// sentinels too; SafeToRetry asks the first error in err's chain that
// answers, in the order of [errors.As] (wrapped errors, then each error
// of a join, depth first). An error without an answer in its chain
// (nil, a plain error, a context error) is not safe to retry: false.
//
// Final answers (a decline, an invalid request, a payment under review, a
// fingerprint mismatch) and answers that need a fix first (refused
// credentials, bad input) are false.
func SafeToRetry(err error) bool {
	var r interface{ SafeToRetry() bool }
	return errors.As(err, &r) && r.SafeToRetry()
}

// sentinel is a sentinel error that answers SafeToRetry for itself.
type sentinel struct {
	text string
	safe bool
}

func newSentinel(text string, safeToRetry bool) error {
	return &sentinel{text: text, safe: safeToRetry}
}

func (s *sentinel) Error() string { return s.text }

// SafeToRetry reports what the sentinel stands for.
func (s *sentinel) SafeToRetry() bool { return s.safe }

var (
	// ErrInProgress: another request with the same key holds the lease.
	// Returned wrapped in an *InProgressError.
	ErrInProgress = newSentinel("idempotency: a request with this key is still in progress", true)
	// ErrFingerprintMismatch: the key was used before with different
	// significant fields. Nothing was changed. The error never reveals the
	// stored fingerprint or the original request.
	ErrFingerprintMismatch = newSentinel("idempotency: key reused with different request parameters", false)
	// ErrExpired: the key's record expired and the policy refuses it.
	ErrExpired = newSentinel("idempotency: key expired", false)
	// ErrLeaseLost: the caller's lease is no longer the record's current
	// one (the key was reclaimed by another processor); nothing was changed.
	ErrLeaseLost = newSentinel("idempotency: lease lost to another processor", false)
	// ErrForeignKey: the key belongs to another scope (see
	// ClaimParams.RefuseForeign). Nothing was changed; tell the caller
	// "not found", never whose it is.
	ErrForeignKey = newSentinel("idempotency: no such key in this scope", false)
	// ErrNotFound: no record for this scope and key.
	ErrNotFound = newSentinel("idempotency: record not found", false)
	// ErrFailed: the key's stored outcome is a permanent failure. Returned
	// wrapped in a *FailedError.
	ErrFailed = newSentinel("idempotency: stored outcome is a permanent failure", false)
	// ErrInvalid: bad input (a malformed key, an empty scope, a bad
	// fingerprint or configuration). Returned wrapped in an *InvalidError
	// naming the field.
	ErrInvalid = newSentinel("idempotency: invalid input", false)
	// ErrStoreFull: a bounded store holds as many live records as it may.
	ErrStoreFull = newSentinel("idempotency: store full", false)
)

// InProgressError is returned while another holder's lease is live.
type InProgressError struct {
	// RetryAfter is the time left on the live lease.
	RetryAfter time.Duration
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", ErrInProgress, e.RetryAfter.Round(time.Millisecond))
}

// Is reports ErrInProgress.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// SafeToRetry reports true: retry with the same key once the lease ends
// (RetryAfter); the retry replays the outcome or takes the key over.
func (e *InProgressError) SafeToRetry() bool { return true }

// FailedError carries a stored permanent failure: on the first execution
// it wraps the action's own error; on replays Err is nil and Response is
// what was stored.
type FailedError struct {
	Response Response
	Replayed bool
	Err      error
}

func (e *FailedError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%v: %v", ErrFailed, e.Err)
	}
	return fmt.Sprintf("%v (replayed, status %d)", ErrFailed, e.Response.Code)
}

// SafeToRetry reports false: every retry of the key gets the same
// stored failure back.
func (e *FailedError) SafeToRetry() bool { return false }

// Is reports ErrFailed.
func (e *FailedError) Is(target error) bool { return target == ErrFailed }

// Unwrap returns the action's error (nil on replays).
func (e *FailedError) Unwrap() error { return e.Err }

// InvalidError names the bad input and why it is bad.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("idempotency: invalid %s: %s", e.Field, e.Reason)
}

// Is reports ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// SafeToRetry reports false: the same input gets the same refusal; fix
// the field first.
func (e *InvalidError) SafeToRetry() bool { return false }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// PermanentError marks an action's error as permanent: Do stores the
// outcome as FAILED with Response, and every retry of the key gets that
// response back. Any other error of an action is transient: the lease is
// released, the record kept, and a retry re-runs the action.
type PermanentError struct {
	Response Response
	Err      error
}

// Permanent marks err as a permanent failure whose replayed answer is resp.
func Permanent(err error, resp Response) error {
	return &PermanentError{Response: resp, Err: err}
}

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *PermanentError) Unwrap() error { return e.Err }

// AbandonError marks an action's refusal to proceed: Do deletes the claim
// (or, with a store that cannot, releases it) and returns Err.
type AbandonError struct{ Err error }

// Abandon makes Do take the claim back and return err: the request leaves
// no record, as if it had never come.
func Abandon(err error) error { return &AbandonError{Err: err} }

func (e *AbandonError) Error() string { return e.Err.Error() }

// Unwrap returns the reason.
func (e *AbandonError) Unwrap() error { return e.Err }
