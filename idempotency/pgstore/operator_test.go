package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
)

// claimFor claims (scope, key) with a lease of lock and fails the test
// unless it was acquired.
func claimFor(t *testing.T, b bundle, scope, key string, lock time.Duration) idempotency.Lease {
	t.Helper()
	c, err := b.store.Claim(context.Background(), idempotency.ClaimParams{Scope: scope, Key: key,
		Fingerprint: mustFP(t, key), LockTimeout: lock, Retention: 24 * time.Hour})
	if err != nil || c.State != idempotency.ClaimAcquired {
		t.Fatalf("claim %s: %v, %v", key, c.State, err)
	}
	return c.Lease
}

// completeFor completes l's record COMPLETED, answering 200, kept for
// retention, and fails the test unless it could.
func completeFor(t *testing.T, b bundle, l idempotency.Lease, retention time.Duration) {
	t.Helper()
	if err := b.store.Complete(context.Background(), l, idempotency.Completion{Status: idempotency.StatusCompleted,
		Response: idempotency.Response{Code: 200}, Retention: retention}); err != nil {
		t.Fatal(err)
	}
}

func TestStuckListsEndedLeasesLongestFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const scope = "usr_ops"
	older := claimFor(t, b, scope, scope+"_charge_older", time.Minute)
	advance(b.pool)(t, 3*time.Minute) // older's lease ended 2 minutes ago
	newer := claimFor(t, b, scope, scope+"_charge_newer", time.Minute)
	advance(b.pool)(t, 2*time.Minute) // newer's ended 1 minute ago, older's 4
	claimFor(t, b, scope, scope+"_charge_live", time.Hour)
	done := claimFor(t, b, scope, scope+"_charge_done", time.Minute)
	completeFor(t, b, done, time.Hour)

	res, err := b.store.Stuck(ctx, pgstore.StuckParams{OlderThan: 30 * time.Second, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total != 2 || len(res.Records) != 2 || res.Records[0].Key != older.Key || res.Records[1].Key != newer.Key {
		t.Fatalf("stuck: %+v, want %s then %s", res, older.Key, newer.Key)
	}
	r := res.Records[0]
	if r.Scope != scope || r.Status != idempotency.StatusProcessing || r.LockVersion != older.Version || r.LockedUntil == nil ||
		r.Live() || r.DatabaseNow.Sub(*r.LockedUntil) < 2*time.Minute || !r.DatabaseNow.Equal(res.DatabaseNow) {
		t.Fatalf("stuck record: %+v", r)
	}

	res, err = b.store.Stuck(ctx, pgstore.StuckParams{OlderThan: 30 * time.Second, Limit: 1})
	if err != nil || res.Total != 2 || len(res.Records) != 1 || res.Records[0].Key != older.Key {
		t.Fatalf("stuck, limit 1: %+v, %v", res, err)
	}
	res, err = b.store.Stuck(ctx, pgstore.StuckParams{OlderThan: time.Hour, Limit: 10})
	if err != nil || res.Total != 0 || len(res.Records) != 0 || res.DatabaseNow.IsZero() {
		t.Fatalf("stuck an hour: %+v, %v; want none, with the database clock", res, err)
	}
	for _, p := range []pgstore.StuckParams{{OlderThan: -time.Second, Limit: 1}, {Limit: 0}} {
		var invalid *idempotency.InvalidError
		if _, err := b.store.Stuck(ctx, p); !errors.As(err, &invalid) {
			t.Errorf("Stuck(%+v): %v, want an InvalidError", p, err)
		}
	}
}

func TestLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	l := claimFor(t, b, "usr_ops", "usr_ops_charge_1", time.Hour)
	got, err := b.store.Lease(ctx, l.Scope, l.Key)
	if err != nil || got.Status != idempotency.StatusProcessing || got.LockVersion != l.Version || !got.Live() ||
		got.Scope != l.Scope || got.Key != l.Key {
		t.Fatalf("lease: %+v, %v", got, err)
	}
	completeFor(t, b, l, time.Hour)
	if got, err := b.store.Lease(ctx, l.Scope, l.Key); err != nil || got.Status != idempotency.StatusCompleted ||
		got.LockedUntil != nil || got.Live() {
		t.Fatalf("lease of a completed record: %+v, %v", got, err)
	}
	if _, err := b.store.Lease(ctx, l.Scope, "usr_ops_charge_none"); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("lease of no record: %v", err)
	}
}

