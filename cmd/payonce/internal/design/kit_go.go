package design

import (
	"fmt"
	"go/format"
	"regexp"
	"sort"
	"strings"
)

// GoKit returns the Go deliverables of a Go stack as files, the way
// `payonce design --code DIR` writes them: D3 (yourservice.go: Config,
// Protect, ProtectWith and, with payments or consumers, their handlers),
// D4 (fingerprint.go) and D6 (yourservice_test.go: the scenarios of
// section 11 for every route Protect guards, run against the answers'
// store). It returns nil for other stacks. Go stacks are not in
// [KitOf]'s list: the document shows the same files in D3, D4 and D6 as
// code of payonce's own API.
func GoKit(d *Document) *Kit {
	if d.Agnostic || !d.Answers.Stack.IsGo() {
		return nil
	}
	return &Kit{
		Stack:       "go",
		Intro:       "payonce's own net/http middleware and API.",
		Middleware:  []File{{Path: "yourservice.go", Lang: "go", Text: middlewareGo(d) + "\n"}},
		Fingerprint: []File{{Path: "fingerprint.go", Lang: "go", Text: fingerprintGo(d) + "\n"}},
		Tests:       []File{{Path: "yourservice_test.go", Lang: "go", Text: testSkeletonGo(d) + "\n"}},
		Run:         goTestRun(d),
	}
}

// goTestRun is how to run the Go tests of D6.
func goTestRun(d *Document) string {
	env := ""
	switch d.Store {
	case StoreRedis:
		env = "REDIS_URL=redis://localhost:6379/0 "
	case StorePostgres:
		env = "DATABASE_URL=postgres://localhost/yourservice_test "
	}
	return "in your module (go get github.com/payonce/payonce" + map[bool]string{true: " github.com/payonce/payonce/idempotency/redisstore", false: ""}[d.Store == StoreRedis] + "): " + env + "go test -race ./..."
}

// paramNames turns "a T, b func(X) Y" into "a, b".
func paramNames(params string) string {
	var out []string
	for _, p := range strings.Split(params, ", ") {
		name, _, _ := strings.Cut(strings.TrimSpace(p), " ")
		out = append(out, name)
	}
	return strings.Join(out, ", ")
}

// protectedRoutes are the actions D3's Protect guards with the
// middleware: HTTP actions that are not payments (those go through
// payments.Client).
func protectedRoutes(d *Document) []ActionPlan {
	var out []ActionPlan
	for _, x := range d.Actions {
		if x.Kind == "http" && !(x.Provider != "" && len(d.Providers) > 0) {
			out = append(out, x)
		}
	}
	return out
}

var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// routeRequest is the method and a path matching a route's pattern.
func routeRequest(x ActionPlan) (method, path string) {
	pat := x.Trigger
	if pat == "" {
		pat = "POST /" + x.Name
	}
	method, path, ok := strings.Cut(pat, " ")
	if !ok {
		return "POST", pat
	}
	return method, wildcard.ReplaceAllString(strings.TrimSpace(path), "1")
}

// goTestHelpers are the store helpers of D6, per store: protect builds the
// routes on the answers' store, protectStoreDown on a store that cannot
// be reached.
func goTestHelpers(d *Document, imports map[string]bool) string {
	switch d.Store {
	case StoreRedis:
		imports[`"net"`], imports[`"os"`], imports[`"github.com/redis/go-redis/v9"`] = true, true, true
		return `// testRedis connects to the Redis of REDIS_URL (redis://localhost:6379/0):
// these tests run against a real Redis, never a mock.
func testRedis(t *testing.T) *redis.Client {
	t.Helper()
	u := os.Getenv("REDIS_URL")
	if u == "" {
		t.Fatal("REDIS_URL is not set: these tests need a Redis server, e.g. REDIS_URL=redis://localhost:6379/0")
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("REDIS_URL: %v", err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func protect(t *testing.T, next http.Handler, cfg *idempotency.Config) http.Handler {
	t.Helper()
	h, err := ProtectWith(next, testScope, testRedis(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// protectStoreDown protects next on a Redis that is not there: a port
// that was free a moment ago.
func protectStoreDown(t *testing.T, next http.Handler) http.Handler {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	h, err := ProtectWith(next, testScope, rdb, Config())
	if err != nil {
		t.Fatal(err)
	}
	return h
}
`
	case StorePostgres:
		imports[`"context"`], imports[`"os"`], imports[`"sync"`] = true, true, true
		imports[`"github.com/jackc/pgx/v5/pgxpool"`], imports[`"github.com/payonce/payonce/migrations"`] = true, true
		return `var (
	migrateOnce sync.Once
	migrateErr  error
)

// testPool connects to the PostgreSQL of DATABASE_URL and applies the
// idempotency schema (D2) once: these tests run against a real
// PostgreSQL, never a mock.
func testPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	u := os.Getenv("DATABASE_URL")
	if u == "" {
		t.Fatal("DATABASE_URL is not set: these tests need a PostgreSQL database, e.g. DATABASE_URL=postgres://localhost/yourservice_test")
	}
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatalf("DATABASE_URL: %v", err)
	}
	t.Cleanup(pool.Close)
	migrateOnce.Do(func() {
		_, migrateErr = migrations.MigrateLines(context.Background(), pool, migrations.LineIdempotency)
	})
	if migrateErr != nil {
		t.Fatal(migrateErr)
	}
	return pool
}

func protect(t *testing.T, next http.Handler, cfg *idempotency.Config) http.Handler {
	t.Helper()
	h, err := ProtectWith(next, testScope, testPool(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// protectStoreDown protects next on a PostgreSQL that goes away: its pool
// is closed once the routes are built.
func protectStoreDown(t *testing.T, next http.Handler) http.Handler {
	t.Helper()
	pool := testPool(t)
	h, err := ProtectWith(next, testScope, pool, Config())
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	return h
}
`
	case StoreDynamo:
		imports[`"os"`], imports[`"github.com/aws/aws-sdk-go-v2/service/dynamodb"`] = true, true
		return `// testDynamo is the DynamoDB client of your tests (set it up from your
// AWS configuration or a local endpoint, with the table of D2): these
// tests run against a real DynamoDB, never a mock.
var testDynamo func(t *testing.T) *dynamodb.Client

func protect(t *testing.T, next http.Handler, cfg *idempotency.Config) http.Handler {
	t.Helper()
	if testDynamo == nil || os.Getenv("DYNAMODB_ENDPOINT") == "" {
		t.Fatal("set testDynamo and DYNAMODB_ENDPOINT: these tests need a DynamoDB table (D2)")
	}
	h, err := ProtectWith(next, testScope, testDynamo(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func protectStoreDown(t *testing.T, next http.Handler) http.Handler {
	t.Helper()
	t.Fatal("point a dynamodb.Client at an endpoint nobody listens on and call ProtectWith")
	return nil
}
`
	}
	imports[`"errors"`], imports[`"context"`], imports[`"github.com/payonce/payonce/idempotency/memstore"`] = true, true, true
	return `// testStore is payonce's in-memory store: replace it with your store of
// D2 once it passes idempotencytest.Exercise. The holder-killed scenario
// needs a store another process shares: it is skipped on memstore.
var testStore = func(t *testing.T) idempotency.Store { return memstore.New(nil) }

func protect(t *testing.T, next http.Handler, cfg *idempotency.Config) http.Handler {
	t.Helper()
	h, err := ProtectWith(next, testScope, testStore(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// downStore is a store that cannot be reached.
type downStore struct{ idempotency.Store }

func (downStore) Claim(context.Context, idempotency.ClaimParams) (idempotency.Claim, error) {
	return idempotency.Claim{}, errors.New("store unreachable")
}

func protectStoreDown(t *testing.T, next http.Handler) http.Handler {
	t.Helper()
	h, err := ProtectWith(next, testScope, downStore{memstore.New(nil)}, Config())
	if err != nil {
		t.Fatal(err)
	}
	return h
}
`
}

