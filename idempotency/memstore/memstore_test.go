package memstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/payonce/payonce/idempotency"
)

const (
	testScope   = "usr_7fQ9x"
	lockTimeout = 30 * time.Second
	retention   = 24 * time.Hour
)

// fakeClock is a clock that only moves when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type bundle struct {
	ctx   context.Context
	clock *fakeClock
	store *Store
}

// setup returns a store on a fake clock. cfg may be nil; its Clock is
// replaced by the fake one.
func setup(t *testing.T, cfg *Config) *bundle {
	t.Helper()
	clock := &fakeClock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Clock = clock.Now
	b := &bundle{ctx: context.Background(), clock: clock, store: New(&c)}
	t.Cleanup(func() { checkInvariants(t, b.store) })
	return b
}

func fingerprint(t *testing.T, amount string) idempotency.Fingerprint {
	t.Helper()
	fp, err := idempotency.NewFingerprint().Decimal("amount", amount).String("currency", "EUR").Sum()
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

func params(t *testing.T, key string) idempotency.ClaimParams {
	return idempotency.ClaimParams{
		Scope:       testScope,
		Key:         testScope + "_charge_" + key,
		Fingerprint: fingerprint(t, "49.99"),
		LockTimeout: lockTimeout,
		Retention:   retention,
	}
}

// setupHeld is setup with the key k1 claimed: the bundle, k1's params and
// the claim.
func setupHeld(t *testing.T) (*bundle, idempotency.ClaimParams, idempotency.Claim) {
	t.Helper()
	b := setup(t, nil)
	p := params(t, "k1")
	return b, p, b.claim(t, p, idempotency.ClaimAcquired)
}

func (b *bundle) claim(t *testing.T, p idempotency.ClaimParams, want idempotency.ClaimState) idempotency.Claim {
	t.Helper()
	c, err := b.store.Claim(b.ctx, p)
	if err != nil {
		t.Fatalf("Claim(%s): %v", p.Key, err)
	}
	if c.State != want {
		t.Fatalf("Claim(%s) = %s, want %s", p.Key, c.State, want)
	}
	return c
}

func (b *bundle) get(t *testing.T, p idempotency.ClaimParams) idempotency.Record {
	t.Helper()
	r, err := b.store.Get(b.ctx, p.Scope, p.Key)
	if err != nil {
		t.Fatalf("Get(%s): %v", p.Key, err)
	}
	return r
}

func (b *bundle) complete(t *testing.T, l idempotency.Lease, status idempotency.Status, resp idempotency.Response) {
	t.Helper()
	if err := b.store.Complete(b.ctx, l, idempotency.Completion{Status: status, Response: resp, Retention: retention}); err != nil {
		t.Fatalf("Complete(%+v): %v", l, err)
	}
}

// wantFenced stops the test unless l can no longer complete, release or
// extend its record: each answers ErrLeaseLost.
func (b *bundle) wantFenced(t *testing.T, l idempotency.Lease) {
	t.Helper()
	wantErr(t, b.store.Complete(b.ctx, l, idempotency.Completion{Status: idempotency.StatusCompleted, Retention: retention}), idempotency.ErrLeaseLost)
	wantErr(t, b.store.Release(b.ctx, l), idempotency.ErrLeaseLost)
	wantErr(t, b.store.Heartbeat(b.ctx, l, time.Hour), idempotency.ErrLeaseLost)
}

// claimedRecord is the record that a claim of p acquiring its key at now
// makes, under lock version version.
func claimedRecord(p idempotency.ClaimParams, version int64, now time.Time) idempotency.Record {
	return idempotency.Record{
		Scope: p.Scope, Key: p.Key, Fingerprint: p.Fingerprint,
		Status:      idempotency.StatusProcessing,
		LockVersion: version,
		LockedUntil: now.Add(lockTimeout),
		CreatedAt:   now,
		ExpiresAt:   now.Add(retention),
	}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err = %v, want %v", err, target)
	}
}

func wantEqual[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s = %+v, want %+v", what, got, want)
	}
}

// checkInvariants checks the store's internal consistency: the expiry
// heap holds exactly the finished records, in heap order, with their slots.
func checkInvariants(t interface {
	Helper()
	Errorf(format string, args ...any)
}, s *Store) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	finished := 0
	for id, e := range s.records {
		if id != (recordID{e.rec.Scope, e.rec.Key}) {
			t.Errorf("record %v filed under %v", e.rec.Key, id)
		}
		switch e.rec.Status {
		case idempotency.StatusProcessing:
			if e.slot != -1 || e.rec.Response != nil || e.rec.LockedUntil.IsZero() || !e.rec.RefuseUntil.IsZero() {
				t.Errorf("PROCESSING %s: slot %d, response %v, locked until %v", e.rec.Key, e.slot, e.rec.Response, e.rec.LockedUntil)
			}
		case idempotency.StatusCompleted, idempotency.StatusFailed:
			finished++
			if e.slot < 0 || e.slot >= len(s.expiry) || s.expiry[e.slot] != e {
				t.Errorf("%s %s: slot %d not in the expiry heap", e.rec.Status, e.rec.Key, e.slot)
			}
			// A tombstone, and only a tombstone, has lost its response;
			// it refuses its key until its refusal horizon's end.
			tomb := !e.rec.RefuseUntil.IsZero()
			if (e.rec.Response == nil) != tomb || !e.rec.LockedUntil.IsZero() {
				t.Errorf("%s %s: response %v, locked until %v, refuse until %v", e.rec.Status, e.rec.Key, e.rec.Response, e.rec.LockedUntil, e.rec.RefuseUntil)
			}
			if tomb && (e.refuseFor <= 0 || !e.rec.RefuseUntil.Equal(e.rec.ExpiresAt.Add(e.refuseFor))) {
				t.Errorf("tombstone %s: refuse until %v, expires %v, horizon %v", e.rec.Key, e.rec.RefuseUntil, e.rec.ExpiresAt, e.refuseFor)
			}
		default:
			t.Errorf("%s: status %q", e.rec.Key, e.rec.Status)
		}
	}
	if finished != len(s.expiry) {
		t.Errorf("expiry heap holds %d entries, %d records are finished", len(s.expiry), finished)
	}
	for i := 1; i < len(s.expiry); i++ {
		if s.expiry.Less(i, (i-1)/2) {
			t.Errorf("expiry heap out of order at %d", i)
		}
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	s := New(nil)
	if s.maxRecords != 0 || s.evictAfter != DefaultEvictAfter || s.clock == nil {
		t.Fatalf("New(nil) = max %d, evictAfter %s, clock %v", s.maxRecords, s.evictAfter, s.clock != nil)
	}
	c, err := s.Claim(context.Background(), params(t, "k1"))
	if err != nil || c.State != idempotency.ClaimAcquired {
		t.Fatalf("Claim = %v, %v", c.State, err)
	}
	r, err := s.Get(context.Background(), testScope, c.Lease.Key)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(r.CreatedAt); d < 0 || d > time.Minute {
		t.Fatalf("CreatedAt %v is not now by time.Now", r.CreatedAt)
	}
}

