package idempotency_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/idempotencytest"
	"github.com/payonce/payonce/idempotency/memstore"
)

// encKey is a distinct, recognisable 32-byte key.
func encKey(b byte) []byte { return bytes.Repeat([]byte{b}, idempotency.KeySize) }

func encRing(t testing.TB, current string, keys map[string][]byte) *idempotency.Keyring {
	t.Helper()
	kr, err := idempotency.NewKeyring(current, keys)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

func encRecordKey(t testing.TB, scope, intent string) string {
	t.Helper()
	k, err := idempotency.ComposeKey(scope, "charge", intent)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func encClaimParams(t testing.TB, scope, key string) idempotency.ClaimParams {
	t.Helper()
	fp, err := idempotency.NewFingerprint().String("amount", "10").Sum()
	if err != nil {
		t.Fatal(err)
	}
	return idempotency.ClaimParams{Scope: scope, Key: key, Fingerprint: fp, LockTimeout: 30 * time.Second, Retention: time.Hour}
}

// encComplete claims (scope, key) in s and completes it with resp.
func encComplete(t testing.TB, s idempotency.Store, scope, key string, status idempotency.Status, resp idempotency.Response) {
	t.Helper()
	ctx := context.Background()
	c, err := s.Claim(ctx, encClaimParams(t, scope, key))
	if err != nil || c.State != idempotency.ClaimAcquired {
		t.Fatalf("claim: %v %v", c.State, err)
	}
	if err := s.Complete(ctx, c.Lease, idempotency.Completion{Status: status, Response: resp, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
}

// encReplay claims (scope, key) in s again and returns the replayed
// response.
func encReplay(t testing.TB, s idempotency.Store, scope, key string) (idempotency.Response, error) {
	t.Helper()
	c, err := s.Claim(context.Background(), encClaimParams(t, scope, key))
	if err != nil {
		return idempotency.Response{}, err
	}
	if c.State != idempotency.ClaimReplay || c.Record.Response == nil {
		t.Fatalf("claim: %v, want a replay", c.State)
	}
	return *c.Record.Response, nil
}

// encSealed returns the envelope the inner store holds for (scope, key).
func encSealed(t testing.TB, inner idempotency.Store, scope, key string) idempotency.Response {
	t.Helper()
	rec, err := inner.Get(context.Background(), scope, key)
	if err != nil || rec.Response == nil {
		t.Fatalf("inner get: %+v %v", rec, err)
	}
	if rec.Response.Header != nil || !bytes.HasPrefix(rec.Response.Body, []byte("\xffPOE")) {
		t.Fatalf("inner store holds no envelope: %d %v %q", rec.Response.Code, rec.Response.Header, rec.Response.Body)
	}
	return *rec.Response
}

func allBytes() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func TestEncryptedRoundTrip(t *testing.T) {
	t.Parallel()
	inner := memstore.New(nil)
	s := idempotency.Encrypted(inner, encRing(t, "k1", map[string][]byte{"k1": encKey(1)}))
	cases := map[string]struct {
		status idempotency.Status
		resp   idempotency.Response
	}{
		"json": {idempotency.StatusCompleted, idempotency.Response{Code: 201,
			Header: http.Header{"Content-Type": {"application/json"}, "X-Order": {"o_1", "o_2"}},
			Body:   []byte(`{"b": 2,  "a":1}` + "\n")}},
		"binary": {idempotency.StatusCompleted, idempotency.Response{Code: 200,
			Header: http.Header{"X-Bin": {"\x00\xff\r\n", ""}, "lower-case-name": {"v"}, "Empty-Values": {}, "Nil-Values": nil},
			Body:   allBytes()}},
		"starts like an envelope": {idempotency.StatusCompleted, idempotency.Response{Code: 200, Body: []byte("\xffPOE\x01\x02k1 not sealed")}},
		"failed":                  {idempotency.StatusFailed, idempotency.Response{Code: 402, Body: []byte(`{"error":"declined"}`)}},
		"nil header and body":     {idempotency.StatusCompleted, idempotency.Response{Code: 204}},
		"empty header and body":   {idempotency.StatusCompleted, idempotency.Response{Code: 204, Header: http.Header{}, Body: []byte{}}},
		"large": {idempotency.StatusCompleted, idempotency.Response{Code: 200,
			Header: http.Header{"X-Long": {strings.Repeat("h", 1<<12)}}, Body: bytes.Repeat(allBytes(), 1<<10)}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			key := encRecordKey(t, "usr_A1", strings.ReplaceAll(name, " ", "-"))
			want := c.resp
			encComplete(t, s, "usr_A1", key, c.status, c.resp)
			if !reflect.DeepEqual(c.resp, want) {
				t.Fatal("Complete changed the caller's response")
			}
			sealed := encSealed(t, inner, "usr_A1", key)
			if sealed.Code != want.Code {
				t.Fatalf("status code in clear = %d, want %d", sealed.Code, want.Code)
			}
			got, err := encReplay(t, s, "usr_A1", key)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("replay differs:\n got  %#v\n want %#v", got, want)
			}
			rec, err := s.Get(context.Background(), "usr_A1", key)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Status != c.status || !reflect.DeepEqual(*rec.Response, want) {
				t.Fatalf("Get differs:\n got  %s %#v\n want %s %#v", rec.Status, *rec.Response, c.status, want)
			}
		})
	}
}

func TestEncryptedSealsEveryCompletionAnew(t *testing.T) {
	t.Parallel()
	inner := memstore.New(nil)
	s := idempotency.Encrypted(inner, encRing(t, "k1", map[string][]byte{"k1": encKey(1)}))
	secret := "jane.doe@example.com"
	resp := idempotency.Response{Code: 200, Header: http.Header{"X-Email": {secret}}, Body: []byte(secret)}
	k1, k2 := encRecordKey(t, "usr_A1", "one"), encRecordKey(t, "usr_A1", "two")
	encComplete(t, s, "usr_A1", k1, idempotency.StatusCompleted, resp)
	encComplete(t, s, "usr_A1", k2, idempotency.StatusCompleted, resp)
	a, b := encSealed(t, inner, "usr_A1", k1), encSealed(t, inner, "usr_A1", k2)
	if bytes.Equal(a.Body, b.Body) {
		t.Fatal("two sealings of the same response are equal: the nonce is not fresh")
	}
	for _, form := range []string{secret, hex.EncodeToString([]byte(secret)), base64.StdEncoding.EncodeToString([]byte(secret))} {
		if bytes.Contains(a.Body, []byte(form)) {
			t.Fatalf("the envelope contains the plaintext (%q)", form)
		}
	}
}

func TestEncryptedRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := memstore.New(nil)
	old := idempotency.Encrypted(inner, encRing(t, "k1", map[string][]byte{"k1": encKey(1)}))
	resp := idempotency.Response{Code: 201, Header: http.Header{"X-A": {"1"}}, Body: []byte("sealed by k1")}
	byK1 := encRecordKey(t, "usr_A1", "by-k1")
	encComplete(t, old, "usr_A1", byK1, idempotency.StatusCompleted, resp)

	// k2 becomes current; k1 stays in the ring to open older records.
	ring := encRing(t, "k2", map[string][]byte{"k1": encKey(1), "k2": encKey(2)})
	if ring.Current() != "k2" || fmt.Sprint(ring.KeyIDs()) != "[k1 k2]" {
		t.Fatalf("ring: %s %v", ring.Current(), ring.KeyIDs())
	}
	rotated := idempotency.Encrypted(inner, ring)
	if got, err := encReplay(t, rotated, "usr_A1", byK1); err != nil || !reflect.DeepEqual(got, resp) {
		t.Fatalf("record sealed by k1 after rotation: %#v %v", got, err)
	}
	byK2 := encRecordKey(t, "usr_A1", "by-k2")
	encComplete(t, rotated, "usr_A1", byK2, idempotency.StatusCompleted, resp)
	if env := encSealed(t, inner, "usr_A1", byK2); !bytes.HasPrefix(env.Body, []byte("\xffPOE\x01\x02k2")) {
		t.Fatalf("new record not sealed by the current key k2: %q", env.Body[:8])
	}

	// k1 removed from the ring: its records are refused, never replayed;
	// k2's still open.
	k2Only := idempotency.Encrypted(inner, encRing(t, "k2", map[string][]byte{"k2": encKey(2)}))
	_, err := encReplay(t, k2Only, "usr_A1", byK1)
	if !errors.Is(err, idempotency.ErrUndecryptable) || !strings.Contains(err.Error(), `"k1"`) {
		t.Fatalf("claim of a record whose key left the ring: err = %v, want ErrUndecryptable naming k1", err)
	}
	if _, err := k2Only.Get(ctx, "usr_A1", byK1); !errors.Is(err, idempotency.ErrUndecryptable) {
		t.Fatalf("get: err = %v", err)
	}
	if got, err := encReplay(t, k2Only, "usr_A1", byK2); err != nil || !reflect.DeepEqual(got, resp) {
		t.Fatalf("record sealed by k2: %#v %v", got, err)
	}
	// A ring with the same key id but another key: authentication fails.
	impostor := idempotency.Encrypted(inner, encRing(t, "k2", map[string][]byte{"k2": encKey(9)}))
	if _, err := encReplay(t, impostor, "usr_A1", byK2); !errors.Is(err, idempotency.ErrUndecryptable) {
		t.Fatalf("wrong key under the right id: err = %v", err)
	}
}

// Through the executor, an undecryptable record is an error: the action
// does not run and nothing is replayed.
func TestEncryptedUndecryptableNeverReplayed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := memstore.New(nil)
	encComplete(t, idempotency.Encrypted(inner, encRing(t, "k1", map[string][]byte{"k1": encKey(1)})),
		"usr_A1", encRecordKey(t, "usr_A1", "x"), idempotency.StatusCompleted, idempotency.Response{Code: 200, Body: []byte("secret")})
	e, err := idempotency.New(idempotency.Encrypted(inner, encRing(t, "k2", map[string][]byte{"k2": encKey(2)})), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := encClaimParams(t, "usr_A1", encRecordKey(t, "usr_A1", "x"))
	var runs atomic.Int64
	res, err := e.Do(ctx, idempotency.Request{Scope: p.Scope, Key: p.Key, Fingerprint: p.Fingerprint},
		func(context.Context) (idempotency.Response, error) {
			runs.Add(1)
			return idempotency.Response{Code: 200}, nil
		})
	if !errors.Is(err, idempotency.ErrUndecryptable) || runs.Load() != 0 || res.Replayed || res.Response.Body != nil {
		t.Fatalf("Do: %+v %v (runs %d)", res, err, runs.Load())
	}
	if strings.Contains(err.Error(), p.Key) || strings.Contains(err.Error(), "secret") {
		t.Fatalf("error names more than the key id: %v", err)
	}
}

// A sealed response is bound to its record: changed in any byte after the
// magic, or put under another record, status or status code, it is refused.
// The forgeries are planted with the inner store (another memstore holding
// the same (scope, key), as a restored backup would).
func TestEncryptedTamperingAndMoving(t *testing.T) {
	t.Parallel()
	kr := encRing(t, "k1", map[string][]byte{"k1": encKey(1)})
	inner := memstore.New(nil)
	const scope = "usr_A1"
	key := encRecordKey(t, scope, "orig")
	resp := idempotency.Response{Code: 201, Header: http.Header{"X-A": {"1"}}, Body: []byte("the original body")}
	encComplete(t, idempotency.Encrypted(inner, kr), scope, key, idempotency.StatusCompleted, resp)
	env := encSealed(t, inner, scope, key)

	refused := func(t *testing.T, scope, key string, status idempotency.Status, planted idempotency.Response) {
		t.Helper()
		other := memstore.New(nil)
		encComplete(t, other, scope, key, status, planted)
		s := idempotency.Encrypted(other, kr)
		if _, err := s.Get(context.Background(), scope, key); !errors.Is(err, idempotency.ErrUndecryptable) {
			t.Fatalf("Get: err = %v, want ErrUndecryptable", err)
		}
		if c, err := s.Claim(context.Background(), encClaimParams(t, scope, key)); !errors.Is(err, idempotency.ErrUndecryptable) {
			t.Fatalf("Claim: %v %v, want ErrUndecryptable", c.State, err)
		}
	}

	// The control: the same envelope under the same identity opens.
	restored := memstore.New(nil)
	encComplete(t, restored, scope, key, idempotency.StatusCompleted, env)
	if got, err := encReplay(t, idempotency.Encrypted(restored, kr), scope, key); err != nil || !reflect.DeepEqual(got, resp) {
		t.Fatalf("restored envelope: %#v %v", got, err)
	}

	t.Run("FlippedByte", func(t *testing.T) {
		for i := len("\xffPOE"); i < len(env.Body); i++ {
			bad := bytes.Clone(env.Body)
			bad[i] ^= 0x01
			refused(t, scope, key, idempotency.StatusCompleted, idempotency.Response{Code: env.Code, Body: bad})
		}
	})
	t.Run("Truncated", func(t *testing.T) {
		for _, n := range []int{5, 6, 8, 20, len(env.Body) - 1} {
			refused(t, scope, key, idempotency.StatusCompleted, idempotency.Response{Code: env.Code, Body: env.Body[:n]})
		}
	})
	t.Run("OtherKey", func(t *testing.T) {
		refused(t, scope, encRecordKey(t, scope, "other"), idempotency.StatusCompleted, env)
	})
	t.Run("OtherScope", func(t *testing.T) {
		refused(t, "usr_B2", key, idempotency.StatusCompleted, env)
	})
	t.Run("OtherStatus", func(t *testing.T) {
		refused(t, scope, key, idempotency.StatusFailed, env)
	})
	t.Run("OtherCode", func(t *testing.T) {
		refused(t, scope, key, idempotency.StatusCompleted, idempotency.Response{Code: 200, Body: env.Body})
	})
}

// Records stored before encryption was turned on are returned as stored.
func TestEncryptedReadsRecordsStoredBefore(t *testing.T) {
	t.Parallel()
	inner := memstore.New(nil)
	key := encRecordKey(t, "usr_A1", "legacy")
	plain := idempotency.Response{Code: 200, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("stored in clear")}
	encComplete(t, inner, "usr_A1", key, idempotency.StatusCompleted, plain)
	s := idempotency.Encrypted(inner, encRing(t, "k1", map[string][]byte{"k1": encKey(1)}))
	if got, err := encReplay(t, s, "usr_A1", key); err != nil || !reflect.DeepEqual(got, plain) {
		t.Fatalf("claim: %#v %v", got, err)
	}
	if rec, err := s.Get(context.Background(), "usr_A1", key); err != nil || !reflect.DeepEqual(*rec.Response, plain) {
		t.Fatalf("get: %+v %v", rec, err)
	}
}

// bareStore hides every optional interface of its Store.
type bareStore struct{ idempotency.Store }

// sizerOnly and abandonerOnly keep one of them.
type sizerOnly struct {
	idempotency.Store
	idempotency.Sizer
}

type abandonerOnly struct {
	idempotency.Store
	idempotency.Abandoner
}

// The optional interfaces of the inner store pass through, exactly those.
func TestEncryptedKeepsOptionalInterfaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	kr := encRing(t, "k1", map[string][]byte{"k1": encKey(1)})
	inner := memstore.New(nil)
	encComplete(t, inner, "usr_A1", encRecordKey(t, "usr_A1", "a"), idempotency.StatusCompleted, idempotency.Response{Code: 200})
	abandoner, innerAbandons := idempotency.Store(inner).(idempotency.Abandoner)
	for name, c := range map[string]struct {
		inner            idempotency.Store
		sizer, abandoner bool
	}{
		"memstore":  {inner, true, innerAbandons},
		"bare":      {bareStore{inner}, false, false},
		"sizer":     {sizerOnly{inner, inner}, true, false},
		"abandoner": {abandonerOnly{inner, abandoner}, false, true},
	} {
		s := idempotency.Encrypted(c.inner, kr)
		sizer, ok := s.(idempotency.Sizer)
		if ok != c.sizer {
			t.Fatalf("%s: Sizer = %v, want %v", name, ok, c.sizer)
		}
		if ok {
			if n, err := sizer.ApproxSize(ctx); err != nil || n != 1 {
				t.Fatalf("%s: ApproxSize = %d, %v", name, n, err)
			}
		}
		if _, ok := s.(idempotency.Abandoner); ok != c.abandoner {
			t.Fatalf("%s: Abandoner = %v, want %v", name, ok, c.abandoner)
		}
	}
}

