package idempotencytest

import (
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// Harness is one fresh, empty store for one check.
type Harness struct {
	Store idempotency.Store
	// Advance makes d pass for every record of the store, as the store's
	// clock sees it: memstore moves its clock; pgstore shifts the records'
	// timestamps back by d (the database clock cannot be moved).
	Advance func(t testing.TB, d time.Duration)
	// ReplayCache runs every check's executor with an
	// [idempotency.ReplayCache] whose clock Advance moves with the
	// store's: the cache must change no answer.
	ReplayCache bool
}

// check is one promise of the store, kept on a fresh harness.
type check struct {
	name string
	fn   func(t *testing.T, h Harness)
}

// Exercise runs every check, each on a fresh harness, in parallel, as
// sub-tests named group/check: Claim, Replay, Outcome, Lease, Expiry,
// Scope and Input.
func Exercise(t *testing.T, newHarness func(t *testing.T) Harness) {
	groups := []struct {
		name   string
		checks []check
	}{
		{"Claim", claimChecks},
		{"Replay", replayChecks},
		{"Outcome", outcomeChecks},
		{"Lease", leaseChecks},
		{"Expiry", expiryChecks},
		{"Scope", scopeChecks},
		{"Input", inputChecks},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range g.checks {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.fn(t, newHarness(t))
				})
			}
		})
	}
}
