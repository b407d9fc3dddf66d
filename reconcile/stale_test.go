package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/internal/crashpoint"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/reconcile"
)

// Issue #23, finding 1: a reconciler decision made on a lookup that a
// concurrent retry made stale. The first attempt got a 5xx before Stripe
// did anything; the reconciler's consistent List finds nothing; during
// that round trip the customer's retry re-sends the attempt, Stripe
// charges and the answer is lost again. Committing "no charge" then would
// leave the customer charged with the intent FAILED (or, with Redrive
// NewAttempt, reopened under attempt 1 and charged a second time).
//
// The reconciler holds the key from before its lookup until its proof is
// applied: the retry meanwhile is answered "in progress" and sends
// nothing. Charges and refunds, both Redrive modes.
func TestReconcilerHoldsTheKeyAcrossLookupAndApply(t *testing.T) {
	t.Parallel()
	for _, redrive := range []reconcile.Redrive{reconcile.FailWithProof, reconcile.NewAttempt} {
		for _, refund := range []bool{false, true} {
			t.Run(fmt.Sprintf("redrive=%d/refund=%v", redrive, refund), func(t *testing.T) {
				w := newIWorld(t, "stripe")
				w.recon = w.reconcilerWith(t, redrive)
				s := scenario{refund: refund, start: fault5xx, key: "stale", charge: "stale"}
				if refund {
					s.key = "stale-refund"
				}
				il := interleaving{s: s, a: actorReconcile, point: crashpoint.ReconcileBeforeApply, b: retry(faultLost)}
				bErr := w.playPaused(t, il)
				if !errors.Is(bErr, idempotency.ErrInProgress) {
					t.Fatalf("a retry while the reconciler looks the attempt up: %v, want in progress (nothing sent)", bErr)
				}
				if n := w.objects(s); n != 0 {
					t.Fatalf("%d provider objects after the retry during the lookup, want 0", n)
				}
				w.converge(t, context.Background(), il)
				w.check(t, il)
				// The reconciler's proof held (nothing was sent while it
				// looked): the attempt fails with it, or, reopened under
				// attempt 1 (a charge with NewAttempt), the next retry
				// charges once.
				want := payments.IntentFailed
				if redrive == reconcile.NewAttempt && !refund {
					want = payments.IntentSucceeded
				}
				if st := w.status(t, s); st != want {
					t.Fatalf("after the world converged: %s, want %s", st, want)
				}
			})
		}
	}
}

// The compare-and-set behind the hold: a reconciler paused past its lease,
// while a retry takes the key over, re-sends the attempt (Stripe charges,
// the answer is lost) and lets go, must not apply its stale "no charge"
// when it resumes: the attempt's send counter moved (payments.ErrChanged)
// and its lease is gone. The test waits for the lease's end on the
// database's clock, not for a duration.
func TestStaleProofIsRefusedAfterTheAttemptWasSentAgain(t *testing.T) {
	t.Parallel()
	for _, refund := range []bool{false, true} {
		t.Run(fmt.Sprintf("refund=%v", refund), func(t *testing.T) {
			w := newIWorldLease(t, "stripe", 2*time.Second)
			s := scenario{refund: refund, start: fault5xx, key: "cas", charge: "cas"}
			if refund {
				s.key = "cas-refund"
			}
			il := interleaving{s: s, a: actorReconcile, point: crashpoint.ReconcileBeforeApply, b: actor{name: "late-retry", fault: faultLost,
				run: func(ctx context.Context, w *iworld, s scenario) error {
					w.waitLeaseEnded(t, s)
					return retry(faultLost).run(ctx, w, s)
				}}}
			bErr := w.playPaused(t, il)
			if !payments.OutcomeUnknown(bErr) {
				t.Fatalf("the retry after the reconciler's lease ended: %v, want an unknown outcome (its answer was lost)", bErr)
			}
			if n := w.objects(s); n != 1 {
				t.Fatalf("%d provider objects after the late retry, want 1", n)
			}
			if st := w.status(t, s); st != payments.IntentUnknown {
				t.Fatalf("after the reconciler resumed with its stale lookup: %s, want UNKNOWN (changed, look again)", st)
			}
			w.converge(t, context.Background(), il)
			w.check(t, il)
		})
	}
}

func (w *iworld) reconcilerWith(t *testing.T, redrive reconcile.Redrive) *reconcile.Reconciler {
	t.Helper()
	r, err := reconcile.New(w.pool, w.client, &reconcile.Config{Grace: time.Millisecond, VoidAfter: time.Millisecond,
		ActionGrace: time.Millisecond, Schedule: []time.Duration{time.Millisecond}, MaxChecks: 6, Redrive: redrive})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// playPaused plays il (the interleaving driver's play), which must pause
// A at its point and end it without error; it returns B's error.
func (w *iworld) playPaused(t *testing.T, il interleaving) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := w.play(t, ctx, il)
	if !r.reached {
		t.Fatalf("%s: A finished (%v) without reaching %s", il, r.aErr, il.point)
	}
	if r.aErr != nil {
		t.Fatalf("%s: A: %v", il, r.aErr)
	}
	return r.bErr
}

// objects counts the provider objects of the scenario's action.
func (w *iworld) objects(s scenario) int {
	if s.refund {
		return w.fakes.Refunds(w.provider, s.composed())
	}
	return w.fakes.Charges(w.provider, s.composed())
}

// waitLeaseEnded waits until the key's lease has ended on the database's
// clock.
func (w *iworld) waitLeaseEnded(t *testing.T, s scenario) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		var ended bool
		err := w.pool.QueryRow(ctx, `SELECT locked_until <= now() FROM idempotency_store WHERE idempotency_key = $1 AND user_id = 'cus_i'`,
			s.composed()).Scan(&ended)
		if err != nil {
			t.Fatalf("lease: %v", err)
		}
		if ended {
			return
		}
		if _, err := w.pool.Exec(ctx, `SELECT pg_sleep(0.02)`); err != nil {
			t.Fatalf("lease: %v", err)
		}
	}
}
