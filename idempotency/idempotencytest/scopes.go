package idempotencytest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// scopeChecks: a scope sees only its own records; with RefuseForeign a key
// held by another scope is refused and nothing is stored.
var scopeChecks = []check{
	{"Isolated", testScopes},
	{"ForeignKeyRefused", testForeign},
}

// inputChecks: a bad request or configuration is refused with an error
// naming the field, before anything runs or is stored.
var inputChecks = []check{
	{"BadInputChangesNothing", testBadInput},
}

func testScopes(t *testing.T, h Harness) {
	b := setup(t, h, nil)
	// The same key string under two scopes: two records, two executions,
	// and each scope replays only its own response.
	const k = "usr_A1_createOrder_shared"
	ra := idempotency.Request{Scope: scopeA, Key: k, Fingerprint: fp(t, "1")}
	rb := idempotency.Request{Scope: scopeB, Key: k, Fingerprint: fp(t, "2")}
	b.mustDo(t, ra, b.calls.action(idempotency.Response{Code: 201, Body: []byte("A")}))
	if _, err := b.Store.Get(b.ctx, scopeB, k); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("scope B sees scope A's record: %v", err)
	}
	res, err := b.exec.Do(b.ctx, rb, b.calls.action(idempotency.Response{Code: 201, Body: []byte("B")}))
	if err != nil || res.Replayed || string(res.Response.Body) != "B" {
		t.Fatalf("scope B: %+v %v", res, err)
	}
	res, err = b.exec.Do(b.ctx, ra, b.calls.action(okResponse()))
	if err != nil || !res.Replayed || string(res.Response.Body) != "A" {
		t.Fatalf("scope A replay: %+v %v", res, err)
	}
	b.wantExecutions(t, 2)
}

// With RefuseForeign, a key that exists only under another scope is
// refused and nothing is stored; without it, scopes never see each other.
func testForeign(t *testing.T, h Harness) {
	b := setup(t, h, &idempotency.Config{Retention: time.Hour})
	const k = "createOrder_client-key-1"
	a := idempotency.Request{Scope: scopeA, Key: k, Fingerprint: fp(t, "1"), RefuseForeign: true}
	b.mustDo(t, a, b.calls.action(idempotency.Response{Code: 201, Body: []byte("A's order")}))
	other := idempotency.Request{Scope: scopeB, Key: k, Fingerprint: fp(t, "1"), RefuseForeign: true}
	res, err := b.exec.Do(b.ctx, other, b.calls.action(okResponse()))
	if !errors.Is(err, idempotency.ErrForeignKey) || bytes.Contains([]byte(err.Error()), []byte("A's order")) || res.Response.Body != nil {
		t.Fatalf("foreign key: %+v %v", res, err)
	}
	if _, err := b.Store.Get(b.ctx, scopeB, k); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("a refused foreign key stored a record: %v", err)
	}
	// A's own retries still replay.
	if res, err := b.exec.Do(b.ctx, a, b.calls.action(okResponse())); err != nil || !res.Replayed {
		t.Fatalf("A's retry: %+v %v", res, err)
	}
	// Without RefuseForeign, B's record is its own.
	other.RefuseForeign = false
	if res, err := b.exec.Do(b.ctx, other, b.calls.action(okResponse())); err != nil || res.Replayed {
		t.Fatalf("B without RefuseForeign: %+v %v", res, err)
	}
	b.wantExecutions(t, 2)
	// Once A's record expired, the key is nobody's.
	b.Advance(t, 2*time.Hour)
	third := idempotency.Request{Scope: "usr_C3", Key: k, Fingerprint: fp(t, "1"), RefuseForeign: true}
	if _, err := b.exec.Do(b.ctx, third, b.calls.action(okResponse())); err != nil {
		t.Fatalf("after the other scopes' records expired: %v", err)
	}
}

func testBadInput(t *testing.T, h Harness) {
	b := setup(t, h, nil)
	good := req(t, scopeA, "good", "1")
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'k'
	}
	// Trailing spaces only keep the map keys apart: the field named is the
	// key without them.
	cases := map[string]idempotency.Request{
		"scope":       {Scope: "", Key: good.Key, Fingerprint: good.Fingerprint},
		"scope ":      {Scope: "usr A", Key: good.Key, Fingerprint: good.Fingerprint},
		"key":         {Scope: scopeA, Key: "", Fingerprint: good.Fingerprint},
		"key ":        {Scope: scopeA, Key: string(long), Fingerprint: good.Fingerprint},
		"key  ":       {Scope: scopeA, Key: "bad key\n", Fingerprint: good.Fingerprint},
		"fingerprint": {Scope: scopeA, Key: good.Key, Fingerprint: "abc"},
	}
	for want, r := range cases {
		_, err := b.exec.Do(b.ctx, r, b.calls.action(okResponse()))
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != trim(want) {
			t.Fatalf("%q: err = %v, want an InvalidError naming %q", want, err, trim(want))
		}
		if _, err := b.Store.Get(b.ctx, r.Scope, r.Key); !errors.Is(err, idempotency.ErrNotFound) && !errors.Is(err, idempotency.ErrInvalid) && err != nil {
			t.Fatalf("%q: Get: %v", want, err)
		} else if err == nil {
			t.Fatalf("%q: bad input stored a record", want)
		}
	}
	if b.calls.n.Load() != 0 {
		t.Fatal("bad input ran the action")
	}
	for field, cfg := range map[string]idempotency.Config{
		"Config.Retention":         {LockTimeout: time.Hour, Retention: time.Minute},
		"Config.HeartbeatInterval": {LockTimeout: time.Second, HeartbeatInterval: 2 * time.Second},
		"Config.LockTimeout":       {LockTimeout: -time.Second},
	} {
		_, err := idempotency.New(b.Store, &cfg)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != field {
			t.Fatalf("config %s: err = %v", field, err)
		}
	}
}

func trim(s string) string {
	for len(s) > 0 && s[len(s)-1] == ' ' {
		s = s[:len(s)-1]
	}
	return s
}