const goTestCommon = `// testScope is the scope of the tests' requests: the user the test names
// in X-Test-User. Yours comes from authentication, never from a header.
func testScope(r *http.Request) string { return r.Header.Get("X-Test-User") }

// newKey is a client's Idempotency-Key: a UUIDv4, once per intent.
func newKey(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// newUser is a scope of the test's own.
func newUser(t *testing.T) string { return "usr_" + strings.ReplaceAll(newKey(t), "-", "")[:12] }

// counting stands in for your handler: it counts its runs (the effect
// the scenarios count) and answers 201 with the run's number.
func counting(runs *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "{\"run\":%d}", n)
	})
}

func send(h http.Handler, user, key, method, path, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("X-Test-User", user)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// shortConfig is Config with a lease and a retention short enough for a
// test to see them end.
func shortConfig(lease, retention time.Duration) *idempotency.Config {
	cfg := Config()
	cfg.LockTimeout, cfg.Retention = lease, retention
	return cfg
}

// until sends the request until done accepts the answer, or fails the
// test after within.
func until(t *testing.T, within time.Duration, h http.Handler, user, key, method, path, body string, done func(*httptest.ResponseRecorder) bool) *httptest.ResponseRecorder {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		w := send(h, user, key, method, path, body)
		if done(w) {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d %q after %s", w.Code, w.Body.String(), within)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
}

// TestHelperHolder is the holder that TestXxxHolderKilledReclaimed kills:
// this test binary run again; it claims the key and hangs in its handler.
func TestHelperHolder(t *testing.T) {
	key := os.Getenv("YOURSERVICE_HOLDER_KEY")
	if key == "" {
		t.Skip("the holder process of the HolderKilledReclaimed tests; run by them")
	}
	h := protect(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		fmt.Println("claimed")
		select {} // killed here, mid-action
	}), shortConfig(holderLease, time.Hour))
	send(h, os.Getenv("YOURSERVICE_HOLDER_USER"), key, os.Getenv("YOURSERVICE_HOLDER_METHOD"), os.Getenv("YOURSERVICE_HOLDER_PATH"), os.Getenv("YOURSERVICE_HOLDER_BODY"))
}

// holderLease is the lease of the killed holder: a retry takes the key
// over once it ends.
const holderLease = 2 * time.Second

// killHolder runs TestHelperHolder in another process, waits until its
// handler runs (the key is claimed) and kills it (SIGKILL): no release,
// no completion, its lease left to end.
func killHolder(t *testing.T, user, key, method, path, body string) {
	t.Helper()
	killHelper(t, "^TestHelperHolder$", "YOURSERVICE_HOLDER_KEY="+key, "YOURSERVICE_HOLDER_USER="+user,
		"YOURSERVICE_HOLDER_METHOD="+method, "YOURSERVICE_HOLDER_PATH="+path, "YOURSERVICE_HOLDER_BODY="+body)
}

// killHelper runs the helper test named by run in another process of this
// test binary, with env, waits until it prints "claimed" and kills it
// (SIGKILL).
func killHelper(t *testing.T, run string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	claimed := make(chan bool, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if s.Text() == "claimed" {
				claimed <- true
				return
			}
		}
		claimed <- false
	}()
	select {
	case ok := <-claimed:
		if !ok {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the helper process %s ended before it claimed", run)
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the helper process %s did not claim within a minute", run)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}
`

