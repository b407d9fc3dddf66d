package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/memstore"
)

// answer is an error of another package that answers for itself.
type answer bool

func (a answer) Error() string     { return fmt.Sprintf("answers %v", bool(a)) }
func (a answer) SafeToRetry() bool { return bool(a) }

// SafeToRetry asks the first error in the chain that answers, through
// wrapping and joining, as errors.As walks it.
func TestSafeToRetryWalksTheChain(t *testing.T) {
	t.Parallel()
	inProgress := &idempotency.InProgressError{}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"a plain error", errors.New("boom"), false},
		{"a context error", context.DeadlineExceeded, false},
		{"an answer of true", answer(true), true},
		{"an answer of false", answer(false), false},
		{"wrapped once", fmt.Errorf("charge: %w", inProgress), true},
		{"wrapped twice", fmt.Errorf("order: %w", fmt.Errorf("charge: %w", inProgress)), true},
		{"wrapped in a plain wrapper of several", fmt.Errorf("%w; %w", errors.New("boom"), inProgress), true},
		{"a sentinel wrapped", fmt.Errorf("charge: %w", idempotency.ErrInProgress), true},
		{"joined after an error without an answer", errors.Join(errors.New("boom"), inProgress), true},
		{"joined: the first answer wins (true)", errors.Join(answer(true), answer(false)), true},
		{"joined: the first answer wins (false)", errors.Join(answer(false), inProgress), false},
		{"joined inside a wrap", fmt.Errorf("batch: %w", errors.Join(context.Canceled, inProgress)), true},
		{"the outer answer wins over what it wraps", fmt.Errorf("%w: %w", idempotency.ErrFingerprintMismatch, inProgress), false},
		{"a stored failure wrapping a safe error", &idempotency.FailedError{Err: answer(true)}, false},
		{"a permanent marker defers to its error", idempotency.Permanent(answer(false), idempotency.Response{}), false},
		{"an abandon defers to its reason", idempotency.Abandon(inProgress), true},
	} {
		if got := idempotency.SafeToRetry(tc.err); got != tc.want {
			t.Errorf("%s: SafeToRetry(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// Every exported error of the package answers, sentinels included.
func TestSafeToRetryAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{idempotency.ErrInProgress, true},
		{&idempotency.InProgressError{}, true},
		{idempotency.ErrFingerprintMismatch, false},
		{idempotency.ErrExpired, false},
		{idempotency.ErrLeaseLost, false},
		{&idempotency.LeaseExpiredError{LastErr: answer(true)}, false},
		{idempotency.ErrForeignKey, false},
		{idempotency.ErrNotFound, false},
		{idempotency.ErrFailed, false},
		{&idempotency.FailedError{Replayed: true}, false},
		{idempotency.ErrInvalid, false},
		{&idempotency.InvalidError{Field: "Key", Reason: "empty"}, false},
		{idempotency.ErrStoreFull, false},
		{idempotency.ErrUndecryptable, false},
	} {
		var r interface{ SafeToRetry() bool }
		if !errors.As(tc.err, &r) {
			t.Errorf("%T %v does not answer SafeToRetry", tc.err, tc.err)
		}
		if got := idempotency.SafeToRetry(tc.err); got != tc.want {
			t.Errorf("SafeToRetry(%T %v) = %v, want %v", tc.err, tc.err, got, tc.want)
		}
	}
}

// A nil store, untyped or a nil pointer in the interface, is refused at
// construction naming the store, not met as a panic on the first request.
func TestNilStoreRefused(t *testing.T) {
	t.Parallel()
	for name, store := range map[string]idempotency.Store{"untyped nil": nil, "nil *memstore.Store": (*memstore.Store)(nil)} {
		var ie *idempotency.InvalidError
		if _, err := idempotency.New(store, nil); !errors.As(err, &ie) || ie.Field != "store" {
			t.Errorf("New(%s): %v, want an InvalidError on store", name, err)
		}
		if _, err := idempotency.NewPruner(store, nil); !errors.As(err, &ie) || ie.Field != "store" {
			t.Errorf("NewPruner(%s): %v, want an InvalidError on store", name, err)
		}
	}
}
