package redisstore_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/redisstore"
	"github.com/payonce/payonce/idempotency/redisstore/redistest"
)

// With Config.WaitReplicas, a claim that enough replicas do not
// acknowledge is given back and answered "unavailable": the action never
// runs, the error is safe to retry, and the key is free for the next
// claim at once. The standalone test server has no replica: every WAIT
// counts 0.
func TestClaimNotReplicated(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	b := setup(t, nil) // acknowledged by the primary alone
	waiting, err := redisstore.New(b.rdb, &redisstore.Config{KeyPrefix: b.prefix, WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	exec, err := idempotency.New(waiting, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Close() })
	p := params(t, "usr_wait", "claim")
	var runs atomic.Int64
	_, err = exec.Do(ctx, idempotency.Request{Scope: p.Scope, Key: p.Key, Fingerprint: p.Fingerprint},
		func(ctx context.Context) (idempotency.Response, error) {
			runs.Add(1)
			return idempotency.Response{Code: 201}, nil
		})
	var nr *redisstore.NotReplicatedError
	if !errors.Is(err, redisstore.ErrNotReplicated) || !errors.As(err, &nr) || nr.Op != "claim" || nr.Acked != 0 || nr.Want != 1 {
		t.Fatalf("Do: %v, want a NotReplicatedError of the claim, 0 of 1 replicas", err)
	}
	if !idempotency.SafeToRetry(err) {
		t.Fatalf("SafeToRetry(%v) = false, want true: the action did not run", err)
	}
	if runs.Load() != 0 {
		t.Fatalf("the action ran %d times on an unacknowledged claim", runs.Load())
	}
	// The lease was given back: the next claim takes the key over now.
	c, err := b.store.Claim(ctx, p)
	if err != nil || c.State != idempotency.ClaimReclaimed {
		t.Fatalf("claim after the unacknowledged one: %v %v, want reclaimed (the lease released)", c.State, err)
	}

	// The HTTP middleware answers 503 with Retry-After, and runs nothing.
	mw, err := idempotency.Middleware(exec, idempotency.MiddlewareConfig{
		Scope:  func(r *http.Request) string { return "usr_wait" },
		Routes: []idempotency.Route{{Pattern: "POST /orders", Action: "createOrder"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"amount":"10"}`))
	req.Header.Set("Idempotency-Key", "a1b2c3d4-0000-4000-8000-000000000026")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || runs.Load() != 0 {
		t.Fatalf("middleware: %d, Retry-After %q, handler runs %d; want 503, set, 0", w.Code, w.Header().Get("Retry-After"), runs.Load())
	}
}

// A complete or a heartbeat that enough replicas do not acknowledge is
// reported (the outcome is on the primary); a Complete repeated by the
// holder is the same answer again, not a lost lease; Release and a
// replay need no acknowledgement.
func TestCompleteNotReplicated(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	b := setup(t, nil)
	waiting, err := redisstore.New(b.rdb, &redisstore.Config{KeyPrefix: b.prefix, WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := params(t, "usr_wait", "complete")
	c, err := b.store.Claim(ctx, p)
	if err != nil || c.State != idempotency.ClaimAcquired {
		t.Fatalf("claim: %v %v", c.State, err)
	}
	var nr *redisstore.NotReplicatedError
	if err := waiting.Heartbeat(ctx, c.Lease, time.Minute); !errors.As(err, &nr) || nr.Op != "heartbeat" || !idempotency.SafeToRetry(err) {
		t.Fatalf("heartbeat: %v, want a NotReplicatedError, safe to retry", err)
	}
	done := idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 201, Body: []byte("ran")}, Retention: time.Hour}
	for i := range 2 {
		err := waiting.Complete(ctx, c.Lease, done)
		if !errors.As(err, &nr) || nr.Op != "complete" || idempotency.SafeToRetry(err) {
			t.Fatalf("complete %d: %v, want a NotReplicatedError, not safe to retry (the action ran)", i, err)
		}
	}
	// Acknowledged by the primary, the repeated Complete is a success.
	if err := b.store.Complete(ctx, c.Lease, done); err != nil {
		t.Fatalf("complete repeated by the holder: %v, want nil", err)
	}
	failed := done
	failed.Status = idempotency.StatusFailed
	if err := b.store.Complete(ctx, c.Lease, failed); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("complete repeated with another status: %v, want ErrLeaseLost", err)
	}
	r, err := waiting.Claim(ctx, p)
	if err != nil || r.State != idempotency.ClaimReplay || string(r.Record.Response.Body) != "ran" {
		t.Fatalf("replay through the waiting store: %v %v", r.State, err)
	}
	// Release needs no acknowledgement: losing it only keeps the lease.
	q := params(t, "usr_wait", "release")
	c, err = b.store.Claim(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if err := waiting.Release(ctx, c.Lease); err != nil {
		t.Fatalf("release: %v", err)
	}
}

// WaitReplicas on a Cluster whose primaries each have a replica: claims
// and completes are acknowledged, and WAIT goes to the key's own primary
// (WAIT on another primary would count that primary's replica for a write
// it never saw, or time out).
func TestClusterWaitReplicas(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	rdb := redistest.ClusterClient(t)
	s, err := redisstore.New(rdb, &redisstore.Config{KeyPrefix: redistest.Prefix(), WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 201}, Retention: time.Hour}
	for _, scope := range []string{"usr_a", "usr_b", "usr_c", "usr_d", "usr_e", "usr_f"} {
		p := params(t, scope, "k")
		c, err := s.Claim(ctx, p)
		if err != nil || c.State != idempotency.ClaimAcquired {
			t.Fatalf("claim %s: %v %v", scope, c.State, err)
		}
		if err := s.Complete(ctx, c.Lease, done); err != nil {
			t.Fatalf("complete %s: %v", scope, err)
		}
	}
	// Asking for more replicas than a primary has: not acknowledged.
	two, err := redisstore.New(rdb, &redisstore.Config{KeyPrefix: redistest.Prefix(), WaitReplicas: 2, WaitTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := two.Claim(ctx, params(t, "usr_a", "k")); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("claim waiting for 2 replicas of 1: %v, want ErrNotReplicated", err)
	}
}