func TestEncryptedPanicsOnNil(t *testing.T) {
	t.Parallel()
	kr := encRing(t, "k1", map[string][]byte{"k1": encKey(1)})
	for name, f := range map[string]func(){
		"inner": func() { idempotency.Encrypted(nil, kr) },
		"kr":    func() { idempotency.Encrypted(memstore.New(nil), nil) },
		"zero":  func() { idempotency.Encrypted(memstore.New(nil), &idempotency.Keyring{}) },
	} {
		func() {
			defer func() {
				if err, ok := recover().(error); !ok || !errors.Is(err, idempotency.ErrInvalid) {
					t.Fatalf("%s: recovered %v, want an *InvalidError", name, err)
				}
			}()
			f()
		}()
	}
}

// secretForms are the ways key material could show in an error or a
// printout.
func secretForms(key []byte) []string {
	return []string{string(key), hex.EncodeToString(key), base64.StdEncoding.EncodeToString(key),
		base64.RawStdEncoding.EncodeToString(key), fmt.Sprint(key), fmt.Sprintf("%x", key)}
}

func TestNewKeyringRefusals(t *testing.T) {
	t.Parallel()
	good := encKey(0x42)
	keyLike := base64.StdEncoding.EncodeToString(good) // a key pasted as an id
	cases := []struct {
		name    string
		current string
		keys    map[string][]byte
		field   string
	}{
		{"no keys", "k1", nil, "keys"},
		{"empty id", "k1", map[string][]byte{"k1": good, "": good}, "keys"},
		{"id too long", "k1", map[string][]byte{"k1": good, strings.Repeat("k", 33): good}, "keys"},
		{"id charset", "k1", map[string][]byte{"k1": good, "k 2": good}, "keys"},
		{"key as id", "k1", map[string][]byte{"k1": good, keyLike: good}, "keys"},
		{"short key", "k1", map[string][]byte{"k1": good[:16]}, `keys["k1"]`},
		{"long key", "k1", map[string][]byte{"k1": append(bytes.Clone(good), 0x42)}, `keys["k1"]`},
		{"no current", "", map[string][]byte{"k1": good}, "current"},
		{"unknown current", "k2", map[string][]byte{"k1": good}, "current"},
		{"current is a key", keyLike, map[string][]byte{"k1": good}, "current"},
	}
	for _, c := range cases {
		_, err := idempotency.NewKeyring(c.current, c.keys)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Fatalf("%s: err = %v, want an InvalidError naming %s", c.name, err, c.field)
		}
		for _, form := range append(secretForms(good), keyLike) {
			if strings.Contains(err.Error(), form) {
				t.Fatalf("%s: error shows key material: %v", c.name, err)
			}
		}
	}
	// Key ids at the limits are fine.
	id32 := strings.Repeat("a", 32)
	if _, err := idempotency.NewKeyring(id32, map[string][]byte{id32: good, "A-z_09": good}); err != nil {
		t.Fatal(err)
	}
}