// testSkeletonGo is D6 for Go stacks: a test file of package yourservice
// with one test per scenario of section 11 for each route that Protect
// guards, run against the answers' store (memstore when payonce has
// none for it). Payments and consumers are listed with what covers them.
func testSkeletonGo(d *Document) string {
	imports := map[string]bool{`"bufio"`: true, `"crypto/rand"`: true, `"fmt"`: true, `"net/http"`: true, `"net/http/httptest"`: true,
		`"os"`: true, `"os/exec"`: true, `"strings"`: true, `"sync"`: true, `"sync/atomic"`: true, `"testing"`: true, `"time"`: true,
		`"github.com/payonce/payonce/idempotency"`: true}
	helpers := goTestHelpers(d, imports)
	var tests strings.Builder
	routes := protectedRoutes(d)
	for _, x := range routes {
		n := goName(x.Name)
		method, path := routeRequest(x)
		body, other, volatile := "{}", "", `{"trace_id":"retry-2","sent_at":"2026-01-01T00:00:01Z"}`
		if len(x.Fields) > 0 {
			var kv, kv2 []string
			for i, f := range x.Fields {
				kv = append(kv, fmt.Sprintf("%q:%q", f, "v-"+f))
				v2 := "v-" + f
				if i == 0 {
					v2 = "other-" + f
				}
				kv2 = append(kv2, fmt.Sprintf("%q:%q", f, v2))
			}
			body = "{" + strings.Join(kv, ",") + "}"
			other = "{" + strings.Join(kv2, ",") + "}"
			volatile = "{" + strings.Join(kv, ",") + `,"trace_id":"retry-2","sent_at":"2026-01-01T00:00:01Z"}`
		}
		fmt.Fprintf(&tests, "\n// %s: the requests of the %s route (%s %s).\nconst (\n\t%sMethod = %q\n\t%sPath   = %q\n\t%sBody   = %q\n)\n", n, x.Name, method, path, lower(n), method, lower(n), path, lower(n), body)
		v := lower(n)
		req := v + "Method, " + v + "Path"
		sc := map[string]string{}
		sc["ReplaysSameKey"] = fmt.Sprintf(`	var runs atomic.Int64
	h := protect(t, counting(&runs), Config())
	user, key := newUser(t), newKey(t)
	first := send(h, user, key, %[1]s, %[2]sBody)
	second := send(h, user, key, %[1]s, %[2]sBody)
	if first.Code != http.StatusCreated {
		t.Fatalf("first: %%d %%s", first.Code, first.Body)
	}
	if runs.Load() != 1 {
		t.Errorf("the handler ran %%d times, want once", runs.Load())
	}
	if second.Code != first.Code || second.Body.String() != first.Body.String() || second.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("second: %%d %%q (Idempotent-Replayed %%q), want the first's %%d %%q replayed", second.Code, second.Body, second.Header().Get("Idempotent-Replayed"), first.Code, first.Body)
	}
`, req, v)
		sc["ConcurrentSameKeyOneEffect"] = fmt.Sprintf(`	var runs atomic.Int64
	h := protect(t, counting(&runs), Config())
	user, key := newUser(t), newKey(t)
	start := make(chan struct{})
	codes := make(chan *httptest.ResponseRecorder, 50)
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			codes <- send(h, user, key, %[1]s, %[2]sBody)
		}()
	}
	close(start)
	wg.Wait()
	close(codes)
	for w := range codes {
		switch {
		case w.Code == http.StatusCreated:
		case w.Code == http.StatusConflict && w.Header().Get("Retry-After") != "":
		default:
			t.Errorf("answer %%d %%q (Retry-After %%q), want 201 or 409 with Retry-After", w.Code, w.Body, w.Header().Get("Retry-After"))
		}
	}
	if runs.Load() != 1 {
		t.Errorf("50 concurrent requests with one key ran the handler %%d times, want once", runs.Load())
	}
`, req, v)
		if len(x.Fields) > 0 {
			sc["DifferentFieldsRefused"] = fmt.Sprintf(`	var runs atomic.Int64
	h := protect(t, counting(&runs), Config())
	user, key := newUser(t), newKey(t)
	first := send(h, user, key, %[1]s, %[2]sBody)
	other := send(h, user, key, %[1]s, %[3]q)
	if other.Code != http.StatusConflict && other.Code != http.StatusUnprocessableEntity {
		t.Errorf("same key, another %[4]s: %%d %%q, want 409 or 422", other.Code, other.Body)
	}
	if strings.Contains(other.Body.String(), first.Body.String()) {
		t.Errorf("the refusal reveals the original answer: %%q", other.Body)
	}
	if again := send(h, user, key, %[1]s, %[2]sBody); again.Body.String() != first.Body.String() || runs.Load() != 1 {
		t.Errorf("after the refusal: %%q, %%d runs; want the record unchanged (%%q, one run)", again.Body, runs.Load(), first.Body)
	}
`, req, v, other, x.Fields[0])
		} else {
			sc["DifferentFieldsRefused"] = fmt.Sprintf(`	// The significant fields of %[3]s were not answered (Assumptions): the
	// fingerprint covers the route only, so another body is replayed, not
	// refused. Name the fields in Protect, then expect 409 here.
	var runs atomic.Int64
	h := protect(t, counting(&runs), Config())
	user, key := newUser(t), newKey(t)
	first := send(h, user, key, %[1]s, %[2]sBody)
	other := send(h, user, key, %[1]s, "{\"any\":\"other\"}")
	if other.Body.String() != first.Body.String() || runs.Load() != 1 {
		t.Errorf("another body under the same key: %%d %%q, %%d runs; want the replay (route-only fingerprint)", other.Code, other.Body, runs.Load())
	}
`, req, v, x.Name)
		}
		sc["VolatileFieldReplayed"] = fmt.Sprintf(`	var runs atomic.Int64
	h := protect(t, counting(&runs), Config())
	user, key := newUser(t), newKey(t)
	first := send(h, user, key, %[1]s, %[2]sBody)
	retry := send(h, user, key, %[1]s, %[3]q)
	if retry.Body.String() != first.Body.String() || retry.Header().Get("Idempotent-Replayed") != "true" || runs.Load() != 1 {
		t.Errorf("a retry with another trace id and timestamp: %%d %%q, %%d runs; want the replay", retry.Code, retry.Body, runs.Load())
	}
`, req, v, volatile)
		if d.Store == StoreUnknown || d.Store == StoreMongo || d.Store == StoreMySQL {
			sc["HolderKilledReclaimed"] = "\tt.Skip(\"needs a store that another process shares: run it once testStore is your store of D2\")\n"
		} else {
			sc["HolderKilledReclaimed"] = fmt.Sprintf(`	user, key := newUser(t), newKey(t)
	killHolder(t, user, key, %[1]s, %[2]sBody)
	var runs atomic.Int64
	h := protect(t, counting(&runs), shortConfig(holderLease, time.Hour))
	// While the dead holder's lease runs: 409. Once it ends: taken over.
	w := until(t, time.Minute, h, user, key, %[1]s, %[2]sBody, func(w *httptest.ResponseRecorder) bool {
		return w.Code != http.StatusConflict
	})
	if w.Code != http.StatusCreated || runs.Load() != 1 {
		t.Fatalf("after the holder was killed: %%d %%q, %%d runs; want the key taken over and run once", w.Code, w.Body, runs.Load())
	}
	if again := send(h, user, key, %[1]s, %[2]sBody); again.Body.String() != w.Body.String() || runs.Load() != 1 {
		t.Errorf("the taken-over outcome is not the one replayed: %%q, %%d runs", again.Body, runs.Load())
	}
`, req, v)
		}
		sc["ExpiredKeyIsNew"] = fmt.Sprintf(`	var runs atomic.Int64
	h := protect(t, counting(&runs), shortConfig(time.Second, 2*time.Second))
	user, key := newUser(t), newKey(t)
	first := send(h, user, key, %[1]s, %[2]sBody)
	if first.Code != http.StatusCreated {
		t.Fatalf("first: %%d %%s", first.Code, first.Body)
	}
	// Replayed until the record expires; then a new request, never a stale replay.
	w := until(t, time.Minute, h, user, key, %[1]s, %[2]sBody, func(w *httptest.ResponseRecorder) bool {
		return w.Header().Get("Idempotent-Replayed") != "true"
	})
	if w.Code != http.StatusCreated || w.Body.String() == first.Body.String() || runs.Load() != 2 {
		t.Errorf("after expiry: %%d %%q, %%d runs; want a new run (2)", w.Code, w.Body, runs.Load())
	}
`, req, v)
		sc["OtherScopeIsolated"] = fmt.Sprintf(`	var runs atomic.Int64
	h := protect(t, counting(&runs), Config())
	key := newKey(t)
	a := send(h, newUser(t), key, %[1]s, %[2]sBody)
	b := send(h, newUser(t), key, %[1]s, %[2]sBody)
	if b.Code != http.StatusCreated || b.Body.String() == a.Body.String() || b.Header().Get("Idempotent-Replayed") != "" || runs.Load() != 2 {
		t.Errorf("the same key under another user: %%d %%q, %%d runs; want its own run, never the first user's answer %%q", b.Code, b.Body, runs.Load(), a.Body)
	}
`, req, v)
		sc["StoreDownFailsClosed"] = fmt.Sprintf(`	var runs atomic.Int64
	h := protectStoreDown(t, counting(&runs))
	w := send(h, newUser(t), newKey(t), %[1]s, %[2]sBody)
	if w.Code != http.StatusServiceUnavailable || runs.Load() != 0 {
		t.Errorf("store unreachable: %%d %%q, %%d runs; want 503 and no effect", w.Code, w.Body, runs.Load())
	}
`, req, v)
		for _, s := range scenarios(d) {
			b, ok := sc[s.Test]
			if !ok {
				continue // provider and saga scenarios: not on this route
			}
			par := "\tt.Parallel()\n"
			fmt.Fprintf(&tests, "\n// %s.\n// Expect: %s. Verifies: %s.\nfunc Test%s%s(t *testing.T) {\n%s%s}\n",
				upper(s.Scenario), s.Expectation, s.Verifies, n, s.Test, par, b)
		}
	}
	consumers := inboxConsumers(d)
	generated := map[string]bool{}
	if len(consumers) > 0 {
		imports[`"context"`] = true
		imports[`"github.com/jackc/pgx/v5"`], imports[`"github.com/payonce/payonce/idempotency/inbox"`] = true, true
		imports[`"github.com/payonce/payonce/idempotency/pgstore"`] = true
		tests.WriteString(goInboxHelpers)
	}
	for _, x := range consumers {
		fmt.Fprintf(&tests, consumerHelperGo, goName(x.Name), consumerCall(d, x, "func(ctx context.Context, tx pgx.Tx) error {\n\t\tif err := effect(id)(ctx, tx); err != nil {\n\t\t\treturn err\n\t\t}\n\t\tfmt.Println(\"claimed\")\n\t\tselect {} // killed here, the message's transaction open\n\t}"))
		sc := consumerScenarios(d, x)
		if _, ok := sc["DifferentFieldsRefused"]; ok {
			imports[`"errors"`] = true
		}
		for _, s := range scenarios(d) {
			if c, ok := sc[s.Test]; ok {
				generated["Test"+goName(x.Name)+s.Test] = true
				fmt.Fprintf(&tests, "\n// %s. For a message: %s. Verifies: %s.\nfunc Test%s%s(t *testing.T) {\n\tt.Parallel()\n%s}\n",
					upper(s.Scenario), c[0], s.Verifies, goName(x.Name), s.Test, c[1])
			}
		}
	}
	execs := execConsumers(d)
	if len(execs) > 0 {
		imports[`"context"`], imports[`"errors"`] = true, true
		tests.WriteString(goExecHelpers(d, imports))
	}
	for _, x := range execs {
		fmt.Fprintf(&tests, execHelperGo, goName(x.Name), execConsumeCall(d, x, "tenant", consumerFields(x),
			"func(context.Context) (idempotency.Response, error) {\n\t\tfmt.Println(\"claimed\")\n\t\tselect {} // killed here, mid-action\n\t}"))
		sc := execConsumerScenarios(d, x)
		for _, s := range scenarios(d) {
			if c, ok := sc[s.Test]; ok {
				generated["Test"+goName(x.Name)+s.Test] = true
				fmt.Fprintf(&tests, "\n// %s. For a message: %s. Verifies: %s.\nfunc Test%s%s(t *testing.T) {\n\tt.Parallel()\n%s}\n",
					upper(s.Scenario), c[0], s.Verifies, goName(x.Name), s.Test, c[1])
			}
		}
	}
	var notes []string
	for _, x := range d.Actions {
		if x.Kind == "http" && !(x.Provider != "" && len(d.Providers) > 0) {
			continue
		}
		var names []string
		for _, sc := range scenarios(d) {
			switch {
			case (sc.Test == "LostProviderAnswer" || sc.Test == "ProviderTimeoutPending") && x.Provider == "":
			case strings.HasPrefix(sc.Test, "Saga") && !x.MultiStep():
			case generated["Test"+goName(x.Name)+sc.Test]:
			default:
				names = append(names, "Test"+goName(x.Name)+sc.Test)
			}
		}
		if x.Kind != "http" && len(execs) > 0 {
			notes = append(notes, fmt.Sprintf("%s is a %s handled by Consume through the executor: its scenarios below deliver one message twice, concurrently, with other significant fields, after a consumer process was killed mid-action, after its record expired, under another tenant and with the store gone. Not generated: %s (a message's other fields are not Consume's parameters, so they cannot change its fingerprint)", x.Name, x.Kind, strings.Join(names, ", ")))
			continue
		}
		if x.Kind != "http" && len(consumers) > 0 {
			notes = append(notes, fmt.Sprintf("%s is a %s handled by Consume through the inbox: its scenarios below deliver one message twice, concurrently, with other significant fields, after a consumer process was killed mid-handler, after its record expired and with the database gone. Not generated: %s (a message's other fields are not Consume's parameters, so they cannot change its fingerprint; its scope is its source)", x.Name, x.Kind, strings.Join(names, ", ")))
			continue
		}
		if x.Kind == "http" {
			notes = append(notes, fmt.Sprintf("%s goes through payments.Client, not Protect: not generated here. Its scenarios (%s) are payonce's own tests of payments.Client and the saga package, run against each provider's fake (payonce's payments/, saga/ and providers/providertest); write yours against your provider's test mode", x.Name, strings.Join(names, ", ")))
		} else {
			notes = append(notes, fmt.Sprintf("%s is a %s handled by Consume, keyed by the message's identity: not generated here. Write its scenarios (%s) as the routes' are written, delivering one message twice, concurrently and after a crash", x.Name, x.Kind, strings.Join(names, ", ")))
		}
	}
	var s strings.Builder
	fmt.Fprintf(&s, "package yourservice\n\nimport (\n")
	var std, ext []string
	for imp := range imports {
		if strings.Contains(imp, ".") {
			ext = append(ext, imp)
		} else {
			std = append(std, imp)
		}
	}
	sort.Strings(std)
	sort.Strings(ext)
	for _, i := range std {
		s.WriteString("\t" + i + "\n")
	}
	s.WriteString("\n")
	for _, i := range ext {
		s.WriteString("\t" + i + "\n")
	}
	fmt.Fprintf(&s, ")\n\n// The scenarios of section 11 for every route Protect guards, against a\n// real %s. Each test builds the routes around a stand-in handler that\n// counts its runs: the effect each scenario counts.\n", storeNameOr(d.Store))
	for _, n := range notes {
		s.WriteString("//\n// " + n + ".\n")
	}
	s.WriteString("\n" + goTestCommon + "\n" + helpers + tests.String())
	out := s.String()
	if len(routes) == 0 && len(consumers) == 0 && len(execs) == 0 {
		out = "package yourservice\n\n// No route is guarded by Protect: " + strings.Join(notes, "; ") + ".\n"
	}
	if src, err := format.Source([]byte(out)); err == nil {
		out = string(src)
	}
	return strings.TrimRight(out, "\n")
}

