package idempotency_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/memstore"
)

const (
	fuzzScope  = "u1"
	fuzzAction = "createItem"
)

var keyChars = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)

// referenceKey reads an Idempotency-Key header as the middleware's
// documentation says, independently of the middleware: exactly one value;
// around it optional whitespace (SP, HTAB); a bare token or a Structured
// Field string (RFC 8941: printable ASCII between double quotes, with \" and
// \\ the only escapes); the key then 1 or more letters, digits and . _ : -,
// short enough to compose a key of at most MaxKeyLen bytes under scope.
func referenceKey(values []string, scope string) (string, bool) {
	if len(values) != 1 {
		return "", false
	}
	v := strings.Trim(values[0], " \t")
	if strings.HasPrefix(v, `"`) {
		var b strings.Builder
		for i := 1; ; i++ {
			if i >= len(v) {
				return "", false // unterminated
			}
			c := v[i]
			if c == '"' {
				if i != len(v)-1 {
					return "", false
				}
				break
			}
			if c == '\\' {
				if i++; i >= len(v) || v[i] != '"' && v[i] != '\\' {
					return "", false
				}
				c = v[i]
			} else if c < 0x20 || c > 0x7e {
				return "", false
			}
			b.WriteByte(c)
		}
		v = b.String()
	}
	if !keyChars.MatchString(v) || len(scope)+1+len(fuzzAction)+1+len(v) > idempotency.MaxKeyLen {
		return "", false
	}
	return v, true
}

// sfString formats s as a Structured Field string.
func sfString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// keyValues is the header's values: none, one, or two.
func keyValues(key, extra string, n uint8) []string {
	switch n % 4 {
	case 0:
		return nil
	case 1:
		return []string{key, extra}
	default:
		return []string{key}
	}
}

// readKey is what the middleware does with the header: parse it, then
// compose the key under fuzzScope.
func readKey(values []string) (string, error) {
	intent, err := idempotency.ParseKeyHeader(values)
	if err != nil {
		return "", err
	}
	if _, err := idempotency.ComposeKey(fuzzScope, fuzzAction, intent); err != nil {
		return "", err
	}
	return intent, nil
}

func addKeySeeds(add func(key, extra string, n uint8)) {
	for _, key := range []string{
		"k-1", "0190b3c2-7d1e-4a8b-9c3d-2e5f6a7b8c9d", "01J2Z3Y4X5W6V7T8S9R0QPNMKH", "order:42.v1_retry",
		`"k-1"`, ` "k-1" `, "\t k-1 \t", `"a\"b"`, `"a\\b"`, `"abc\q"`, `"abc`, `"`, `""`, `" "`, `"a"b"`, `"k\"`,
		"a key", "k\x00", "k\u00a0", "\u00a0k", "k\x85", "k\v", "0\n", "\"k\"\u2003", "ключ", "", " ", "\t",
		strings.Repeat("k", idempotency.MaxKeyLen-len(fuzzScope)-len(fuzzAction)-2),
		strings.Repeat("k", idempotency.MaxKeyLen-len(fuzzScope)-len(fuzzAction)-1),
		sfString(strings.Repeat("k", 300)),
	} {
		add(key, "", 2)
	}
	add("k-1", "k-1", 1)
	add("k-1", "k-2", 1)
	add("k-1", "", 0)
}

// FuzzParseKeyHeader: the key header is read exactly as documented (see
// referenceKey); every refusal is an *InvalidError naming the key header
// (or, for a key of bad characters or length, the part of the key at fault);
// an accepted key parses back to itself as a bare token and as an sf-string,
// with whitespace around; and whatever ParseKeyHeader returns, sf-string
// formatted, parses back to itself.
func FuzzParseKeyHeader(f *testing.F) {
	addKeySeeds(func(key, extra string, n uint8) { f.Add(key, extra, n) })
	f.Fuzz(func(t *testing.T, key, extra string, n uint8) {
		values := keyValues(key, extra, n)
		intent, err := idempotency.ParseKeyHeader(values)
		var ie *idempotency.InvalidError
		if err != nil && (!errors.As(err, &ie) || ie.Field != "key header" || !errors.Is(err, idempotency.ErrInvalid)) {
			t.Fatalf("%q: %v: want an *InvalidError naming the key header", values, err)
		}
		if len(values) != 1 && err == nil {
			t.Fatalf("%d values accepted as %q", len(values), intent)
		}
		if err == nil {
			if intent == "" {
				t.Fatalf("%q read as an empty key", values)
			}
			if again, err := idempotency.ParseKeyHeader([]string{sfString(intent)}); err != nil || again != intent {
				t.Fatalf("%q read as %q; as an sf-string %s it reads as %q, %v", values, intent, sfString(intent), again, err)
			}
		}

		got, err := readKey(values)
		want, ok := referenceKey(values, fuzzScope)
		if ok != (err == nil) || got != want {
			t.Fatalf("%q read as %q, %v; the documented reading is %q, %v", values, got, err, want, ok)
		}
		if err != nil && !errors.As(err, &ie) {
			t.Fatalf("%q: %v: want an *InvalidError", values, err)
		}
		if ok {
			for _, form := range []string{want, sfString(want), " \t" + want + "\t ", " " + sfString(want) + "\t"} {
				if got, err := readKey([]string{form}); err != nil || got != want {
					t.Fatalf("key %q formatted as %q reads back as %q, %v", want, form, got, err)
				}
			}
		}
	})
}

