package idempotency_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/google/uuid"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/memstore"
)

type mwBundle struct {
	h     http.Handler
	calls *atomic.Int64
	logs  *bytes.Buffer
	store *memstore.Store
	// held receives a request sent with ?hold=1 once its handler runs;
	// the handler then waits for release.
	held    chan struct{}
	release chan struct{}
}

// mwSetup protects POST /items with a handler that answers what the
// request's "status" query asks, after "sleep", or once released when it
// asks "hold".
func mwSetup(t *testing.T, mutate func(*idempotency.MiddlewareConfig)) mwBundle {
	t.Helper()
	store := memstore.New(nil)
	exec, err := idempotency.New(store, &idempotency.Config{LockTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := idempotency.MiddlewareConfig{
		Scope:  func(r *http.Request) string { return r.Header.Get("X-User") },
		Routes: []idempotency.Route{{Pattern: "POST /items", Action: "createItem", Fields: []string{"name", "price"}}},
		Logger: logger,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	mw, err := idempotency.Middleware(exec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	held, release := make(chan struct{}, 1), make(chan struct{})
	mux := http.NewServeMux()
	handler := func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if d, err := time.ParseDuration(r.URL.Query().Get("sleep")); err == nil {
			time.Sleep(d)
		}
		if r.URL.Query().Get("hold") != "" {
			held <- struct{}{}
			<-release
		}
		status := http.StatusCreated
		switch r.URL.Query().Get("status") {
		case "400":
			status = http.StatusBadRequest
		case "500":
			status = http.StatusInternalServerError
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Set-Cookie", "session=secret")
		w.Header().Set("X-Internal", "not replayed")
		w.Header().Set("Location", "/items/1")
		w.WriteHeader(status)
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write([]byte("call " + string(rune('0'+n)) + " saw " + string(body) + " \x00\xff"))
	}
	mux.HandleFunc("POST /items", handler)
	mux.HandleFunc("POST /other", handler)
	return mwBundle{h: mw(mux), calls: &calls, logs: &logs, store: store, held: held, release: release}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func do(h http.Handler, path, user, key, body string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	if user != "" {
		r.Header.Set("X-User", user)
	}
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

const item = `{"name":"pen","price":"1.50","note":"ignored"}`

func TestMiddlewareReplayAllowlistAndBytes(t *testing.T) {
	t.Parallel()
	key := uuid.NewString()
	b := mwSetup(t, nil)
	first := do(b.h, "/items", "u1", key, item)
	if first.Code != 201 || first.Header().Get("Set-Cookie") == "" {
		t.Fatalf("first: %d %v", first.Code, first.Header())
	}
	// Same significant fields, other order, other insignificant field.
	again := do(b.h, "/items", "u1", key, `{"price":"1.50", "name":"pen","note":"other"}`)
	if again.Code != 201 || again.Header().Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.Body.Bytes(), first.Body.Bytes()) {
		t.Fatalf("replay: %d %q %v", again.Code, again.Body.Bytes(), again.Header())
	}
	if again.Header().Get("Set-Cookie") != "" || again.Header().Get("X-Internal") != "" {
		t.Fatalf("replayed headers outside the allowlist: %v", again.Header())
	}
	if again.Header().Get("Location") != "/items/1" || again.Header().Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("allowlisted headers not replayed: %v", again.Header())
	}
	if b.calls.Load() != 1 {
		t.Fatalf("handler ran %d times", b.calls.Load())
	}
	// Unprotected route: no replay.
	do(b.h, "/other", "u1", key, item)
	do(b.h, "/other", "u1", key, item)
	if b.calls.Load() != 3 {
		t.Fatalf("unprotected route: handler ran %d times, want 3", b.calls.Load())
	}
}

func TestMiddlewareStatuses(t *testing.T) {
	t.Parallel()
	b := mwSetup(t, func(c *idempotency.MiddlewareConfig) {
		c.Routes[0].RequireKey = true
		c.MaxRequestBody = 64
	})
	cases := []struct {
		name, user, key, body string
		want                  int
	}{
		{"no scope", "", uuid.NewString(), item, 401},
		{"no key", "u1", "", item, 400},
		{"malformed key", "u1", "a key", item, 400},
		{"bad sf string", "u1", `"abc\q"`, item, 400},
		{"body too large", "u1", uuid.NewString(), `{"name":"` + strings.Repeat("x", 100) + `"}`, 413},
		{"not JSON with fields", "u1", uuid.NewString(), "name=pen", 400},
	}
	for _, c := range cases {
		w := do(b.h, "/items", c.user, c.key, c.body)
		if w.Code != c.want || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s, want %d problem+json", c.name, w.Code, w.Body, c.want)
		}
		if c.key != "" && strings.Contains(w.Body.String(), c.key) && len(c.key) > 2 {
			t.Errorf("%s: the problem echoes the key", c.name)
		}
	}
	if b.calls.Load() != 0 {
		t.Fatalf("refused requests ran the handler %d times", b.calls.Load())
	}
}

func TestMiddlewareMismatch422AndInProgress(t *testing.T) {
	t.Parallel()
	key := uuid.NewString()
	b := mwSetup(t, func(c *idempotency.MiddlewareConfig) { c.MismatchStatus = 422 })
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- do(b.h, "/items?hold=1", "u1", key, item) }()
	<-b.held // the first holds the key
	busy := do(b.h, "/items", "u1", key, item)
	close(b.release)
	if busy.Code != 409 || busy.Header().Get("Retry-After") == "" {
		t.Fatalf("in progress: %d %v", busy.Code, busy.Header())
	}
	<-done
	mm := do(b.h, "/items", "u1", key, `{"name":"pen","price":"2.00"}`)
	if mm.Code != 422 || strings.Contains(mm.Body.String(), "call") {
		t.Fatalf("mismatch: %d %s", mm.Code, mm.Body)
	}
	if b.calls.Load() != 1 {
		t.Fatalf("handler ran %d times", b.calls.Load())
	}
}

func TestMiddlewareWaitInFlightReplays(t *testing.T) {
	t.Parallel()
	key := uuid.NewString()
	b := mwSetup(t, func(c *idempotency.MiddlewareConfig) { c.WaitInFlight = time.Minute })
	var wg sync.WaitGroup
	res := make([]*httptest.ResponseRecorder, 5)
	for i := range res {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res[i] = do(b.h, "/items?sleep=200ms", "u1", key, item)
		}(i)
	}
	wg.Wait()
	for i, r := range res {
		if r.Code != 201 || !bytes.Equal(r.Body.Bytes(), res[0].Body.Bytes()) {
			t.Fatalf("double click %d: %d %q", i, r.Code, r.Body)
		}
	}
	if b.calls.Load() != 1 {
		t.Fatalf("handler ran %d times", b.calls.Load())
	}
}

func TestMiddleware4xxStored5xxReleased(t *testing.T) {
	t.Parallel()
	k400, k500 := uuid.NewString(), uuid.NewString()
	b := mwSetup(t, nil)
	a := do(b.h, "/items?status=400", "u1", k400, item)
	a2 := do(b.h, "/items", "u1", k400, item)
	if a.Code != 400 || a2.Code != 400 || a2.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("4xx: %d then %d", a.Code, a2.Code)
	}
	s := do(b.h, "/items?status=500", "u1", k500, item)
	s2 := do(b.h, "/items", "u1", k500, item)
	if s.Code != 500 || s2.Code != 201 || s2.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("5xx: %d then %d (a 5xx must release the key)", s.Code, s2.Code)
	}
	if b.calls.Load() != 3 {
		t.Fatalf("handler ran %d times, want 3", b.calls.Load())
	}

	stored := mwSetup(t, func(c *idempotency.MiddlewareConfig) { c.Store5xx = true })
	do(stored.h, "/items?status=500", "u1", k500, item)
	r := do(stored.h, "/items", "u1", k500, item)
	if r.Code != 500 || r.Header().Get("Idempotent-Replayed") != "true" || stored.calls.Load() != 1 {
		t.Fatalf("Store5xx: %d calls=%d", r.Code, stored.calls.Load())
	}
}

