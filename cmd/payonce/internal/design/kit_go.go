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

// downRedis is a client of a Redis that is not there: a port that was
// free a moment ago.
func downRedis(t *testing.T) *redis.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// protectStoreDown protects next on a Redis that is not there.
func protectStoreDown(t *testing.T, next http.Handler) http.Handler {
	t.Helper()
	h, err := ProtectWith(next, testScope, downRedis(t), Config())
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

func lower(s string) string { return strings.ToLower(s[:1]) + s[1:] }
func upper(s string) string { return strings.ToUpper(s[:1]) + s[1:] }