// FuzzMiddlewareHeaders sends fuzzed Authorization (the scope is its bearer
// token), Idempotency-Key and Accept headers through the middleware, with
// entropy required (the default) or not (AllowLowEntropyKeys): a streaming
// request passes through unprotected; a missing or unusable scope is 401; a
// key the documented reading refuses is 400 naming the header, and so is,
// by default, a key that cannot carry 128 bits (CheckEntropy), the handler
// not run; an accepted key runs the handler once, and the same request
// again is a replay.
func FuzzMiddlewareHeaders(f *testing.F) {
	for _, allowLow := range []bool{false, true} {
		addKeySeeds(func(key, extra string, n uint8) {
			f.Add("Bearer "+fuzzScope, key, extra, n, "application/json", allowLow)
		})
	}
	const uuid4 = "0190b3c2-7d1e-4a8b-9c3d-2e5f6a7b8c9d"
	for _, auth := range []string{"", "Bearer ", "Basic dTE6cA==", "Bearer u 1", "Bearer u_1.x:y-z", "Bearer " + strings.Repeat("u", idempotency.MaxScopeLen+1)} {
		f.Add(auth, uuid4, "", uint8(2), "", false)
	}
	f.Add("Bearer "+fuzzScope, "k-1", "", uint8(2), "text/event-stream", false)
	f.Add("Bearer "+fuzzScope, uuid4, "", uint8(2), "text/html, text/event-stream;q=0.9", false)
	f.Fuzz(func(t *testing.T, auth, key, extra string, n uint8, accept string, allowLow bool) {
		exec, err := idempotency.New(memstore.New(nil), &idempotency.Config{LockTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		mw, err := idempotency.Middleware(exec, idempotency.MiddlewareConfig{
			Scope: func(r *http.Request) string {
				scope, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
				return scope
			},
			Routes:              []idempotency.Route{{Pattern: "POST /items", Action: fuzzAction, RequireKey: true}},
			RateLimit:           -1,
			AllowLowEntropyKeys: allowLow,
		})
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls++
			w.WriteHeader(http.StatusCreated)
		}))
		values := keyValues(key, extra, n)
		send := func() *httptest.ResponseRecorder {
			r := httptest.NewRequest(http.MethodPost, "/items", strings.NewReader(`{"name":"pen"}`))
			r.Header.Set("Authorization", auth)
			r.Header.Set("Accept", accept)
			for _, v := range values {
				r.Header.Add("Idempotency-Key", v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		w := send()
		scope, _ := strings.CutPrefix(auth, "Bearer ")
		want, ok := referenceKey(values, scope)
		refused := func(code int, detail string) {
			t.Helper()
			if w.Code != code || w.Header().Get("Content-Type") != "application/problem+json" || !strings.Contains(w.Body.String(), detail) || calls != 0 {
				t.Fatalf("auth %q, key %q: %d %s after %d calls; want %d naming %q, the handler not run", auth, values, w.Code, w.Body, calls, code, detail)
			}
		}
		switch {
		case strings.Contains(accept, "text/event-stream"):
			if w.Code != http.StatusCreated || calls != 1 || send().Header().Get("Idempotent-Replayed") != "" || calls != 2 {
				t.Fatalf("a streaming request: %d after %d calls; want it passed through, unprotected", w.Code, calls)
			}
		case idempotency.ValidateScope(scope) != nil:
			refused(http.StatusUnauthorized, "unauthenticated")
		case len(values) == 0:
			refused(http.StatusBadRequest, "requires an Idempotency-Key header")
		case !ok:
			refused(http.StatusBadRequest, "The Idempotency-Key header is malformed")
		case !allowLow && idempotency.CheckEntropy(want) != nil:
			refused(http.StatusBadRequest, "The Idempotency-Key header must carry at least 128 bits of entropy")
		default:
			if w.Code != http.StatusCreated || calls != 1 {
				t.Fatalf("key %q (%q): %d %s after %d calls; want the handler run once", values, want, w.Code, w.Body, calls)
			}
			if again := send(); again.Code != http.StatusCreated || again.Header().Get("Idempotent-Replayed") != "true" || calls != 1 {
				t.Fatalf("key %q again: %d, replayed %q, %d calls; want a replay", values, again.Code, again.Header().Get("Idempotent-Replayed"), calls)
			}
		}
	})
}