func TestParseKeyring(t *testing.T) {
	t.Parallel()
	k1, k2 := encKey(1), encKey(2)
	b1, b2 := base64.StdEncoding.EncodeToString(k1), base64.RawStdEncoding.EncodeToString(k2)
	kr, err := idempotency.ParseKeyring(" current = 2025-06 ; 2024-12=" + b1 + ";\n2025-06=" + b2 + ";")
	if err != nil {
		t.Fatal(err)
	}
	if kr.Current() != "2025-06" || fmt.Sprint(kr.KeyIDs()) != "[2024-12 2025-06]" {
		t.Fatalf("parsed: %s", kr)
	}
	// The parsed keys are the given ones: a record sealed with the parsed
	// ring opens with a ring built from the raw keys, and the other way.
	inner := memstore.New(nil)
	resp := idempotency.Response{Code: 200, Body: []byte("x")}
	encComplete(t, idempotency.Encrypted(inner, kr), "usr_A1", encRecordKey(t, "usr_A1", "p"), idempotency.StatusCompleted, resp)
	direct := idempotency.Encrypted(inner, encRing(t, "2024-12", map[string][]byte{"2024-12": k1, "2025-06": k2}))
	if got, err := encReplay(t, direct, "usr_A1", encRecordKey(t, "usr_A1", "p")); err != nil || !reflect.DeepEqual(got, resp) {
		t.Fatalf("parsed ring's record opened by the raw keys: %#v %v", got, err)
	}
	encComplete(t, direct, "usr_A1", encRecordKey(t, "usr_A1", "q"), idempotency.StatusCompleted, resp)
	if got, err := encReplay(t, idempotency.Encrypted(inner, kr), "usr_A1", encRecordKey(t, "usr_A1", "q")); err != nil || !reflect.DeepEqual(got, resp) {
		t.Fatalf("raw keys' record opened by the parsed ring: %#v %v", got, err)
	}

	short := base64.StdEncoding.EncodeToString(k1[:16])
	for spec, field := range map[string]string{
		"":                                  "keyring",
		" ; ":                               "keyring",
		"current=k1;k1" + b2:                "keyring",
		"current=k1;k1" + b1:                "keys", // its padding splits it: a 45-byte id
		"k1=" + b1:                          "current",
		"current=k1;current=k1;k1=" + b1:    "current",
		"current=k2;k1=" + b1:               "current",
		"current=k1":                        "keys",
		"current=k1;" + b1 + "=" + b1:       "keys",
		"current=k1;k1=" + b1 + ";k1=" + b1: `keys["k1"]`,
		"current=k1;k1=" + b1[:40] + "!!!!": `keys["k1"]`,
		"current=k1;k1=" + short:            `keys["k1"]`,
		"current=k1;k1=" + hex.EncodeToString(k1): `keys["k1"]`,
	} {
		_, err := idempotency.ParseKeyring(spec)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != field {
			t.Fatalf("%q: err = %v, want an InvalidError naming %s", spec, err, field)
		}
		for _, form := range append(secretForms(k1), b1, b1[:40], short, hex.EncodeToString(k1)) {
			if strings.Contains(err.Error(), form) {
				t.Fatalf("%q: error shows key material: %v", spec, err)
			}
		}
	}
}

