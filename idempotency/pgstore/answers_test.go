package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
)

// Helpers for tests that run callers in goroutines and check their
// answers.

// answerWait bounds how long a test waits for an answer that must come:
// a failure detector, not a timing assumption.
const answerWait = time.Minute

// result is one caller's answer.
type result struct {
	claim idempotency.Claim
	err   error
}

func await[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(answerWait):
		t.Fatalf("%s: no answer", what)
		panic("unreachable")
	}
}

func outcomeOf(key string) idempotency.Completion {
	return idempotency.Completion{Status: idempotency.StatusCompleted,
		Response: idempotency.Response{Code: 201, Body: []byte(key)}, Retention: time.Hour}
}

func mustClaim(t *testing.T, store *pgstore.Store, key string) idempotency.Lease {
	t.Helper()
	c, err := store.Claim(context.Background(), params(t, key))
	if err != nil || c.State != idempotency.ClaimAcquired {
		t.Fatalf("claim %s: %v %v", key, c.State, err)
	}
	return c.Lease
}