// inboxConsumers are the consumers D3 handles with the inbox in the
// message's transaction (a PostgreSQL store): D6 tests them.
func inboxConsumers(d *Document) []ActionPlan {
	if d.Store != StorePostgres {
		return nil
	}
	var out []ActionPlan
	for _, x := range d.Actions {
		if x.Kind != "http" {
			out = append(out, x)
		}
	}
	return out
}

// consumerScenarios are D6's tests of consumer x (handled by D3's Consume
// through the inbox), by section 11's scenario names.
//
// Each is the expectation for a message (section 11 words it for a
// request) and the test's body.
func consumerScenarios(d *Document, x ActionPlan) map[string][2]string {
	n := goName(x.Name)
	fields, other := consumerFields(x), consumerOtherFields(x)
	call := func(in, flds, handle string) string { return consumeCall(d, x, in, flds, handle) }
	sc := map[string][2]string{}
	sc["ReplaysSameKey"] = [2]string{"the message delivered twice: one committed effect, both deliveries acknowledged", fmt.Sprintf(`	in, pool := testInbox(t, nil)
	id := newKey(t)
	for i := range 2 {
		if ack, err := %s; err != nil || !ack {
			t.Fatalf("delivery %%d: ack %%v, %%v; want it acknowledged", i+1, ack, err)
		}
	}
	if n := effects(t, pool, id); n != 1 {
		t.Errorf("one message delivered twice committed %%d effects, want one", n)
	}
`, call("in", fields, "effect(id)"))}
	sc["ConcurrentSameKeyOneEffect"] = [2]string{"20 concurrent deliveries: one committed effect; a delivery that finds the message held is left to redelivery (no ack), and the redelivery is acknowledged", fmt.Sprintf(`	in, pool := testInbox(t, nil)
	id := newKey(t)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Another consumer holding the message: not acknowledged, left to
			// the broker's redelivery.
			if ack, err := %[1]s; ack && err != nil {
				t.Errorf("acknowledged with an error: %%v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if ack, err := %[1]s; err != nil || !ack {
		t.Fatalf("the redelivery after the storm: ack %%v, %%v; want it acknowledged", ack, err)
	}
	if n := effects(t, pool, id); n != 1 {
		t.Errorf("20 concurrent deliveries of one message committed %%d effects, want one", n)
	}
`, call("in", fields, "effect(id)"))}
	if other != "" {
		sc["DifferentFieldsRefused"] = [2]string{"its id again with another significant field: poison (acknowledged, ErrFingerprintMismatch), never applied; the first effect stands", fmt.Sprintf(`	in, pool := testInbox(t, nil)
	id := newKey(t)
	if ack, err := %s; err != nil || !ack {
		t.Fatalf("first delivery: ack %%v, %%v", ack, err)
	}
	ack, err := %s
	if !errors.Is(err, idempotency.ErrFingerprintMismatch) || !ack {
		t.Errorf("the same message id with another %s: ack %%v, %%v; want it acknowledged as poison (ErrFingerprintMismatch)", ack, err)
	}
	if n := effects(t, pool, id); n != 1 {
		t.Errorf("%%d effects after the refusal, want the first one only", n)
	}
`, call("in", fields, "effect(id)"), call("in", other, "effect(id)"), x.Fields[0])}
	}
	sc["ExpiredKeyIsNew"] = [2]string{"a redelivery after the record's retention: handled as a new message, once", fmt.Sprintf(`	in, pool := testInbox(t, &inbox.Config{LockTimeout: time.Second, Retention: 2 * time.Second})
	id := newKey(t)
	// A duplicate until the record expires; then handled as a new message.
	deadline := time.Now().Add(time.Minute)
	for effects(t, pool, id) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("still %%d effects a minute after a 2s retention, want a second run once it expired", effects(t, pool, id))
		}
		if ack, err := %[1]s; err != nil || !ack {
			t.Fatalf("ack %%v, %%v", ack, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
	if n := effects(t, pool, id); n != 2 {
		t.Errorf("%%d effects, want 2: one per life of the record", n)
	}
`, call("in", fields, "effect(id)"))}
	sc["HolderKilledReclaimed"] = [2]string{"the consumer's process killed mid-handler, its effect written but not committed: the effect rolls back with its connection, and the redelivery handles the message once", fmt.Sprintf(`	in, pool := testInbox(t, nil)
	id := newKey(t)
	killHelper(t, "^TestHelperConsumer%[1]s$", "YOURSERVICE_CONSUMER_ID="+id)
	for i := range 2 {
		if ack, err := %[2]s; err != nil || !ack {
			t.Fatalf("delivery %%d after the kill: ack %%v, %%v; want it acknowledged", i+1, ack, err)
		}
	}
	if n := effects(t, pool, id); n != 1 {
		t.Errorf("%%d effects after a killed consumer and two redeliveries, want one", n)
	}
`, n, call("in", fields, "effect(id)"))}
	sc["StoreDownFailsClosed"] = [2]string{"the database unreachable: not acknowledged, an error, and the handler never runs", fmt.Sprintf(`	in, pool := testInbox(t, nil)
	id := newKey(t)
	pool.Close()
	var ran atomic.Bool
	ack, err := %s
	if err == nil || ack || ran.Load() {
		t.Errorf("database unreachable: ack %%v, %%v, handler ran %%v; want no ack, an error and no effect", ack, err, ran.Load())
	}
`, call("in", fields, "func(context.Context, pgx.Tx) error { ran.Store(true); return nil }"))}
	return sc
}