// A keyring prints its ids, never its keys, whatever the verb.
func TestKeyringNeverPrintsKeys(t *testing.T) {
	t.Parallel()
	key := encKey(0x5a)
	kr := encRing(t, "k1", map[string][]byte{"k1": key})
	want := "Keyring(current=k1, ids=k1)"
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		if got := fmt.Sprintf(verb, kr); got != want {
			t.Fatalf("Sprintf(%s) = %q, want %q", verb, got, want)
		}
	}
	if got := fmt.Sprintf("%+v", struct{ KR *idempotency.Keyring }{kr}); strings.Contains(got, "0x5a") || strings.Contains(got, "5a5a") {
		t.Fatalf("nested: %s", got)
	}
}

// The conformance suite, replays byte for byte included, holds through the
// wrapper. Clock as in memstore's own conformance test.
func TestEncryptedConformance(t *testing.T) {
	t.Parallel()
	kr := encRing(t, "k2", map[string][]byte{"k1": encKey(1), "k2": encKey(2)})
	idempotencytest.Exercise(t, func(t *testing.T) idempotencytest.Harness {
		var offset atomic.Int64
		inner := memstore.New(&memstore.Config{
			Clock:      func() time.Time { return time.Now().Add(time.Duration(offset.Load())) },
			EvictAfter: -1,
		})
		return idempotencytest.Harness{
			Store:   idempotency.Encrypted(inner, kr),
			Advance: func(_ testing.TB, d time.Duration) { offset.Add(int64(d)) },
		}
	})
}