func TestNewNegativeMaxRecordsPanics(t *testing.T) {
	t.Parallel()
	defer func() {
		var ie *idempotency.InvalidError
		if err, _ := recover().(error); !errors.As(err, &ie) || ie.Field != "MaxRecords" {
			t.Fatalf("recover() = %v, want an InvalidError naming MaxRecords", err)
		}
	}()
	New(&Config{MaxRecords: -1})
}

func TestClaimNewKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := params(t, "k1")
	now := b.clock.Now()

	c := b.claim(t, p, idempotency.ClaimAcquired)
	wantEqual(t, "lease", c.Lease, idempotency.Lease{Scope: p.Scope, Key: p.Key, Version: 0})
	wantEqual(t, "record", b.get(t, p), claimedRecord(p, 0, now))
}

func TestClaimInProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := params(t, "k1")
	b.claim(t, p, idempotency.ClaimAcquired)
	b.clock.Advance(10 * time.Second)

	c := b.claim(t, p, idempotency.ClaimInProgress)
	wantEqual(t, "RetryAfter", c.RetryAfter, lockTimeout-10*time.Second)
	wantEqual(t, "Record.Status", c.Record.Status, idempotency.StatusProcessing)
	wantEqual(t, "Lease", c.Lease, idempotency.Lease{})

	// One tick before the lease ends it is still live.
	b.clock.Advance(lockTimeout - 10*time.Second - time.Nanosecond)
	c = b.claim(t, p, idempotency.ClaimInProgress)
	wantEqual(t, "RetryAfter", c.RetryAfter, time.Nanosecond)
}

func TestCompleteThenReplay(t *testing.T) {
	t.Parallel()
	for _, status := range []idempotency.Status{idempotency.StatusCompleted, idempotency.StatusFailed} {
		t.Run(string(status), func(t *testing.T) {
			t.Parallel()
			b, p, c := setupHeld(t)
			b.clock.Advance(time.Second)
			completedAt := b.clock.Now()

			resp := idempotency.Response{
				Code:   201,
				Header: http.Header{"Content-Type": {"application/json"}},
				Body:   []byte(`{"id": 1,  "amount":"49.99"}`),
			}
			b.complete(t, c.Lease, status, resp)
			// The caller's response is copied: changing it afterwards
			// changes nothing stored.
			resp.Header.Set("Content-Type", "text/plain")
			resp.Body[0] = 'X'

			want := idempotency.Response{
				Code:   201,
				Header: http.Header{"Content-Type": {"application/json"}},
				Body:   []byte(`{"id": 1,  "amount":"49.99"}`),
			}
			b.clock.Advance(time.Hour)
			r := b.claim(t, p, idempotency.ClaimReplay)
			wantEqual(t, "replayed status", r.Record.Status, status)
			wantEqual(t, "replayed response", *r.Record.Response, want)
			wantEqual(t, "CompletedAt", r.Record.CompletedAt, completedAt)
			wantEqual(t, "ExpiresAt", r.Record.ExpiresAt, completedAt.Add(retention))
			wantEqual(t, "LockedUntil", r.Record.LockedUntil, time.Time{})
			wantEqual(t, "Lease", r.Lease, idempotency.Lease{})

			// Replays and Get are copies too.
			r.Record.Response.Header.Set("Content-Type", "text/plain")
			r.Record.Response.Body[0] = 'X'
			g := b.get(t, p)
			g.Response.Body[1] = 'X'
			wantEqual(t, "stored response", *b.get(t, p).Response, want)

			// The outcome is final: the lease can no longer act.
			b.wantFenced(t, c.Lease)
			wantEqual(t, "stored response", *b.get(t, p).Response, want)
		})
	}
}

func TestMismatchChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	processing, completed, orphan := params(t, "processing"), params(t, "completed"), params(t, "orphan")
	b.claim(t, processing, idempotency.ClaimAcquired)
	c := b.claim(t, completed, idempotency.ClaimAcquired)
	b.complete(t, c.Lease, idempotency.StatusCompleted, idempotency.Response{Code: 200, Body: []byte("ok")})
	o := b.claim(t, orphan, idempotency.ClaimAcquired)
	if err := b.store.Release(b.ctx, o.Lease); err != nil {
		t.Fatal(err)
	}

	for _, p := range []idempotency.ClaimParams{processing, completed, orphan} {
		before := b.get(t, p)
		other := p
		other.Fingerprint = fingerprint(t, "50.00")
		m := b.claim(t, other, idempotency.ClaimMismatch)
		// A refusal reveals nothing of the stored record.
		wantEqual(t, "mismatch claim", m, idempotency.Claim{State: idempotency.ClaimMismatch})
		wantEqual(t, "record after mismatch", b.get(t, p), before)
	}
}

func TestScopesAreSeparate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := params(t, "k1")
	q := p
	q.Scope = "usr_other"
	b.claim(t, p, idempotency.ClaimAcquired)
	b.claim(t, q, idempotency.ClaimAcquired)
	if _, err := b.store.Get(b.ctx, "usr_third", p.Key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("Get in another scope: %v, want ErrNotFound", err)
	}
}

