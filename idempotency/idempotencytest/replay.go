package idempotencytest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/payonce/payonce/idempotency"
)

// replayChecks: a retry with the same fingerprint gets the stored answer
// byte for byte without executing again; the same key with another
// fingerprint is refused, whether the first is done or still in progress,
// and the refusal changes nothing and reveals nothing.
var replayChecks = []check{
	{"DoesNotReExecute", testReplay},
	{"MismatchRefusedRecordUntouched", testMismatch},
}

func testReplay(t *testing.T, h Harness) {
	b := setup(t, h, nil)
	r := req(t, scopeA, "k1", "49.99")
	b.mustDo(t, r, b.calls.action(okResponse()))
	// 49.990 is the same amount: same fingerprint, a replay.
	for i := 0; i < 3; i++ {
		res := b.mustDo(t, req(t, scopeA, "k1", "49.990"), b.calls.action(idempotency.Response{Code: 500}))
		if !res.Replayed {
			t.Fatal("retry was not a replay")
		}
		mustEqualResponse(t, res.Response, okResponse())
	}
	b.wantExecutions(t, 1)
}

func testMismatch(t *testing.T, h Harness) {
	b := setup(t, h, nil)
	r := req(t, scopeA, "k1", "49.99")
	b.mustDo(t, r, b.calls.action(okResponse()))
	before, _ := b.Store.Get(b.ctx, r.Scope, r.Key)
	_, err := b.exec.Do(b.ctx, req(t, scopeA, "k1", "50.00"), b.calls.action(idempotency.Response{Code: 200}))
	if !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("err = %v, want ErrFingerprintMismatch", err)
	}
	if bytes.Contains([]byte(err.Error()), []byte(r.Fingerprint)) {
		t.Fatal("mismatch error reveals the stored fingerprint")
	}
	after, _ := b.Store.Get(b.ctx, r.Scope, r.Key)
	if recordString(before) != recordString(after) {
		t.Fatalf("record changed by a refused request:\n before %s\n after  %s", recordString(before), recordString(after))
	}
	b.wantExecutions(t, 1)
	// Also refused while the first is still in progress.
	b.claim(t, "first", claimParams(req(t, scopeA, "k2", "1")), idempotency.ClaimAcquired)
	if _, err := b.exec.Do(b.ctx, req(t, scopeA, "k2", "2"), b.calls.action(okResponse())); !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("in-progress mismatch: err = %v", err)
	}
}