func TestMiddlewareLogOnly(t *testing.T) {
	t.Parallel()
	key := uuid.NewString()
	b := mwSetup(t, func(c *idempotency.MiddlewareConfig) { c.Mode = idempotency.LogOnly })
	do(b.h, "/items", "u1", key, item)
	r := do(b.h, "/items", "u1", key, item)
	m := do(b.h, "/items", "u1", key, `{"name":"pen","price":"9"}`)
	if r.Code != 201 || r.Header().Get("Idempotent-Replayed") != "" || m.Code != 201 {
		t.Fatalf("log-only must let everything through: %d %d", r.Code, m.Code)
	}
	if b.calls.Load() != 3 {
		t.Fatalf("handler ran %d times, want 3", b.calls.Load())
	}
	logs := b.logs.String()
	if !strings.Contains(logs, "would have replayed") || !strings.Contains(logs, "would have refused") {
		t.Fatalf("log-only did not log what it would have blocked:\n%s", logs)
	}
}

func TestMiddlewareStreamingPassesThrough(t *testing.T) {
	t.Parallel()
	key := uuid.NewString()
	b := mwSetup(t, nil)
	do(b.h, "/items", "u1", key, item, "Accept", "text/event-stream")
	do(b.h, "/items", "u1", key, item, "Accept", "text/event-stream")
	if b.calls.Load() != 2 || !strings.Contains(b.logs.String(), "passed through unprotected") {
		t.Fatalf("streaming: calls=%d logs=%s", b.calls.Load(), b.logs)
	}
}