// execConsumers are the consumers D3 handles with the executor (a store
// other than PostgreSQL) whose store D6 can build: Redis, or memstore
// standing in for a store payonce has no package for.
func execConsumers(d *Document) []ActionPlan {
	if d.Store == StorePostgres || d.Store == StoreDynamo {
		return nil
	}
	var out []ActionPlan
	for _, x := range d.Actions {
		if x.Kind != "http" {
			out = append(out, x)
		}
	}
	return out
}

// execConsumeCall is D3's Consume of consumer x (executor variant) called
// with the tests' executor exec, the tenant expression, the message id
// (the test's id; under Kafka, the topic, partition 0 and offset 1),
// significant fields flds and the action work.
func execConsumeCall(d *Document, x ActionPlan, tenant, flds, work string) string {
	var all []ActionPlan
	for _, c := range d.Actions {
		if c.Kind != "http" {
			all = append(all, c)
		}
	}
	fn, _, _, _ := consumeFunc(all, x)
	ids := "id"
	if strings.Contains(strings.ToLower(d.Answers.Stack.Broker), "kafka") {
		ids = "id, 0, 1"
	}
	return fmt.Sprintf("%s(context.Background(), exec, %s, %s%s, %s)", fn, tenant, ids, flds, work)
}

// execConsumerScenarios are D6's tests of consumer x handled by D3's
// Consume through the executor, by section 11's scenario names: each is
// the expectation for a message and the test's body.
func execConsumerScenarios(d *Document, x ActionPlan) map[string][2]string {
	n := goName(x.Name)
	fields, other := consumerFields(x), consumerOtherFields(x)
	call := func(tenant, flds string) string { return execConsumeCall(d, x, tenant, flds, "countRuns(&runs)") }
	sc := map[string][2]string{}
	sc["ReplaysSameKey"] = [2]string{"the message delivered twice: the action runs once, both deliveries succeed", fmt.Sprintf(`	exec := testExecutor(t, Config())
	var runs atomic.Int64
	tenant, id := newUser(t), newKey(t)
	for i := range 2 {
		if err := %s; err != nil {
			t.Fatalf("delivery %%d: %%v", i+1, err)
		}
	}
	if runs.Load() != 1 {
		t.Errorf("one message delivered twice ran the action %%d times, want once", runs.Load())
	}
`, call("tenant", fields))}
	sc["ConcurrentSameKeyOneEffect"] = [2]string{"20 concurrent deliveries: the action runs once; a delivery that finds the message held gets an *idempotency.InProgressError (leave it to redelivery), and the redelivery succeeds", fmt.Sprintf(`	exec := testExecutor(t, Config())
	var runs atomic.Int64
	tenant, id := newUser(t), newKey(t)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var busy *idempotency.InProgressError
			if err := %[1]s; err != nil && !errors.As(err, &busy) {
				t.Errorf("a concurrent delivery: %%v, want nil or an InProgressError", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := %[1]s; err != nil {
		t.Fatalf("the redelivery after the storm: %%v", err)
	}
	if runs.Load() != 1 {
		t.Errorf("20 concurrent deliveries of one message ran the action %%d times, want once", runs.Load())
	}
`, call("tenant", fields))}
	if other != "" {
		sc["DifferentFieldsRefused"] = [2]string{"its id again with another significant field: ErrFingerprintMismatch (poison), never run", fmt.Sprintf(`	exec := testExecutor(t, Config())
	var runs atomic.Int64
	tenant, id := newUser(t), newKey(t)
	if err := %s; err != nil {
		t.Fatal(err)
	}
	if err := %s; !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Errorf("the same message id with another %s: %%v, want ErrFingerprintMismatch", err)
	}
	if runs.Load() != 1 {
		t.Errorf("the action ran %%d times, want once", runs.Load())
	}
`, call("tenant", fields), call("tenant", other), x.Fields[0])}
	}
	if d.Store == StoreRedis {
		sc["HolderKilledReclaimed"] = [2]string{"the consumer's process killed mid-action: once its lease ends, a redelivery takes the message over and runs the action once", fmt.Sprintf(`	tenant, id := newUser(t), newKey(t)
	killHelper(t, "^TestHelperConsumer%[1]s$", "YOURSERVICE_CONSUMER_TENANT="+tenant, "YOURSERVICE_CONSUMER_ID="+id)
	exec := testExecutor(t, shortConfig(holderLease, time.Hour))
	var runs atomic.Int64
	// While the dead consumer's lease runs: in progress. Once it ends: taken over.
	deadline := time.Now().Add(time.Minute)
	for {
		err := %[2]s
		var busy *idempotency.InProgressError
		if !errors.As(err, &busy) {
			if err != nil {
				t.Fatalf("after the consumer was killed: %%v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still in progress a minute after the consumer was killed")
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
	if err := %[2]s; err != nil || runs.Load() != 1 {
		t.Errorf("after the takeover: %%v, %%d runs; want the message handled once", err, runs.Load())
	}
`, n, call("tenant", fields))}
	}
	sc["ExpiredKeyIsNew"] = [2]string{"a redelivery after the record's retention: handled as a new message, once", fmt.Sprintf(`	exec := testExecutor(t, shortConfig(time.Second, 2*time.Second))
	var runs atomic.Int64
	tenant, id := newUser(t), newKey(t)
	// Replayed until the record expires; then handled as a new message.
	deadline := time.Now().Add(time.Minute)
	for runs.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%%d runs a minute after a 2s retention, want a second run once it expired", runs.Load())
		}
		if err := %s; err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
	if runs.Load() != 2 {
		t.Errorf("%%d runs, want 2: one per life of the record", runs.Load())
	}
`, call("tenant", fields))}
	sc["OtherScopeIsolated"] = [2]string{"the same message id under another tenant: its own run, never the first tenant's record", fmt.Sprintf(`	exec := testExecutor(t, Config())
	var runs atomic.Int64
	id := newKey(t)
	for _, tenant := range []string{newUser(t), newUser(t)} {
		if err := %s; err != nil {
			t.Fatal(err)
		}
	}
	if runs.Load() != 2 {
		t.Errorf("one message id under two tenants ran the action %%d times, want once per tenant", runs.Load())
	}
`, call("tenant", fields))}
	sc["StoreDownFailsClosed"] = [2]string{"the store unreachable: an error, and the action never runs", fmt.Sprintf(`	exec := downExecutor(t)
	var runs atomic.Int64
	tenant, id := newUser(t), newKey(t)
	if err := %s; err == nil || runs.Load() != 0 {
		t.Errorf("store unreachable: %%v, %%d runs; want an error and no run", err, runs.Load())
	}
`, call("tenant", fields))}
	return sc
}

