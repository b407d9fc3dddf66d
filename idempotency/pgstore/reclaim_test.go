package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
)

var strategies = map[string]pgstore.ClaimStrategy{
	"Adaptive": pgstore.ClaimAdaptive, "OneStatement": pgstore.ClaimOneStatement, "ReadFirst": pgstore.ClaimReadFirst,
}

// A PROCESSING record whose lease end was set to NULL by hand (an
// operator's UPDATE: nothing in payonce writes it) has no live lease: the
// operator's listing shows it stuck, and the next claim reclaims it under
// the next lock version, by every strategy and inside a transaction, and
// the old holder is fenced off.
func TestClaimReclaimsRecordWithoutLeaseEnd(t *testing.T) {
	t.Parallel()
	for name, strategy := range strategies {
		for _, inTx := range []bool{false, true} {
			sub := name
			if inTx {
				sub += "Tx"
			}
			t.Run(sub, func(t *testing.T) {
				t.Parallel()
				b := setupWith(t, &pgstore.Config{ClaimStrategy: strategy})
				ctx := context.Background()
				p := params(t, "hand-released")
				first := mustClaim(t, b.store, p.Key)
				tag, err := b.pool.Exec(ctx, `UPDATE idempotency_store SET locked_until = NULL
					WHERE user_id = $1 AND idempotency_key = $2 AND status = 'PROCESSING'`, p.Scope, p.Key)
				if err != nil || tag.RowsAffected() != 1 {
					t.Fatalf("the operator's UPDATE: %v %v", tag, err)
				}
				stuck, err := b.store.Stuck(ctx, pgstore.StuckParams{Limit: 10})
				if err != nil || len(stuck.Records) != 1 || stuck.Records[0].LockedUntil != nil || stuck.Records[0].Live() {
					t.Fatalf("stuck: %+v %v, want the record without a lease end", stuck, err)
				}

				var next idempotency.Claim
				if inTx {
					err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
						next, err = b.store.ClaimTx(ctx, tx, p)
						return err
					})
				} else {
					next, err = b.store.Claim(ctx, p)
				}
				if err != nil || next.State != idempotency.ClaimReclaimed || next.Lease.Version != first.Version+1 {
					t.Fatalf("the next claim: %v %+v %v, want reclaimed at version %d", next.State, next.Lease, err, first.Version+1)
				}
				if err := b.store.Complete(ctx, first, outcomeOf(p.Key)); !errors.Is(err, idempotency.ErrLeaseLost) {
					t.Fatalf("the old holder's completion: %v, want ErrLeaseLost", err)
				}
				rec, err := b.store.Get(ctx, p.Scope, p.Key)
				if err != nil || rec.Status != idempotency.StatusProcessing || rec.LockVersion != next.Lease.Version || rec.LockedUntil.IsZero() {
					t.Fatalf("record: %+v %v, want PROCESSING under the new lease", rec, err)
				}
			})
		}
	}
}

// ABA across a stall. A contender reads an orphaned record at version v
// and stalls before its compare-and-swap; meanwhile the record is
// reclaimed, completed, expires, is renewed with another fingerprint and
// is orphaned again: PROCESSING, lease ended, as the contender saw it, but
// at version v+2 and for another request. The contender's swap must fail
// on the version, and the contender must then see the new request's
// record for what it is (another fingerprint), not take it over.
//
// The stall is a transaction that locks the row before the contender
// reads it (a plain read, which the lock does not stop): the contender's
// swap waits for the row; the transaction then goes through the whole
// cycle with the store's own statements and commits.
func TestReclaimFailsOnStaleVersion(t *testing.T) {
	t.Parallel()
	for name, strategy := range strategies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupWith(t, &pgstore.Config{ClaimStrategy: strategy})
			ctx := context.Background()
			p := params(t, "aba")
			other := p
			other.Fingerprint = mustFP(t, "aba", "another request")
			first := mustClaim(t, b.store, p.Key)
			advance(b.pool)(t, 2*p.LockTimeout) // its holder crashed

			tx, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `SELECT 1 FROM idempotency_store WHERE idempotency_key = $1 FOR UPDATE`, p.Key); err != nil {
				t.Fatal(err)
			}
			stale := make(chan result, 1)
			go func() {
				c, err := b.store.Claim(ctx, p)
				stale <- result{c, err}
			}()
			waitForLockWait(t, b.pool, tx)

			// While the contender waits: reclaimed, completed, expired,
			// renewed with another fingerprint, orphaned again.
			shift := func(sql string) {
				t.Helper()
				if _, err := tx.Exec(ctx, sql, p.Key); err != nil {
					t.Fatal(err)
				}
			}
			reclaimed, err := b.store.ClaimTx(ctx, tx, p)
			if err != nil || reclaimed.State != idempotency.ClaimReclaimed || reclaimed.Lease.Version != first.Version+1 {
				t.Fatalf("reclaim: %v %+v %v", reclaimed.State, reclaimed.Lease, err)
			}
			if err := b.store.CompleteTx(ctx, tx, reclaimed.Lease, outcomeOf(p.Key)); err != nil {
				t.Fatal(err)
			}
			shift(`UPDATE idempotency_store SET expires_at = now() - interval '1 second' WHERE idempotency_key = $1`)
			renewed, err := b.store.ClaimTx(ctx, tx, other)
			if err != nil || renewed.State != idempotency.ClaimAcquired || renewed.Lease.Version != first.Version+2 {
				t.Fatalf("renewal with another fingerprint: %v %+v %v", renewed.State, renewed.Lease, err)
			}
			shift(`UPDATE idempotency_store SET locked_until = now() - interval '1 second' WHERE idempotency_key = $1`)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}

			r := await(t, "the stalled contender", stale)
			if r.err != nil || r.claim.State != idempotency.ClaimMismatch {
				t.Fatalf("the stalled contender: %v %+v %v, want a fingerprint mismatch (the record is another request's)",
					r.claim.State, r.claim.Lease, r.err)
			}
			rec, err := b.store.Get(ctx, p.Scope, p.Key)
			if err != nil || rec.Status != idempotency.StatusProcessing || rec.LockVersion != renewed.Lease.Version ||
				!rec.Fingerprint.Equal(other.Fingerprint) {
				t.Fatalf("record: %s at version %d (%v), want the renewal's, PROCESSING at %d", rec.Status, rec.LockVersion, err, renewed.Lease.Version)
			}
		})
	}
}