// A release by hand is fenced by the lock version shown, refuses a live
// lease unless forced, keeps an ended lease's end, and commits with its
// audit or not at all.
func TestReleaseStuck(t *testing.T) {
	t.Parallel()
	b, ctx, scope := setup(t), context.Background(), "usr_ops"
	noAudit := func(context.Context, pgx.Tx, pgstore.ReleaseStuckResult) error { return nil }

	ended := claimFor(t, b, scope, scope+"_charge_ended", time.Minute)
	advance(b.pool)(t, 2*time.Minute)
	before, err := b.store.Lease(ctx, scope, ended.Key)
	if err != nil {
		t.Fatal(err)
	}
	var audited bool
	res, err := b.store.ReleaseStuck(ctx, pgstore.ReleaseStuckParams{Scope: scope, Key: ended.Key, LockVersion: ended.Version},
		func(ctx context.Context, tx pgx.Tx, r pgstore.ReleaseStuckResult) error {
			audited = r.LockedUntil != nil && r.LockedUntil.Equal(*before.LockedUntil)
			return nil
		})
	if err != nil || !audited || res.LockedUntil == nil || !res.LockedUntil.Equal(*before.LockedUntil) {
		t.Fatalf("release of an ended lease: %+v, %v (audited %v); want its end kept", res, err, audited)
	}

	live := claimFor(t, b, scope, scope+"_charge_live", time.Hour)
	p := pgstore.ReleaseStuckParams{Scope: scope, Key: live.Key, LockVersion: live.Version}
	if _, err := b.store.ReleaseStuck(ctx, p, noAudit); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("release of a live lease: %v, want ErrLeaseLost", err)
	}
	boom := errors.New("audit failed")
	p.Force = true
	if _, err := b.store.ReleaseStuck(ctx, p, func(context.Context, pgx.Tx, pgstore.ReleaseStuckResult) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("release with a failing audit: %v", err)
	}
	if l, err := b.store.Lease(ctx, scope, live.Key); err != nil || !l.Live() {
		t.Fatalf("a release whose audit failed ended the lease: %+v, %v", l, err)
	}
	if res, err := b.store.ReleaseStuck(ctx, p, nil); err != nil || res.LockedUntil == nil {
		t.Fatalf("forced release: %+v, %v", res, err)
	}
	if l, err := b.store.Lease(ctx, scope, live.Key); err != nil || l.Live() || l.Status != idempotency.StatusProcessing {
		t.Fatalf("after a forced release: %+v, %v", l, err)
	}

	// A retry reclaims the record: the lock version shown no longer
	// matches, and the new holder keeps its lease.
	c, err := b.store.Claim(ctx, idempotency.ClaimParams{Scope: scope, Key: live.Key, Fingerprint: mustFP(t, live.Key),
		LockTimeout: time.Hour, Retention: 24 * time.Hour})
	if err != nil || c.State != idempotency.ClaimReclaimed {
		t.Fatalf("reclaim: %+v, %v", c, err)
	}
	if _, err := b.store.ReleaseStuck(ctx, p, noAudit); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("release under a stale lock version: %v, want ErrLeaseLost", err)
	}
	if err := b.store.Heartbeat(ctx, c.Lease, time.Hour); err != nil {
		t.Fatalf("the new holder lost its lease: %v", err)
	}
}

func TestCountExpired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, key := range []string{"usr_ops_charge_1", "usr_ops_charge_2"} {
		l := claimFor(t, b, "usr_ops", key, time.Minute)
		completeFor(t, b, l, time.Minute)
	}
	claimFor(t, b, "usr_ops", "usr_ops_charge_3", time.Minute) // PROCESSING: never pruned
	if n, err := b.store.CountExpired(ctx); err != nil || n != 0 {
		t.Fatalf("before expiry: %d, %v", n, err)
	}
	advance(b.pool)(t, 2*time.Hour)
	if n, err := b.store.CountExpired(ctx); err != nil || n != 2 {
		t.Fatalf("after expiry: %d, %v; want 2", n, err)
	}
}

func TestLeasesReadsTheNamedRecords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	live := claimFor(t, b, "usr_ops", "usr_ops_saga_live", time.Hour)
	ended := claimFor(t, b, "usr_ops", "usr_ops_saga_ended", time.Minute)
	advance(b.pool)(t, 2*time.Minute)
	other := claimFor(t, b, "usr_other", "usr_ops_saga_live", time.Hour) // same key, other scope
	got, err := b.store.Leases(ctx, []pgstore.RecordRef{{Scope: live.Scope, Key: live.Key}, {Scope: ended.Scope, Key: ended.Key},
		{Scope: "usr_ops", Key: "usr_ops_saga_none"}, {Scope: "usr_nobody", Key: live.Key}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("leases: %+v, want the two existing records of usr_ops only", got)
	}
	if l := got[pgstore.RecordRef{Scope: live.Scope, Key: live.Key}]; !l.Live() || l.LockVersion != live.Version || l.Status != idempotency.StatusProcessing {
		t.Errorf("live lease: %+v", l)
	}
	if l := got[pgstore.RecordRef{Scope: ended.Scope, Key: ended.Key}]; l.Live() || l.LockVersion != ended.Version || l.Key != ended.Key {
		t.Errorf("ended lease: %+v", l)
	}
	if _, ok := got[pgstore.RecordRef{Scope: other.Scope, Key: other.Key}]; ok {
		t.Errorf("a record not asked for was returned")
	}
	if got, err := b.store.Leases(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("no refs: %+v, %v", got, err)
	}
}

// A fence holds the record against a reclaim until its transaction ends,
// and refuses a holder whose record was reclaimed.
func TestFenceTxHoldsTheLeaseUntilCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	l := claimFor(t, b, "usr_ops", "usr_ops_saga_fence", time.Minute)
	advance(b.pool)(t, 2*time.Minute) // the lease ended; no retry yet

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := b.store.FenceTx(ctx, tx, l); err != nil {
		t.Fatalf("fence of the holder: %v", err)
	}
	reclaimed := make(chan idempotency.Claim, 1)
	go func() {
		c, err := b.store.Claim(ctx, idempotency.ClaimParams{Scope: l.Scope, Key: l.Key, Fingerprint: mustFP(t, l.Key),
			LockTimeout: time.Minute, Retention: 24 * time.Hour})
		if err != nil {
			t.Errorf("reclaim: %v", err)
		}
		reclaimed <- c
	}()
	select {
	case c := <-reclaimed:
		t.Fatalf("a retry reclaimed the record while its holder's fence was held: %+v", c)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	c := <-reclaimed
	if c.State != idempotency.ClaimReclaimed || c.Lease.Version <= l.Version {
		t.Fatalf("reclaim after the fence's commit: %+v", c)
	}

	tx2, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx2.Rollback(ctx) }()
	if err := b.store.FenceTx(ctx, tx2, l); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("fence of the old holder after a reclaim: %v, want ErrLeaseLost", err)
	}
}