// No log line carries a full key, fingerprint or body.
func TestMiddlewareLogHygiene(t *testing.T) {
	t.Parallel()
	secretKey := uuid.NewString()
	b := mwSetup(t, func(c *idempotency.MiddlewareConfig) { c.Mode = idempotency.LogOnly })
	body := `{"name":"card-4242424242424242","price":"1.50"}`
	do(b.h, "/items", "u1", secretKey, body)
	do(b.h, "/items", "u1", secretKey, body)
	do(b.h, "/items", "u1", secretKey, `{"name":"other","price":"1"}`)
	b2 := mwSetup(t, nil)
	do(b2.h, "/items", "u1", secretKey, body)
	do(b2.h, "/items", "u1", secretKey, `{"name":"other","price":"1"}`)
	all := b.logs.String() + b2.logs.String()
	for _, secret := range []string{secretKey, "4242424242424242"} {
		if strings.Contains(all, secret) {
			t.Fatalf("a log line contains %q:\n%s", secret, all)
		}
	}
	if all == "" {
		t.Fatal("no log output to check")
	}
}

func TestMiddlewareConfigErrors(t *testing.T) {
	t.Parallel()
	exec, _ := idempotency.New(memstore.New(nil), nil)
	scope := func(*http.Request) string { return "u" }
	for field, cfg := range map[string]idempotency.MiddlewareConfig{
		"MiddlewareConfig.Scope":             {Routes: []idempotency.Route{{Pattern: "POST /a", Action: "a"}}},
		"MiddlewareConfig.Routes":            {Scope: scope},
		"MiddlewareConfig.Routes[0].Pattern": {Scope: scope, Routes: []idempotency.Route{{Pattern: "/a", Action: "a"}}},
		"MiddlewareConfig.Routes[0].Action":  {Scope: scope, Routes: []idempotency.Route{{Pattern: "POST /a", Action: "create_a"}}},
		"MiddlewareConfig.MismatchStatus":    {Scope: scope, Routes: []idempotency.Route{{Pattern: "POST /a", Action: "a"}}, MismatchStatus: 400},
	} {
		_, err := idempotency.Middleware(exec, cfg)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != field {
			t.Errorf("%s: err = %v", field, err)
		}
	}
}