func TestReclaimAfterLeaseEnds(t *testing.T) {
	t.Parallel()
	b, p, first := setupHeld(t)
	created := b.get(t, p)

	// The lease ends exactly at LockedUntil.
	b.clock.Advance(lockTimeout)
	second := b.claim(t, p, idempotency.ClaimReclaimed)
	wantEqual(t, "lease", second.Lease, idempotency.Lease{Scope: p.Scope, Key: p.Key, Version: 1})
	r := b.get(t, p)
	wantEqual(t, "LockVersion", r.LockVersion, 1)
	wantEqual(t, "LockedUntil", r.LockedUntil, b.clock.Now().Add(lockTimeout))
	wantEqual(t, "CreatedAt", r.CreatedAt, created.CreatedAt)
	wantEqual(t, "Status", r.Status, idempotency.StatusProcessing)

	// The first holder is fenced off: it changes nothing.
	b.wantFenced(t, first.Lease)
	wantEqual(t, "record after fenced calls", b.get(t, p), r)

	b.claim(t, p, idempotency.ClaimInProgress)
	b.complete(t, second.Lease, idempotency.StatusCompleted, idempotency.Response{Code: 200})
	b.claim(t, p, idempotency.ClaimReplay)
}

func TestFencingSurvivesDeletion(t *testing.T) {
	t.Parallel()
	b, p, stalled := setupHeld(t) // then stalls for days
	b.clock.Advance(lockTimeout)
	rc := b.claim(t, p, idempotency.ClaimReclaimed)
	b.complete(t, rc.Lease, idempotency.StatusCompleted, idempotency.Response{Code: 200})
	b.clock.Advance(retention)
	if n, err := b.store.Prune(b.ctx, 10); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v", n, err)
	}

	// The key is claimed anew, and another key for the first time: neither
	// repeats a token the deleted record handed out.
	again := b.claim(t, p, idempotency.ClaimAcquired)
	other := b.claim(t, params(t, "k2"), idempotency.ClaimAcquired)
	wantEqual(t, "versions after deletion", []int64{again.Lease.Version, other.Lease.Version}, []int64{2, 2})
	b.wantFenced(t, stalled.Lease)
	b.wantFenced(t, rc.Lease)
	b.claim(t, p, idempotency.ClaimInProgress)
}

func TestCompleteAfterLeaseTimeWithoutReclaim(t *testing.T) {
	t.Parallel()
	b, p, c := setupHeld(t)
	b.clock.Advance(10 * lockTimeout)
	// Nobody reclaimed: the version is still the holder's, so it finishes.
	b.complete(t, c.Lease, idempotency.StatusCompleted, idempotency.Response{Code: 200})
	b.claim(t, p, idempotency.ClaimReplay)
}

func TestReleaseLetsARetryReclaim(t *testing.T) {
	t.Parallel()
	b, p, c := setupHeld(t)
	b.clock.Advance(time.Second)
	if err := b.store.Release(b.ctx, c.Lease); err != nil {
		t.Fatal(err)
	}
	r := b.get(t, p)
	wantEqual(t, "Status", r.Status, idempotency.StatusProcessing)
	wantEqual(t, "LockedUntil", r.LockedUntil, b.clock.Now())

	// At the same instant: the lease has ended.
	rc := b.claim(t, p, idempotency.ClaimReclaimed)
	wantEqual(t, "Version", rc.Lease.Version, 1)
}

func TestHeartbeatExtendsTheLease(t *testing.T) {
	t.Parallel()
	b, p, c := setupHeld(t)
	b.clock.Advance(20 * time.Second)
	if err := b.store.Heartbeat(b.ctx, c.Lease, time.Minute); err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "LockedUntil", b.get(t, p).LockedUntil, b.clock.Now().Add(time.Minute))

	b.clock.Advance(59 * time.Second) // past the original lease, within the extension
	ip := b.claim(t, p, idempotency.ClaimInProgress)
	wantEqual(t, "RetryAfter", ip.RetryAfter, time.Second)

	// A heartbeat after the lease ran out, before anyone reclaimed, still
	// holds: fencing is by version.
	b.clock.Advance(time.Hour)
	if err := b.store.Heartbeat(b.ctx, c.Lease, time.Minute); err != nil {
		t.Fatal(err)
	}
	b.claim(t, p, idempotency.ClaimInProgress)
}

func TestExpiredIsNew(t *testing.T) {
	t.Parallel()
	for _, sameFingerprint := range []bool{true, false} {
		t.Run(fmt.Sprintf("same fingerprint %v", sameFingerprint), func(t *testing.T) {
			t.Parallel()
			b, p, c := setupHeld(t)
			b.clock.Advance(lockTimeout) // orphan, then reclaim: version 1
			c = b.claim(t, p, idempotency.ClaimReclaimed)
			b.complete(t, c.Lease, idempotency.StatusCompleted, idempotency.Response{Code: 200, Body: []byte("old")})
			expires := b.get(t, p).ExpiresAt

			// One tick before expiry it replays; at expiry it is new.
			b.clock.Advance(retention - time.Nanosecond)
			b.claim(t, p, idempotency.ClaimReplay)
			b.clock.Advance(time.Nanosecond)
			wantEqual(t, "now", b.clock.Now(), expires)

			q := p
			if !sameFingerprint {
				q.Fingerprint = fingerprint(t, "12.00")
			}
			n := b.claim(t, q, idempotency.ClaimAcquired)
			wantEqual(t, "lease", n.Lease, idempotency.Lease{Scope: p.Scope, Key: p.Key, Version: 2})
			now := b.clock.Now()
			wantEqual(t, "renewed record", b.get(t, p), claimedRecord(q, 2, now))
			// The old holder's token never comes back.
			wantErr(t, b.store.Complete(b.ctx, c.Lease, idempotency.Completion{Status: idempotency.StatusCompleted, Retention: retention}), idempotency.ErrLeaseLost)
			b.claim(t, q, idempotency.ClaimInProgress)
		})
	}
}

func TestExpiredRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := params(t, "k1")
	p.Expired = idempotency.ExpiredRefused
	c := b.claim(t, p, idempotency.ClaimAcquired)
	b.complete(t, c.Lease, idempotency.StatusFailed, idempotency.Response{Code: 402})
	b.clock.Advance(retention)
	before := b.get(t, p)

	for _, fp := range []idempotency.Fingerprint{p.Fingerprint, fingerprint(t, "1")} {
		q := p
		q.Fingerprint = fp
		e := b.claim(t, q, idempotency.ClaimExpired)
		wantEqual(t, "expired claim", e, idempotency.Claim{State: idempotency.ClaimExpired})
		wantEqual(t, "record after refusal", b.get(t, p), before)
	}
}

// Eviction is a prune that runs EvictAfter late: a record written under
// ExpiredRefused becomes a tombstone EvictAfter after its expiry, and the
// tombstone is evicted EvictAfter after its horizon's end.
func TestEvictionKeepsTombstones(t *testing.T) {
	t.Parallel()
	const horizon = 10 * time.Hour
	b := setup(t, nil)
	p := params(t, "k1")
	p.Expired, p.RefusalHorizon = idempotency.ExpiredRefused, horizon
	c := b.claim(t, p, idempotency.ClaimAcquired)
	b.complete(t, c.Lease, idempotency.StatusCompleted, idempotency.Response{Code: 201, Body: []byte("secret")})
	was := b.get(t, p)

	b.clock.Advance(retention + DefaultEvictAfter)
	got := b.get(t, p)
	tomb := was
	tomb.Response, tomb.RefuseUntil = nil, was.ExpiresAt.Add(horizon)
	wantEqual(t, "evicted record", got, tomb)
	b.claim(t, p, idempotency.ClaimExpired)

	b.clock.Advance(horizon - time.Nanosecond) // the tombstone's end, EvictAfter late, less a tick
	wantEqual(t, "tombstone before its eviction", b.get(t, p), tomb)
	b.clock.Advance(time.Nanosecond)
	_, err := b.store.Get(b.ctx, p.Scope, p.Key)
	wantErr(t, err, idempotency.ErrNotFound)
	n := b.claim(t, p, idempotency.ClaimAcquired)
	if n.Lease.Version <= was.LockVersion {
		t.Fatalf("a key claimed again after its tombstone hands out version %d again", n.Lease.Version)
	}
}

// A full store never evicts a tombstone within its horizon to make room: it
// still refuses its key, as a live record answers for its own. It does
// delete one past its horizon.
func TestMaxRecordsKeepsTombstones(t *testing.T) {
	t.Parallel()
	b := setup(t, &Config{MaxRecords: 2, EvictAfter: -1})
	for _, k := range []string{"a", "b"} {
		p := params(t, k)
		p.Expired, p.RefusalHorizon = idempotency.ExpiredRefused, time.Hour
		c := b.claim(t, p, idempotency.ClaimAcquired)
		b.complete(t, c.Lease, idempotency.StatusCompleted, idempotency.Response{Code: 201})
	}
	b.clock.Advance(retention)
	_, err := b.store.Claim(b.ctx, params(t, "c"))
	wantErr(t, err, idempotency.ErrStoreFull)
	wantEqual(t, "Len", b.store.Len(), 2)
	for _, k := range []string{"a", "b"} {
		if r := b.get(t, params(t, k)); r.RefuseUntil.IsZero() || r.Response != nil {
			t.Fatalf("%s: %+v, want a tombstone", k, r)
		}
	}
	b.clock.Advance(time.Hour)
	b.claim(t, params(t, "c"), idempotency.ClaimAcquired)
	wantEqual(t, "Len", b.store.Len(), 2)
}

func TestProcessingNeverExpires(t *testing.T) {
	t.Parallel()
	b, p, c := setupHeld(t)
	b.clock.Advance(retention + 10*DefaultEvictAfter)

	n, err := b.store.Prune(b.ctx, 100)
	if err != nil || n != 0 {
		t.Fatalf("Prune = %d, %v; want 0", n, err)
	}
	wantEqual(t, "Len", b.store.Len(), 1)
	// Past its expires_at, a PROCESSING record is an orphan to reclaim, not
	// an expired record to renew or refuse.
	p.Expired = idempotency.ExpiredRefused
	rc := b.claim(t, p, idempotency.ClaimReclaimed)
	wantEqual(t, "Version", rc.Lease.Version, 1)
	wantErr(t, b.store.Complete(b.ctx, c.Lease, idempotency.Completion{Status: idempotency.StatusCompleted, Retention: retention}), idempotency.ErrLeaseLost)
	b.complete(t, rc.Lease, idempotency.StatusCompleted, idempotency.Response{Code: 200})
	b.claim(t, p, idempotency.ClaimReplay)
}

func TestPrune(t *testing.T) {
	t.Parallel()
	b := setup(t, &Config{EvictAfter: -1})
	// Five finished records expiring one second apart, one PROCESSING.
	for i := range 5 {
		p := params(t, fmt.Sprint("done", i))
		c := b.claim(t, p, idempotency.ClaimAcquired)
		b.complete(t, c.Lease, idempotency.StatusCompleted, idempotency.Response{Code: 200})
		b.clock.Advance(time.Second)
	}
	busy := params(t, "busy")
	b.claim(t, busy, idempotency.ClaimAcquired)

	for _, limit := range []int{0, -1} {
		_, err := b.store.Prune(b.ctx, limit)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != "limit" {
			t.Fatalf("Prune(%d) = %v, want an InvalidError naming limit", limit, err)
		}
	}

	// done0 completed 5s ago, done4 1s ago.
	b.clock.Advance(retention - 5*time.Second) // done0 expires now
	prune := func(limit, want int) {
		t.Helper()
		n, err := b.store.Prune(b.ctx, limit)
		if err != nil || n != want {
			t.Fatalf("Prune(%d) = %d, %v; want %d", limit, n, err, want)
		}
	}
	prune(10, 1)
	b.clock.Advance(2 * time.Second) // done1, done2 expired
	prune(1, 1)
	if _, err := b.store.Get(b.ctx, testScope, params(t, "done1").Key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("Prune took done2 before done1 (soonest expiry first): %v", err)
	}
	prune(10, 1)
	prune(10, 0)
	b.clock.Advance(365 * 24 * time.Hour)
	prune(10, 2)
	prune(10, 0)
	wantEqual(t, "Len", b.store.Len(), 1)
	wantEqual(t, "Status of the survivor", b.get(t, busy).Status, idempotency.StatusProcessing)
}