// execHelperGo is the consumer process that an executor consumer's
// HolderKilledReclaimed test kills (%[1]s its Go name, %[2]s its Consume
// call).
const execHelperGo = `
// TestHelperConsumer%[1]s is the consumer that Test%[1]sHolderKilledReclaimed
// kills: this test binary run again; it claims the message and hangs in
// its action.
func TestHelperConsumer%[1]s(t *testing.T) {
	tenant, id := os.Getenv("YOURSERVICE_CONSUMER_TENANT"), os.Getenv("YOURSERVICE_CONSUMER_ID")
	if id == "" {
		t.Skip("the consumer process of Test%[1]sHolderKilledReclaimed; run by it")
	}
	exec := testExecutor(t, shortConfig(holderLease, time.Hour))
	_ = %[2]s
}
`

// goExecHelpers are D6's helpers for consumers handled by the executor:
// an executor on the tests' store, one on a store that cannot be reached,
// and an action that counts its runs.
func goExecHelpers(d *Document, imports map[string]bool) string {
	common := `
// countRuns stands in for your consumer's work: it counts its runs (the
// effect the scenarios count).
func countRuns(runs *atomic.Int64) idempotency.Action {
	return func(context.Context) (idempotency.Response, error) {
		runs.Add(1)
		return idempotency.Response{}, nil
	}
}
`
	if d.Store == StoreRedis {
		imports[`"github.com/payonce/payonce/idempotency/redisstore"`] = true
		return common + `
// testExecutor is an executor with cfg on the Redis of REDIS_URL.
func testExecutor(t *testing.T, cfg *idempotency.Config) *idempotency.Executor {
	t.Helper()
	store, err := redisstore.New(testRedis(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	exec, err := idempotency.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return exec
}

// downExecutor is an executor on a Redis that is not there: a port that
// was free a moment ago.
func downExecutor(t *testing.T) *idempotency.Executor {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	exec, err := idempotency.New(store, Config())
	if err != nil {
		t.Fatal(err)
	}
	return exec
}
`
	}
	return common + `
// testExecutor is an executor with cfg on testStore.
func testExecutor(t *testing.T, cfg *idempotency.Config) *idempotency.Executor {
	t.Helper()
	exec, err := idempotency.New(testStore(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return exec
}

// downExecutor is an executor on a store that cannot be reached.
func downExecutor(t *testing.T) *idempotency.Executor {
	t.Helper()
	exec, err := idempotency.New(downStore{memstore.New(nil)}, Config())
	if err != nil {
		t.Fatal(err)
	}
	return exec
}
`
}