func TestMiddlewareRateLimitsNewKeysOnly(t *testing.T) {
	t.Parallel()
	keys := []string{uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()}
	reader := sdkmetric.NewManualReader()
	b := mwSetup(t, func(c *idempotency.MiddlewareConfig) {
		c.RateLimit = 3
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	for i := 0; i < 3; i++ {
		if w := do(b.h, "/items", "u1", keys[i], item); w.Code != 201 {
			t.Fatalf("key %d: %d", i, w.Code)
		}
	}
	over := do(b.h, "/items", "u1", keys[3], item)
	if over.Code != 429 || over.Header().Get("Retry-After") == "" || over.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("4th new key: %d %v", over.Code, over.Header())
	}
	// Replays are not new keys: still served.
	if w := do(b.h, "/items", "u1", keys[0], item); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay under the limit: %d", w.Code)
	}
	// Another scope has its own budget.
	if w := do(b.h, "/items", "u2", keys[3], item); w.Code != 201 {
		t.Fatalf("other scope: %d", w.Code)
	}
	if b.calls.Load() != 4 {
		t.Fatalf("handler ran %d times, want 4", b.calls.Load())
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var limited int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == idempotency.MetricRateLimited {
				for _, p := range s.DataPoints {
					limited += p.Value
				}
			}
		}
	}
	if limited != 1 {
		t.Fatalf("rate_limited = %d, want 1", limited)
	}
}

// A hash-only route stores the status and the body's SHA-256: a replay
// answers those, and a body over MaxStoredResponse is no reason to release
// the key (only its hash is stored), so the handler runs once.
func TestMiddlewareStoreHashOnly(t *testing.T) {
	t.Parallel()
	key := uuid.NewString()
	b := mwSetup(t, func(c *idempotency.MiddlewareConfig) {
		c.Routes[0].StoreHashOnly = true
		c.MaxStoredResponse = 8 // below every body the handler writes
	})
	first := do(b.h, "/items", "u1", key, item)
	again := do(b.h, "/items", "u1", key, item)
	if first.Code != 201 || len(first.Body.Bytes()) == 0 {
		t.Fatalf("first: %d %q", first.Code, first.Body)
	}
	sum := again.Header().Get("Idempotent-Body-Sha256")
	if again.Code != 201 || again.Body.Len() != 0 || len(sum) != 64 || again.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("hash-only replay: %d %q %v", again.Code, again.Body, again.Header())
	}
	if want := sha256.Sum256(first.Body.Bytes()); sum != hex.EncodeToString(want[:]) {
		t.Fatalf("Idempotent-Body-Sha256 = %s, want the SHA-256 of the first body", sum)
	}
	if b.calls.Load() != 1 {
		t.Fatalf("handler ran %d times", b.calls.Load())
	}
}

// Two honest scopes that send the same random key (a client acting for
// both, or a key copied between them) each get their own execution and
// their own replays: a scope's keys are its own, and no scope can make
// another's request fail.
func TestMiddlewareScopesOwnTheirKeys(t *testing.T) {
	t.Parallel()
	b := mwSetup(t, nil)
	key := uuid.NewString()
	first := do(b.h, "/items", "u1", key, item)
	other := do(b.h, "/items", "u2", key, item)
	if first.Code != 201 || other.Code != 201 || other.Header().Get("Idempotent-Replayed") != "" || bytes.Equal(other.Body.Bytes(), first.Body.Bytes()) {
		t.Fatalf("the same random key under two scopes: %d %q then %d %q, want two executions", first.Code, first.Body, other.Code, other.Body)
	}
	for _, c := range []struct {
		scope string
		want  *httptest.ResponseRecorder
	}{{"u1", first}, {"u2", other}} {
		again := do(b.h, "/items", c.scope, key, item)
		if again.Header().Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.Body.Bytes(), c.want.Body.Bytes()) {
			t.Fatalf("%s's retry: %d %q, want its own answer %q", c.scope, again.Code, again.Body, c.want.Body)
		}
	}
	if b.calls.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", b.calls.Load())
	}
}