func TestEvictionBoundsMemory(t *testing.T) {
	t.Parallel()
	const n = 10_000
	b := setup(t, nil)
	short := func(key string) idempotency.ClaimParams {
		p := params(t, key)
		p.LockTimeout, p.Retention = time.Second, time.Minute
		return p
	}
	fill := func(round int) {
		for i := range n {
			c := b.claim(t, short(fmt.Sprint(round, "-", i)), idempotency.ClaimAcquired)
			if err := b.store.Complete(b.ctx, c.Lease, idempotency.Completion{Status: idempotency.StatusCompleted, Retention: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
	}

	fill(0)
	wantEqual(t, "Len after the first fill", b.store.Len(), n)

	// Expired but within EvictAfter: kept, like an unpruned row.
	b.clock.Advance(time.Minute)
	b.claim(t, short("0-0"), idempotency.ClaimAcquired) // renews one
	wantEqual(t, "Len within EvictAfter", b.store.Len(), n)

	// Past EvictAfter, each operation evicts a batch: a quiet store
	// shrinks with its traffic, and no single call pays for all of it.
	b.clock.Advance(DefaultEvictAfter)
	if _, err := b.store.Get(b.ctx, testScope, "x"); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatal(err)
	}
	wantEqual(t, "Len after one operation", b.store.Len(), n-evictBatch)
	for range n / evictBatch {
		b.store.Get(b.ctx, testScope, "x")
	}
	wantEqual(t, "Len after enough operations", b.store.Len(), 1) // the renewed PROCESSING record

	// Steady state: round after round of new keys, the store holds about
	// one round, not all of them.
	for round := 1; round <= 5; round++ {
		fill(round)
		if got := b.store.Len(); got > 2*n+1 {
			t.Fatalf("round %d: Len = %d, want at most %d", round, got, 2*n+1)
		}
		b.clock.Advance(time.Minute + DefaultEvictAfter)
	}
	for range n / evictBatch * 2 {
		b.store.Get(b.ctx, testScope, "x")
	}
	wantEqual(t, "Len after the rounds", b.store.Len(), 1)
}

func TestEvictAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		evictAfter time.Duration
		advance    time.Duration
		kept       bool
	}{
		{evictAfter: time.Minute, advance: retention + time.Minute - time.Nanosecond, kept: true},
		{evictAfter: time.Minute, advance: retention + time.Minute, kept: false},
		{evictAfter: -1, advance: 100 * retention, kept: true},
	} {
		t.Run(fmt.Sprint(tc.evictAfter, "+", tc.advance), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &Config{EvictAfter: tc.evictAfter})
			p := params(t, "k1")
			c := b.claim(t, p, idempotency.ClaimAcquired)
			b.complete(t, c.Lease, idempotency.StatusCompleted, idempotency.Response{Code: 200})
			b.clock.Advance(tc.advance)
			_, err := b.store.Get(b.ctx, p.Scope, p.Key)
			if tc.kept && err != nil || !tc.kept && !errors.Is(err, idempotency.ErrNotFound) {
				t.Fatalf("Get after %s: %v, want kept=%v", tc.advance, err, tc.kept)
			}
		})
	}
}

func TestMaxRecords(t *testing.T) {
	t.Parallel()
	b := setup(t, &Config{MaxRecords: 2})
	a, done := params(t, "a"), params(t, "done")
	ca := b.claim(t, a, idempotency.ClaimAcquired)
	cd := b.claim(t, done, idempotency.ClaimAcquired)
	b.complete(t, cd.Lease, idempotency.StatusCompleted, idempotency.Response{Code: 200})

	// Full of live records: a new key is refused and nothing changes.
	if _, err := b.store.Claim(b.ctx, params(t, "new")); !errors.Is(err, idempotency.ErrStoreFull) {
		t.Fatalf("Claim of a new key in a full store: %v, want ErrStoreFull", err)
	}
	wantEqual(t, "Len", b.store.Len(), 2)
	// Keys already held are served as usual.
	b.claim(t, a, idempotency.ClaimInProgress)
	b.claim(t, done, idempotency.ClaimReplay)

	// An expired record makes room; a PROCESSING one never does, however
	// old.
	b.clock.Advance(retention)
	b.claim(t, params(t, "new"), idempotency.ClaimAcquired)
	if _, err := b.store.Get(b.ctx, done.Scope, done.Key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("the expired record still there: %v", err)
	}
	if _, err := b.store.Claim(b.ctx, params(t, "newer")); !errors.Is(err, idempotency.ErrStoreFull) {
		t.Fatalf("Claim with only PROCESSING records: %v, want ErrStoreFull", err)
	}
	b.claim(t, a, idempotency.ClaimReclaimed)
	wantErr(t, b.store.Complete(b.ctx, ca.Lease, idempotency.Completion{Status: idempotency.StatusCompleted, Retention: retention}), idempotency.ErrLeaseLost)
}

func TestInvalidInputNamesTheFieldAndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	held := params(t, "held")
	c := b.claim(t, held, idempotency.ClaimAcquired)
	before := b.get(t, held)

	claimWith := func(f func(*idempotency.ClaimParams)) func() error {
		return func() error {
			p := params(t, "new")
			f(&p)
			_, err := b.store.Claim(b.ctx, p)
			return err
		}
	}
	complete := func(cp idempotency.Completion) func() error {
		return func() error { return b.store.Complete(b.ctx, c.Lease, cp) }
	}
	for _, tc := range []struct {
		name  string
		field string
		call  func() error
	}{
		{"empty scope", "scope", claimWith(func(p *idempotency.ClaimParams) { p.Scope = "" })},
		{"scope charset", "scope", claimWith(func(p *idempotency.ClaimParams) { p.Scope = "usr 1" })},
		{"empty key", "key", claimWith(func(p *idempotency.ClaimParams) { p.Key = "" })},
		{"long key", "key", claimWith(func(p *idempotency.ClaimParams) { p.Key = string(make([]byte, 256)) })},
		{"empty fingerprint", "fingerprint", claimWith(func(p *idempotency.ClaimParams) { p.Fingerprint = "" })},
		{"uppercase fingerprint", "fingerprint", claimWith(func(p *idempotency.ClaimParams) {
			p.Fingerprint = idempotency.Fingerprint("A" + string(p.Fingerprint[1:]))
		})},
		{"zero lock timeout", "LockTimeout", claimWith(func(p *idempotency.ClaimParams) { p.LockTimeout = 0 })},
		{"negative lock timeout", "LockTimeout", claimWith(func(p *idempotency.ClaimParams) { p.LockTimeout = -time.Second })},
		{"retention = lock timeout", "Retention", claimWith(func(p *idempotency.ClaimParams) { p.Retention = p.LockTimeout })},
		{"unknown policy", "Expired", claimWith(func(p *idempotency.ClaimParams) { p.Expired = 7 })},
		{"status PROCESSING", "Completion.Status", complete(idempotency.Completion{Status: idempotency.StatusProcessing, Retention: retention})},
		{"empty status", "Completion.Status", complete(idempotency.Completion{Retention: retention})},
		{"zero retention", "Completion.Retention", complete(idempotency.Completion{Status: idempotency.StatusCompleted})},
		{"zero heartbeat", "d", func() error { return b.store.Heartbeat(b.ctx, c.Lease, 0) }},
		{"zero prune limit", "limit", func() error { _, err := b.store.Prune(b.ctx, 0); return err }},
	} {
		err := tc.call()
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || !errors.Is(err, idempotency.ErrInvalid) {
			t.Fatalf("%s: err = %v, want an *InvalidError", tc.name, err)
		}
		if ie.Field != tc.field || ie.Reason == "" {
			t.Fatalf("%s: Field %q Reason %q, want field %q", tc.name, ie.Field, ie.Reason, tc.field)
		}
	}
	wantEqual(t, "Len", b.store.Len(), 1)
	wantEqual(t, "held record", b.get(t, held), before)
}

func TestDoneContext(t *testing.T) {
	t.Parallel()
	b, p, c := setupHeld(t)
	before := b.get(t, p)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.store.Claim(ctx, params(t, "k2"))
	wantErr(t, err, context.Canceled)
	wantErr(t, b.store.Complete(ctx, c.Lease, idempotency.Completion{Status: idempotency.StatusCompleted, Retention: retention}), context.Canceled)
	wantErr(t, b.store.Release(ctx, c.Lease), context.Canceled)
	wantErr(t, b.store.Heartbeat(ctx, c.Lease, time.Hour), context.Canceled)
	_, err = b.store.Get(ctx, p.Scope, p.Key)
	wantErr(t, err, context.Canceled)
	_, err = b.store.Prune(ctx, 1)
	wantErr(t, err, context.Canceled)

	wantEqual(t, "Len", b.store.Len(), 1)
	wantEqual(t, "record", b.get(t, p), before)
}

func TestGetNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.store.Get(b.ctx, testScope, "nope")
	wantErr(t, err, idempotency.ErrNotFound)
}

// TestConcurrentClaims races many claimers on one key, for a new key and
// for an orphan: exactly one wins, the others see it in progress, and only
// the winner's lease completes.
func TestConcurrentClaims(t *testing.T) {
	t.Parallel()
	for _, orphan := range []bool{false, true} {
		t.Run(fmt.Sprint("orphan ", orphan), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			p := params(t, "hot")
			wantWin := idempotency.ClaimAcquired
			if orphan {
				b.claim(t, p, idempotency.ClaimAcquired)
				b.clock.Advance(lockTimeout)
				wantWin = idempotency.ClaimReclaimed
			}

			const n = 64
			claims := make([]idempotency.Claim, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					c, err := b.store.Claim(b.ctx, p)
					if err != nil {
						t.Error(err)
					}
					claims[i] = c
				})
			}
			wg.Wait()

			var winners []idempotency.Lease
			for _, c := range claims {
				switch c.State {
				case wantWin:
					winners = append(winners, c.Lease)
				case idempotency.ClaimInProgress:
				default:
					t.Fatalf("claim state %s", c.State)
				}
			}
			if len(winners) != 1 {
				t.Fatalf("%d winners, want 1", len(winners))
			}

			// Every contender tries to complete; only the winner may.
			var (
				mu   sync.Mutex
				oks  int
				errs = map[error]int{}
			)
			for v := range int64(3) {
				for range n / 4 {
					wg.Go(func() {
						err := b.store.Complete(b.ctx, idempotency.Lease{Scope: p.Scope, Key: p.Key, Version: v},
							idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: int(v)}, Retention: retention})
						mu.Lock()
						defer mu.Unlock()
						if err == nil {
							oks++
						} else {
							errs[err]++
						}
					})
				}
			}
			wg.Wait()
			if oks != 1 || len(errs) != 1 || errs[idempotency.ErrLeaseLost] != 3*(n/4)-1 {
				t.Fatalf("completions: %d ok, errors %v", oks, errs)
			}
			wantEqual(t, "stored code", b.get(t, p).Response.Code, int(winners[0].Version))
		})
	}
}

