package pgstore_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/idempotencytest"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest"
)

func encryptRing(t testing.TB) *idempotency.Keyring {
	t.Helper()
	kr, err := idempotency.NewKeyring("k2", map[string][]byte{
		"k1": bytes.Repeat([]byte{1}, idempotency.KeySize),
		"k2": bytes.Repeat([]byte{2}, idempotency.KeySize),
	})
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// The conformance suite holds through the encrypting wrapper on
// PostgreSQL, replays byte for byte included.
func TestEncryptedConformance(t *testing.T) {
	t.Parallel()
	kr := encryptRing(t)
	idempotencytest.Exercise(t, func(t *testing.T) idempotencytest.Harness {
		b := setup(t)
		return idempotencytest.Harness{Store: idempotency.Encrypted(b.store, kr), Advance: advance(b.pool)}
	})
}

// encryptRow is what the table holds for one record, read with plain SQL:
// response_body (JSONB) and the whole row as PostgreSQL prints it (bytea in
// hex), beside response_raw itself.
type encryptRow struct {
	code int32
	meta *string
	raw  []byte
	text string
}

func readEncryptRow(t *testing.T, b bundle, scope, key string) encryptRow {
	t.Helper()
	var r encryptRow
	err := b.pool.QueryRow(context.Background(), `SELECT response_code, response_body::text, response_raw, s::text
		  FROM idempotency_store s WHERE idempotency_key = $1 AND user_id = $2`, key, scope).
		Scan(&r.code, &r.meta, &r.raw, &r.text)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// plaintextForms are the ways a plaintext could show in a column: as is,
// hex (bytea's text form), and base64 at each of its three alignments.
func plaintextForms(s string) []string {
	forms := []string{s, hex.EncodeToString([]byte(s)), strings.ToUpper(hex.EncodeToString([]byte(s)))}
	for off := 0; off < 3; off++ {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			e := enc.EncodeToString([]byte(s[off:]))
			forms = append(forms, e[:len(e)-4]) // the tail depends on what follows
		}
	}
	return forms
}

func containsAny(haystack []byte, forms []string) (string, bool) {
	for _, f := range forms {
		if bytes.Contains(haystack, []byte(f)) {
			return f, true
		}
	}
	return "", false
}

// The requirement: the table holds no plaintext of an encrypted
// response, neither its body nor its headers, in any common encoding, while
// a replay through the wrapper gives the plaintext back byte for byte.
func TestEncryptedTableHoldsNoPlaintext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const (
		bodySecret   = "card 4111-1111-1111-1111 of Jane Doe"
		headerSecret = "jane.doe@example.com"
	)
	want := idempotency.Response{Code: 201,
		Header: http.Header{"Content-Type": {"application/json"}, "X-Customer-Email": {headerSecret}},
		Body:   []byte(`{"holder": "` + bodySecret + `"}` + "\n\x00\xff")}
	forms := append(plaintextForms(bodySecret), plaintextForms(headerSecret)...)
	forms = append(forms, "X-Customer-Email", "application/json")

	exec := func(s idempotency.Store, intent string) (idempotency.Request, idempotency.Result) {
		t.Helper()
		e, err := idempotency.New(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		req := idempotency.Request{Scope: "usr_A1", Key: "usr_A1_charge_" + intent, Fingerprint: mustFP(t, intent)}
		res, err := e.Do(ctx, req, func(context.Context) (idempotency.Response, error) { return want, nil })
		if err != nil {
			t.Fatal(err)
		}
		return req, res
	}

	// The control: without the wrapper, the check finds the plaintext.
	req, _ := exec(b.store, "plain")
	row := readEncryptRow(t, b, req.Scope, req.Key)
	if row.meta == nil {
		t.Fatal("control: response_body is NULL")
	}
	if _, found := containsAny(append([]byte(*row.meta), row.raw...), forms); !found {
		t.Fatal("control: the plaintext is not found in a row stored without encryption; the check below proves nothing")
	}
	if _, found := containsAny([]byte(row.text), forms); !found {
		t.Fatal("control: the plaintext is not found in the row's text form")
	}

	sealed := idempotency.Encrypted(b.store, encryptRing(t))
	req, first := exec(sealed, "sealed")
	if first.Replayed {
		t.Fatal("first request replayed")
	}
	row = readEncryptRow(t, b, req.Scope, req.Key)
	if row.meta != nil {
		t.Fatalf("response_body holds %q, want NULL: headers must be sealed with the body", *row.meta)
	}
	if row.code != 201 {
		t.Fatalf("response_code = %d, want 201 in clear", row.code)
	}
	if !bytes.HasPrefix(row.raw, []byte("\xffPOE\x01\x02k2")) {
		t.Fatalf("response_raw is no envelope sealed by k2: %q", row.raw[:min(len(row.raw), 12)])
	}
	if f, found := containsAny(row.raw, forms); found {
		t.Fatalf("response_raw contains the plaintext (%q)", f)
	}
	if f, found := containsAny([]byte(row.text), forms); found {
		t.Fatalf("the row contains the plaintext (%q): %s", f, row.text)
	}

	// A replay through the wrapper gives it back byte for byte.
	e, err := idempotency.New(sealed, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Do(ctx, req, func(context.Context) (idempotency.Response, error) {
		t.Fatal("the action ran again")
		return idempotency.Response{}, nil
	})
	if err != nil || !res.Replayed {
		t.Fatalf("replay: %+v %v", res, err)
	}
	if !reflect.DeepEqual(res.Response, want) {
		t.Fatalf("replay differs:\n got  %#v\n want %#v", res.Response, want)
	}
	rec, err := sealed.Get(ctx, req.Scope, req.Key)
	if err != nil || !reflect.DeepEqual(*rec.Response, want) {
		t.Fatalf("get: %+v %v", rec, err)
	}
}

// A sealed response moved to another row, or whose status code is changed
// in the table, is refused, never replayed.
func TestEncryptedRowsBoundToTheirRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	s := idempotency.Encrypted(b.store, encryptRing(t))
	e, err := idempotency.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	reqs := map[string]idempotency.Request{}
	for _, intent := range []string{"a", "b", "c"} {
		reqs[intent] = idempotency.Request{Scope: "usr_A1", Key: "usr_A1_charge_" + intent, Fingerprint: mustFP(t, intent)}
		_, err := e.Do(ctx, reqs[intent], func(context.Context) (idempotency.Response, error) {
			return idempotency.Response{Code: 201, Body: []byte("body of " + intent)}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.pool.Exec(ctx, `UPDATE idempotency_store
		   SET response_raw = (SELECT response_raw FROM idempotency_store WHERE idempotency_key = $1)
		 WHERE idempotency_key = $2`, reqs["a"].Key, reqs["b"].Key); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE idempotency_store SET response_code = 200 WHERE idempotency_key = $1`, reqs["c"].Key); err != nil {
		t.Fatal(err)
	}
	for _, intent := range []string{"b", "c"} {
		ran := false
		res, err := e.Do(ctx, reqs[intent], func(context.Context) (idempotency.Response, error) {
			ran = true
			return idempotency.Response{Code: 201}, nil
		})
		if !errors.Is(err, idempotency.ErrUndecryptable) || ran || res.Replayed {
			t.Fatalf("%s: %+v %v (ran %v), want ErrUndecryptable", intent, res, err, ran)
		}
	}
	res, err := e.Do(ctx, reqs["a"], func(context.Context) (idempotency.Response, error) { return idempotency.Response{}, nil })
	if err != nil || !res.Replayed || string(res.Response.Body) != "body of a" {
		t.Fatalf("untouched record: %+v %v", res, err)
	}
}

// pgstore's own Keyring seals on every path the Executor has, including
// the one-transaction modes that write through CompleteTx and the
// pipelined commit, which the Encrypted wrapper cannot reach.
func TestStoreKeyringSealsEveryPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.MigratedURL(t)
	pool := pgtest.PoolURL(t, url)
	store := mustStore(t, pool, &pgstore.Config{Keyring: encryptRing(t)})
	b := bundle{pool: pool, store: store, url: url}
	exec, err := pgstore.NewExecutor(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "iban DE89 3704 0044 0532 0130 00"
	want := idempotency.Response{Code: 201, Header: http.Header{"X-Iban": {secret}}, Body: []byte(`{"iban":"` + secret + `"}`)}
	forms := plaintextForms(secret)
	paths := map[string]func(idempotency.Request) (idempotency.Result, error){
		"Do": func(r idempotency.Request) (idempotency.Result, error) {
			return exec.Do(ctx, r, func(context.Context) (idempotency.Response, error) { return want, nil })
		},
		"DoTx": func(r idempotency.Request) (idempotency.Result, error) {
			return exec.DoTx(ctx, r, func(context.Context, pgx.Tx) (idempotency.Response, error) { return want, nil })
		},
		"WithTx": func(r idempotency.Request) (idempotency.Result, error) {
			return exec.WithTx().Do(ctx, r, func(context.Context) (idempotency.Response, error) { return want, nil })
		},
	}
	for name, do := range paths {
		req := idempotency.Request{Scope: "usr_A1", Key: "usr_A1_charge_" + name, Fingerprint: mustFP(t, name)}
		if _, err := do(req); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		row := readEncryptRow(t, b, req.Scope, req.Key)
		if f, found := containsAny(append([]byte(row.text), row.raw...), forms); found || row.meta != nil {
			t.Fatalf("%s: the row holds the plaintext (%q) or clear headers", name, f)
		}
		res, err := do(req)
		if err != nil || !res.Replayed || !bytes.Equal(res.Response.Body, want.Body) || res.Response.Header.Get("X-Iban") != secret {
			t.Fatalf("%s replay: %+v %v", name, res, err)
		}
	}
}

// The suite, its transactional checks included, holds with the store's
// own keyring, which seals what CompleteTx, RunTx and SupersedeTx record
// as it seals the rest. (The Encrypted wrapper above is a plain Store, not
// a TxStore: it has no transactional checks to run.)
func TestStoreKeyringConformance(t *testing.T) {
	t.Parallel()
	idempotencytest.Exercise(t, func(t *testing.T) idempotencytest.Harness {
		url := pgtest.MigratedURL(t)
		pool := pgtest.PoolURL(t, url)
		return idempotencytest.Harness{Store: mustStore(t, pool, &pgstore.Config{Keyring: encryptRing(t)}), Advance: advance(pool)}
	})
	idempotencytest.ExerciseTx(t, func(t *testing.T) idempotencytest.TxHarness[pgx.Tx] {
		pool := pgtest.PoolURL(t, pgtest.MigratedURL(t))
		return txHarness(t, pool, mustStore(t, pool, &pgstore.Config{Keyring: encryptRing(t)}), false)
	})
}