// consumeCall is D3's Consume of consumer x called with inbox in, the
// message id (the test's id; under Kafka, the topic, partition 0 and
// offset 1), significant fields flds and handler handle.
func consumeCall(d *Document, x ActionPlan, in, flds, handle string) string {
	var all []ActionPlan
	for _, c := range d.Actions {
		if c.Kind != "http" {
			all = append(all, c)
		}
	}
	fn, _, _, _ := consumeFunc(all, x)
	ids := "id"
	if strings.Contains(strings.ToLower(d.Answers.Stack.Broker), "kafka") {
		ids = "id, 0, 1" // the topic is the test's own
	}
	return fmt.Sprintf("%s(context.Background(), %s, %s%s, %s)", fn, in, ids, flds, handle)
}

// consumerFields is the literal of consumer x's significant fields in the
// scenarios (", XFields{...}"; empty without fields), and
// consumerOtherFields the same with its first field changed.
func consumerFields(x ActionPlan) string { return fieldsLiteral(x, false) }

func consumerOtherFields(x ActionPlan) string { return fieldsLiteral(x, true) }

func fieldsLiteral(x ActionPlan, other bool) string {
	if len(x.Fields) == 0 {
		return ""
	}
	var kv []string
	for i, f := range x.Fields {
		// Values D4's fingerprint accepts: an int64 for a quantity, a
		// decimal for an amount (see fingerprintGo).
		v, v2 := fmt.Sprintf("%q", "v-"+f), fmt.Sprintf("%q", "other-"+f)
		switch {
		case strings.Contains(f, "amount"):
			v, v2 = `"10.00"`, `"20.00"`
		case strings.Contains(f, "qty") || strings.Contains(f, "quantity"):
			v, v2 = "1", "2"
		}
		if other && i == 0 {
			v = v2
		}
		kv = append(kv, goName(f)+": "+v)
	}
	return ", " + goName(x.Name) + "Fields{" + strings.Join(kv, ", ") + "}"
}