// A guessable key is refused (400, the rule and the fix named, the key
// not echoed) before anything is stored or run: a squatter cannot take
// "order-1" first, and a tenant whose client sends it is told to send a
// random key instead of colliding with anyone.
func TestMiddlewareLowEntropyKeyRefused(t *testing.T) {
	t.Parallel()
	b := mwSetup(t, func(c *idempotency.MiddlewareConfig) { c.RateLimit = 1 })
	ctx := context.Background()
	for _, key := range []string{"order-1", "retry-1", "42", "k-7f3a9c1e5b2d4f60", strings.Repeat("a", 64),
		"6ba7b810-9dad-11d1-80b4-00c04fd430c8", // a UUIDv1: time and MAC, guessable
	} {
		for _, scope := range []string{"mallory", "alice"} {
			w := do(b.h, "/items", scope, key, item)
			detail := w.Body.String()
			if w.Code != 400 || w.Header().Get("Content-Type") != "application/problem+json" ||
				!strings.Contains(detail, "idempotency-key-low-entropy") || !strings.Contains(detail, "128 bits") ||
				!strings.Contains(detail, "UUIDv4 or a ULID") || strings.Contains(detail, key) {
				t.Fatalf("%s with %q: %d %s, want 400 problem+json naming the rule and the fix, without the key", scope, key, w.Code, detail)
			}
			if _, err := b.store.Get(ctx, scope, "createItem_"+key); !errors.Is(err, idempotency.ErrNotFound) {
				t.Fatalf("%s with %q: a record was stored (%v)", scope, key, err)
			}
		}
	}
	if b.calls.Load() != 0 || b.store.Len() != 0 {
		t.Fatalf("refused keys ran the handler %d times and left %d records", b.calls.Load(), b.store.Len())
	}
	// Nor did the refusals spend the scopes' budgets of new keys
	// (RateLimit 1): a UUIDv4 and a ULID go through.
	if w := do(b.h, "/items", "alice", uuid.NewString(), item); w.Code != 201 {
		t.Fatalf("alice with a UUIDv4: %d %s", w.Code, w.Body)
	}
	if w := do(b.h, "/items", "mallory", "01J2Z3Y4X5W6V7T8S9R0QPNMKH", item); w.Code != 201 {
		t.Fatalf("mallory with a ULID: %d %s", w.Code, w.Body)
	}
}

// AllowLowEntropyKeys keeps the earlier behaviour, trade-off included:
// any key shape is accepted, and a key another scope holds answers 404
// (never 403, never that scope's answer, nothing run or stored).
func TestMiddlewareAllowLowEntropyKeys(t *testing.T) {
	t.Parallel()
	b := mwSetup(t, func(c *idempotency.MiddlewareConfig) { c.AllowLowEntropyKeys = true })
	first := do(b.h, "/items", "u1", "order-1", item)
	if first.Code != 201 {
		t.Fatalf("low-entropy key allowed: %d %s", first.Code, first.Body)
	}
	other := do(b.h, "/items", "u2", "order-1", item)
	if other.Code != 404 || other.Header().Get("Content-Type") != "application/problem+json" ||
		strings.Contains(other.Body.String(), " saw ") || other.Header().Get("Location") != "" {
		t.Fatalf("other scope: %d %q %v", other.Code, other.Body, other.Header())
	}
	if _, err := b.store.Get(context.Background(), "u2", "createItem_order-1"); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("the refused scope has a record (%v)", err)
	}
	if b.calls.Load() != 1 {
		t.Fatalf("handler ran %d times", b.calls.Load())
	}
	if again := do(b.h, "/items", "u1", "order-1", item); !bytes.Equal(again.Body.Bytes(), first.Body.Bytes()) {
		t.Fatal("the owner's replay changed")
	}
}

// LogOnly, for a rollout: a low-entropy key is logged as what would be
// refused and the request passes through, unprotected and unrecorded.
func TestMiddlewareLogOnlyLowEntropyKey(t *testing.T) {
	t.Parallel()
	b := mwSetup(t, func(c *idempotency.MiddlewareConfig) { c.Mode = idempotency.LogOnly })
	for range 2 {
		if w := do(b.h, "/items", "u1", "order-1", item); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("log-only, low-entropy key: %d %v", w.Code, w.Header())
		}
	}
	if b.calls.Load() != 2 || b.store.Len() != 0 || !strings.Contains(b.logs.String(), "would have refused a low-entropy key") {
		t.Fatalf("log-only: %d calls, %d records, logs:\n%s", b.calls.Load(), b.store.Len(), b.logs)
	}
}