// TestConcurrentMixed runs every operation at once on a few keys, with the
// clock moving, for the race detector and the invariants.
func TestConcurrentMixed(t *testing.T) {
	t.Parallel()
	b := setup(t, &Config{EvictAfter: time.Second, MaxRecords: 6})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 500 {
				p := params(t, fmt.Sprint(i%5))
				p.LockTimeout, p.Retention = time.Second, 3*time.Second
				if i%7 == 0 {
					p.Expired = idempotency.ExpiredRefused
				}
				c, err := b.store.Claim(b.ctx, p)
				if err != nil && !errors.Is(err, idempotency.ErrStoreFull) {
					t.Error(err)
					return
				}
				switch {
				case c.State != idempotency.ClaimAcquired && c.State != idempotency.ClaimReclaimed:
				case (w+i)%3 == 0:
					b.store.Release(b.ctx, c.Lease)
				case (w+i)%3 == 1:
					b.store.Heartbeat(b.ctx, c.Lease, time.Second)
				default:
					b.store.Complete(b.ctx, c.Lease, idempotency.Completion{Status: idempotency.StatusCompleted,
						Response: idempotency.Response{Code: 200, Header: http.Header{"A": {"b"}}, Body: []byte("x")}, Retention: 3 * time.Second})
				}
				if r, err := b.store.Get(b.ctx, p.Scope, p.Key); err == nil && r.Response != nil {
					r.Response.Body[0] = 'y' // a copy: harmless
					r.Response.Header.Set("A", "c")
				}
				if i%50 == 0 {
					b.store.Prune(b.ctx, 2)
				}
				b.clock.Advance(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	checkInvariants(t, b.store)
	b.store.mu.Lock()
	defer b.store.mu.Unlock()
	for _, e := range b.store.records {
		if r := e.rec.Response; r != nil && (string(r.Body) != "x" || r.Header.Get("A") != "b") {
			t.Fatalf("a caller changed a stored response: %+v", r)
		}
	}
}

// TestStateMachine drives the store with random operations and a moving
// clock, and checks every claim against the decision table of
// [Store.Claim] applied to the record as Get saw it just before, every
// fenced call against the leases handed out, and the internal invariants
// after each step.
func TestStateMachine(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		evictAfter := rapid.SampledFrom([]time.Duration{-1, 5 * time.Second}).Draw(rt, "evictAfter")
		m := &machine{
			b:       setup(t, &Config{EvictAfter: evictAfter}),
			keys:    []string{testScope + "_charge_a", testScope + "_charge_b", testScope + "_charge_c"},
			fps:     []idempotency.Fingerprint{fingerprint(t, "1"), fingerprint(t, "2")},
			current: map[string]*idempotency.Lease{},
			version: map[string]int64{},
			horizon: map[string]time.Duration{},
		}
		rt.Repeat(rapid.StateMachineActions(m))
	})
}

type machine struct {
	b    *bundle
	keys []string
	fps  []idempotency.Fingerprint
	// issued is every lease ever handed out; current is, per key, the one
	// that may still act.
	issued  []idempotency.Lease
	current map[string]*idempotency.Lease
	// version is the highest lock version seen per key, across deletions.
	version map[string]int64
	// horizon is, per key, the refusal horizon of the claim that created
	// or renewed its record (0 under ExpiredIsNew: no tombstone).
	horizon map[string]time.Duration
}

