package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/memstore"
)

// An action that records its own outcome gets its lease as a parameter and
// reports what it stored as a value; the executor stores nothing more, and
// retries replay what the action stored.
func TestDoRecording(t *testing.T) {
	store := memstore.New(nil)
	exec, err := idempotency.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fp, err := idempotency.NewFingerprint().String("f", "v").Sum()
	if err != nil {
		t.Fatal(err)
	}
	req := idempotency.Request{Scope: "cus", Key: "cus_act_k1", Fingerprint: fp}
	runs := 0
	action := func(ctx context.Context, lease idempotency.Lease) (idempotency.Recording, error) {
		runs++
		if lease.Key != req.Key || lease.Scope != req.Scope {
			t.Errorf("lease %+v is not the key's", lease)
		}
		rec := idempotency.Recording{Status: idempotency.StatusFailed, Response: idempotency.Response{Code: 402, Body: []byte("declined")}}
		return rec, store.Complete(ctx, lease, idempotency.Completion{Status: rec.Status, Response: rec.Response, Retention: time.Hour})
	}
	for i := 0; i < 2; i++ {
		res, err := exec.DoRecording(ctx, req, action)
		var fe *idempotency.FailedError
		if !errors.As(err, &fe) || fe.Response.Code != 402 || string(fe.Response.Body) != "declined" || res.Replayed != (i == 1) {
			t.Fatalf("call %d: %+v %v", i, res, err)
		}
	}
	if runs != 1 {
		t.Fatalf("the action ran %d times", runs)
	}
	// A transient error stores nothing and releases the key.
	req.Key = "cus_act_k2"
	boom := errors.New("boom")
	if _, err := exec.DoRecording(ctx, req, func(context.Context, idempotency.Lease) (idempotency.Recording, error) {
		return idempotency.Recording{}, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("transient: %v", err)
	}
	res, err := exec.DoRecording(ctx, req, func(ctx context.Context, lease idempotency.Lease) (idempotency.Recording, error) {
		rec := idempotency.Recording{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 200, Body: []byte("ok")}}
		return rec, store.Complete(ctx, lease, idempotency.Completion{Status: rec.Status, Response: rec.Response, Retention: time.Hour})
	})
	if err != nil || res.Replayed || string(res.Response.Body) != "ok" {
		t.Fatalf("retry after a transient error: %+v %v", res, err)
	}
}