// consumerCall is consumeCall with the scenarios' significant fields.
func consumerCall(d *Document, x ActionPlan, handle string) string {
	return consumeCall(d, x, "in", consumerFields(x), handle)
}

// consumerHelperGo is the consumer process that a consumer's
// HolderKilledReclaimed test kills (%[1]s its Go name, %[2]s its Consume
// call).
const consumerHelperGo = `
// TestHelperConsumer%[1]s is the consumer that Test%[1]sHolderKilledReclaimed
// kills: this test binary run again; it writes its effect in the message's
// transaction and hangs before that transaction commits.
func TestHelperConsumer%[1]s(t *testing.T) {
	id := os.Getenv("YOURSERVICE_CONSUMER_ID")
	if id == "" {
		t.Skip("the consumer process of Test%[1]sHolderKilledReclaimed; run by it")
	}
	in, _ := testInbox(t, nil)
	_, _ = %[2]s
}
`

// goInboxHelpers are D6's helpers for consumers handled by the inbox.
const goInboxHelpers = `
var (
	effectsOnce sync.Once
	effectsErr  error
)

// testInbox is an inbox on the test database, and its pool. Effects are
// rows of d6_effects, written by the handler in the message's transaction.
func testInbox(t *testing.T, cfg *inbox.Config) (*inbox.Inbox[pgx.Tx], *pgxpool.Pool) {
	t.Helper()
	pool := testPool(t)
	effectsOnce.Do(func() {
		_, effectsErr = pool.Exec(context.Background(), "CREATE TABLE IF NOT EXISTS d6_effects (message TEXT NOT NULL)")
	})
	if effectsErr != nil {
		t.Fatal(effectsErr)
	}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in, pool
}

// effect stands in for your handler: one row per run, in the message's
// transaction (the effect the scenarios count).
func effect(message string) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO d6_effects (message) VALUES ($1)", message)
		return err
	}
}

// effects counts the committed effects of message.
func effects(t *testing.T, pool *pgxpool.Pool, message string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM d6_effects WHERE message = $1", message).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
`

func lower(s string) string { return strings.ToLower(s[:1]) + s[1:] }
func upper(s string) string { return strings.ToUpper(s[:1]) + s[1:] }