func (m *machine) get(t *rapid.T, key string) (idempotency.Record, bool) {
	r, err := m.b.store.Get(m.b.ctx, testScope, key)
	if errors.Is(err, idempotency.ErrNotFound) {
		return r, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return r, true
}

func (m *machine) Claim(t *rapid.T) {
	key := rapid.SampledFrom(m.keys).Draw(t, "key")
	p := idempotency.ClaimParams{
		Scope: testScope, Key: key,
		Fingerprint: rapid.SampledFrom(m.fps).Draw(t, "fp"),
		LockTimeout: 2 * time.Second, Retention: 10 * time.Second,
		Expired: rapid.SampledFrom([]idempotency.ExpiredPolicy{idempotency.ExpiredIsNew, idempotency.ExpiredRefused}).Draw(t, "policy"),
	}
	if p.Expired == idempotency.ExpiredRefused {
		// The default (30 days: tombstones that outlive the run) or a
		// horizon the clock crosses.
		p.RefusalHorizon = rapid.SampledFrom([]time.Duration{0, 3 * time.Second, 7 * time.Second}).Draw(t, "horizon")
	}
	pre, found := m.get(t, key)
	now := m.b.clock.Now()

	want := idempotency.Claim{}
	switch {
	case !found:
		// The first version is the store's choice (0, or above every
		// deleted record's), checked below: it never repeats a token.
		want = idempotency.Claim{State: idempotency.ClaimAcquired, Lease: idempotency.Lease{Scope: testScope, Key: key, Version: -1}}
	case pre.Status != idempotency.StatusProcessing && !now.Before(pre.ExpiresAt):
		if p.Expired == idempotency.ExpiredRefused {
			want.State = idempotency.ClaimExpired
		} else {
			want = idempotency.Claim{State: idempotency.ClaimAcquired, Lease: idempotency.Lease{Scope: testScope, Key: key, Version: pre.LockVersion + 1}}
		}
	case !pre.Fingerprint.Equal(p.Fingerprint):
		want.State = idempotency.ClaimMismatch
	case pre.Status != idempotency.StatusProcessing:
		// A replay carries the store's clock, from which a replay cache
		// bounds how long it may answer for the record.
		want = idempotency.Claim{State: idempotency.ClaimReplay, Record: pre, StoreNow: now}
	case pre.LockedUntil.After(now):
		want = idempotency.Claim{State: idempotency.ClaimInProgress, Record: pre, RetryAfter: pre.LockedUntil.Sub(now)}
	default:
		want = idempotency.Claim{State: idempotency.ClaimReclaimed, Lease: idempotency.Lease{Scope: testScope, Key: key, Version: pre.LockVersion + 1}}
	}

	got, err := m.b.store.Claim(m.b.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if want.Lease.Version == -1 {
		for _, l := range m.issued {
			if l.Key == key && l.Version >= got.Lease.Version {
				t.Fatalf("a re-created record hands out version %d again", l.Version)
			}
		}
		want.Lease.Version = got.Lease.Version
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Claim over %+v (found %v) at %v:\n got  %+v\n want %+v", pre, found, now, got, want)
	}
	post, _ := m.get(t, key)
	switch got.State {
	case idempotency.ClaimAcquired, idempotency.ClaimReclaimed:
		if m.current[key] != nil && got.State == idempotency.ClaimAcquired {
			t.Fatalf("a new record replaced one with a live holder %+v", *m.current[key])
		}
		l := got.Lease
		m.current[key] = &l
		m.issued = append(m.issued, l)
		if got.State == idempotency.ClaimAcquired {
			m.horizon[key] = p.RefuseFor()
		}
		if post.Status != idempotency.StatusProcessing || post.LockedUntil != now.Add(p.LockTimeout) || !post.Fingerprint.Equal(p.Fingerprint) {
			t.Fatalf("after %s: %+v", got.State, post)
		}
	default:
		if !reflect.DeepEqual(post, pre) {
			t.Fatalf("%s changed the record:\n was %+v\n now %+v", got.State, pre, post)
		}
	}
}

func (m *machine) lease(t *rapid.T) idempotency.Lease {
	if len(m.issued) == 0 {
		t.Skip("no lease issued yet")
	}
	return rapid.SampledFrom(m.issued).Draw(t, "lease")
}

// fenced checks a fenced call's error against the model, and returns
// whether it succeeded.
func (m *machine) fenced(t *rapid.T, l idempotency.Lease, err error) bool {
	cur := m.current[l.Key]
	holds := cur != nil && *cur == l
	switch {
	case holds && err != nil:
		t.Fatalf("the current holder %+v was refused: %v", l, err)
	case !holds && !errors.Is(err, idempotency.ErrLeaseLost):
		t.Fatalf("a stale lease %+v (current %v) got %v, want ErrLeaseLost", l, cur, err)
	}
	return holds
}

func (m *machine) Complete(t *rapid.T) {
	l := m.lease(t)
	status := rapid.SampledFrom([]idempotency.Status{idempotency.StatusCompleted, idempotency.StatusFailed}).Draw(t, "status")
	body := rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "body")
	ret := time.Duration(rapid.IntRange(1, 20).Draw(t, "retention")) * time.Second
	err := m.b.store.Complete(m.b.ctx, l, idempotency.Completion{Status: status, Response: idempotency.Response{Code: 200, Body: body}, Retention: ret})
	if m.fenced(t, l, err) {
		m.current[l.Key] = nil
		r, _ := m.get(t, l.Key)
		now := m.b.clock.Now()
		if r.Status != status || r.ExpiresAt != now.Add(ret) || r.CompletedAt != now || string(r.Response.Body) != string(body) {
			t.Fatalf("after Complete: %+v", r)
		}
	}
}

func (m *machine) Release(t *rapid.T) {
	l := m.lease(t)
	if m.fenced(t, l, m.b.store.Release(m.b.ctx, l)) {
		if r, _ := m.get(t, l.Key); r.LockedUntil != m.b.clock.Now() {
			t.Fatalf("after Release: %+v", r)
		}
	}
}

func (m *machine) Heartbeat(t *rapid.T) {
	l := m.lease(t)
	d := time.Duration(rapid.IntRange(1, 5).Draw(t, "d")) * time.Second
	if m.fenced(t, l, m.b.store.Heartbeat(m.b.ctx, l, d)) {
		if r, _ := m.get(t, l.Key); r.LockedUntil != m.b.clock.Now().Add(d) {
			t.Fatalf("after Heartbeat: %+v", r)
		}
	}
}

func (m *machine) Advance(t *rapid.T) {
	// Whole seconds mostly, so that the clock lands exactly on lease ends
	// and expiries (all whole seconds), where off-by-one bugs live.
	s := time.Duration(rapid.IntRange(0, 12).Draw(t, "s")) * time.Second
	ms := time.Duration(rapid.SampledFrom([]int{0, 0, 0, 1, 999}).Draw(t, "ms")) * time.Millisecond
	m.b.clock.Advance(s + ms)
}

func (m *machine) Prune(t *rapid.T) {
	limit := rapid.IntRange(1, 3).Draw(t, "limit")
	now := m.b.clock.Now()
	// Due: an expired record (deleted, or reduced to a tombstone), a
	// tombstone past its horizon (deleted).
	due := 0
	for _, k := range m.keys {
		r, ok := m.get(t, k)
		switch {
		case !ok || r.Status == idempotency.StatusProcessing:
		case r.RefuseUntil.IsZero() && !r.ExpiresAt.After(now), !r.RefuseUntil.IsZero() && !r.RefuseUntil.After(now):
			due++
		}
	}
	n, err := m.b.store.Prune(m.b.ctx, limit)
	if err != nil || n != min(due, limit) {
		t.Fatalf("Prune(%d) = %d, %v with %d due", limit, n, err, due)
	}
}

func (m *machine) Check(t *rapid.T) {
	checkInvariants(t, m.b.store)
	for _, k := range m.keys {
		r, ok := m.get(t, k)
		if cur := m.current[k]; cur != nil {
			// A record with a holder is never pruned, evicted or replaced.
			if !ok || r.Status != idempotency.StatusProcessing || r.LockVersion != cur.Version {
				t.Fatalf("holder %+v, record %+v (found %v)", *cur, r, ok)
			}
		}
		if !ok {
			continue
		}
		// A tombstone is an expired record written under ExpiredRefused,
		// without its response, refusing until its expiry plus the
		// horizon of the claim that wrote it.
		if !r.RefuseUntil.IsZero() {
			if h := m.horizon[k]; h == 0 || !r.RefuseUntil.Equal(r.ExpiresAt.Add(h)) || r.Response != nil {
				t.Fatalf("%s: tombstone %+v, horizon %v", k, r, h)
			}
		}
		// Even across deletion and re-creation: a token never repeats.
		if v, seen := m.version[k]; seen && r.LockVersion < v {
			t.Fatalf("%s: lock version went back from %d to %d", k, v, r.LockVersion)
		}
		m.version[k] = r.LockVersion
	}
}
