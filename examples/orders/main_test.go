package main

// The scenario table at the HTTP level against real PostgreSQL. Each test
// asserts the invariant (one order per key, byte-for-byte replays,
// refusals that change nothing), not the implementation.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/idempotencytest"
	"github.com/payonce/payonce/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv("ORDERS_SERVE") == "1" { // the test binary as the service, for kill tests
		if err := run(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type bundle struct {
	srv  *httptest.Server
	url  string // database
	pool *pgxpool.Pool
}

func setup(t *testing.T, cfg config) bundle {
	t.Helper()
	url := pgtest.SchemaURL(t)
	pool := pgtest.PoolURL(t, url)
	h, err := newServer(context.Background(), pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return bundle{srv: srv, url: url, pool: pool}
}

func defaults() config { return config{retention: time.Hour, lockTimeout: 5 * time.Second} }

const orderBody = `{"sku": "sku_1", "qty": 2, "amount": "49.99", "currency": "EUR"}`

type reply struct {
	status int
	header http.Header
	body   []byte
}

func post(t *testing.T, base, user, key, body, query string) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/orders"+query, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+user)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

// wantOrders stops the test unless user has n orders.
func wantOrders(t *testing.T, base, user string, n int) {
	t.Helper()
	if got := count(t, base, user); got != n {
		t.Fatalf("orders = %d, want %d", got, n)
	}
}

func count(t *testing.T, base, user string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/orders/count", nil)
	req.Header.Set("Authorization", "Bearer "+user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Count int }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Count
}

const key1 = "3f0c8a9e-5d2b-4c1a-9e7f-0123456789ab"

func TestFirstRequestExecutesAndRetriesReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, defaults())
	first := post(t, b.srv.URL, "alice", key1, orderBody, "")
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	// Same fields, other key order and whitespace: the same request.
	again := post(t, b.srv.URL, "alice", key1, `{"currency":"EUR","amount":"49.99",  "qty":2,"sku":"sku_1"}`, "")
	if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay: %d %q replayed=%q, want the first answer byte for byte", again.status, again.body, again.header.Get("Idempotent-Replayed"))
	}
	if again.header.Get("Content-Type") != "application/json" {
		t.Fatalf("replayed Content-Type = %q", again.header.Get("Content-Type"))
	}
	// A Structured Field string is the same key.
	sf := post(t, b.srv.URL, "alice", `"`+key1+`"`, orderBody, "")
	if sf.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("structured-field key: %d", sf.status)
	}
	wantOrders(t, b.srv.URL, "alice", 1)
}

func TestSameKeyOtherBodyRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, defaults())
	post(t, b.srv.URL, "alice", key1, orderBody, "")
	r := post(t, b.srv.URL, "alice", key1, `{"sku": "sku_1", "qty": 3, "amount": "49.99", "currency": "EUR"}`, "")
	if r.status != http.StatusConflict || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("mismatch: %d %s", r.status, r.body)
	}
	if bytes.Contains(r.body, []byte(key1)) || bytes.Contains(r.body, []byte("order_id")) {
		t.Fatalf("refusal echoes the key or the stored body: %s", r.body)
	}
	wantOrders(t, b.srv.URL, "alice", 1)
}

func TestConcurrentIdenticalRequestsExecuteOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, defaults())
	const n = 24
	var wg sync.WaitGroup
	statuses := make([]int, n)
	bodies := make([][]byte, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := post(t, b.srv.URL, "alice", key1, orderBody, "?work=100ms")
			statuses[i], bodies[i] = r.status, r.body
		}(i)
	}
	wg.Wait()
	var created []byte
	for i, s := range statuses {
		switch s {
		case http.StatusCreated:
			if created != nil && !bytes.Equal(created, bodies[i]) {
				t.Fatalf("two different 201 answers: %s / %s", created, bodies[i])
			}
			created = bodies[i]
		case http.StatusConflict: // in progress
		default:
			t.Fatalf("status %d: %s", s, bodies[i])
		}
	}
	wantOrders(t, b.srv.URL, "alice", 1)
}

func TestMissingOrMalformedKey(t *testing.T) {
	t.Parallel()
	b := setup(t, defaults())
	for name, key := range map[string]string{"missing": "", "malformed": "bad key!", "unterminated": `"abc`, "guessable": "order-1"} {
		r := post(t, b.srv.URL, "alice", key, orderBody, "")
		if r.status != http.StatusBadRequest || r.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%s key: %d %s", name, r.status, r.body)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/orders", strings.NewReader(orderBody))
	req.Header.Set("Idempotency-Key", key1)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no scope: %d, want 401", resp.StatusCode)
	}
	wantOrders(t, b.srv.URL, "alice", 0)
}

func TestScopesNeverShareOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t, defaults())
	a := post(t, b.srv.URL, "alice", key1, orderBody, "")
	m := post(t, b.srv.URL, "mallory", key1, orderBody, "")
	// Alice's key, from Mallory: Mallory's own order, nothing of Alice's
	// answer; Alice's replay unchanged.
	if a.status != http.StatusCreated || m.status != http.StatusCreated || bytes.Equal(m.body, a.body) || m.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("mallory with alice's key: %d %s (alice: %d %s)", m.status, m.body, a.status, a.body)
	}
	if again := post(t, b.srv.URL, "alice", key1, orderBody, ""); !bytes.Equal(again.body, a.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("alice's retry: %d %s, want her first answer", again.status, again.body)
	}
	if count(t, b.srv.URL, "alice") != 1 || count(t, b.srv.URL, "mallory") != 1 {
		t.Fatal("each scope must have exactly its own order")
	}
}

func TestRequestAfterExpiryIsNew(t *testing.T) {
	t.Parallel()
	b := setup(t, config{retention: 2 * time.Second, lockTimeout: time.Second})
	post(t, b.srv.URL, "alice", key1, orderBody, "")
	// The event, not a duration: the record has expired on the database's
	// clock (its expiry counts from the completion, which a loaded machine
	// delays).
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var live bool
		if err := b.pool.QueryRow(context.Background(),
			`SELECT EXISTS (SELECT FROM idempotency_store WHERE expires_at > now())`).Scan(&live); err != nil {
			t.Fatal(err)
		}
		if !live {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the record did not expire within 2 minutes of a 2s retention")
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := post(t, b.srv.URL, "alice", key1, orderBody, "")
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("after expiry: %d replayed=%q", r.status, r.header.Get("Idempotent-Replayed"))
	}
	if n := count(t, b.srv.URL, "alice"); n != 2 {
		t.Fatalf("orders = %d, want 2 (a new request after expiry)", n)
	}
}

func TestBadBodyStoredAsFailedAndReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t, defaults())
	bad := `{"sku": "sku_1", "qty": -1, "amount": "49.99", "currency": "EUR"}`
	first := post(t, b.srv.URL, "alice", key1, bad, "")
	again := post(t, b.srv.URL, "alice", key1, bad, "")
	if first.status != http.StatusBadRequest || again.status != http.StatusBadRequest ||
		again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(first.body, again.body) {
		t.Fatalf("4xx: first %d %s, again %d %s", first.status, first.body, again.status, again.body)
	}
}

// The service is killed (SIGKILL) while processing; after the lock
// timeout, a retry against a restarted service succeeds, and exactly one
// order exists.
func TestKilledServerRetriedAfterLockTimeout(t *testing.T) {
	t.Parallel()
	url := pgtest.SchemaURL(t)
	start := func() (*exec.Cmd, string) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "ORDERS_SERVE=1", "ADDR=127.0.0.1:0", "DATABASE_URL="+url,
			"IDEMPOTENCY_LOCK_TIMEOUT=8s", "IDEMPOTENCY_RETENTION=1h")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			t.Fatalf("service did not start: %v", err)
		}
		base := strings.TrimSpace(strings.TrimPrefix(line, "orders: listening on "))
		return cmd, base
	}
	first, base := start()
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequest(http.MethodPost, base+"/orders?work=1m", strings.NewReader(orderBody))
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Idempotency-Key", key1)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	// Wait until the first request holds the key (without claiming it
	// ourselves: a poll that got there first would execute).
	pool := pgtest.PoolURL(t, url)
	deadline := time.Now().Add(time.Minute)
	for {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_store WHERE status = 'PROCESSING'`).Scan(&n); err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first request never held the key")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := post(t, base, "alice", key1, orderBody, ""); r.status != http.StatusConflict {
		t.Fatalf("while the first request runs: %d %s, want 409", r.status, r.body)
	}
	_ = first.Process.Signal(syscall.SIGKILL)
	_ = first.Wait()
	<-done

	second, base2 := start()
	defer func() { _ = second.Process.Kill(); _ = second.Wait() }()
	sawConflict := false
	var r reply
	// The lease (8s) outlasts a restart on a loaded machine, so the
	// restarted service first answers 409, then runs the order once.
	for deadline := time.Now().Add(time.Minute); ; {
		r = post(t, base2, "alice", key1, orderBody, "")
		if r.status != http.StatusConflict {
			break
		}
		sawConflict = true
		if time.Now().After(deadline) {
			t.Fatal("the dead holder's lease never ran out")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r.status != http.StatusCreated || !sawConflict {
		t.Fatalf("retry: %d %s (in progress seen before: %v)", r.status, r.body, sawConflict)
	}
	if n := count(t, base2, "alice"); n != 1 {
		t.Fatalf("orders = %d, want exactly 1", n)
	}
}

// The user-facing checker, run against this service as a user would run it
// against theirs.
func TestOrdersPassIdempotencyChecks(t *testing.T) {
	t.Parallel()
	url := pgtest.SchemaURL(t)
	pool := pgtest.PoolURL(t, url)
	// Build hands the checker's fault-injecting Doer to the service, so
	// that it also checks that an order is undone with an unrecorded outcome.
	var inner idempotency.Doer
	capture := defaults()
	capture.wrap = func(d idempotency.Doer) idempotency.Doer { inner = d; return d }
	if _, err := newServer(context.Background(), pool, capture); err != nil {
		t.Fatal(err)
	}
	idempotencytest.CheckHTTP(t, idempotencytest.HTTPCase{
		Doer: inner,
		Build: func(d idempotency.Doer) http.Handler {
			cfg := defaults()
			cfg.wrap = func(idempotency.Doer) idempotency.Doer { return d }
			h, err := newServer(context.Background(), pool, cfg)
			if err != nil {
				t.Fatal(err)
			}
			return h
		},
		NewRequest: func(scope, key string, variant int) *http.Request {
			body := fmt.Sprintf(`{"sku": "sku_1", "qty": %d, "amount": "49.99", "currency": "EUR"}`, variant+1)
			r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
			r.Header.Set("Authorization", "Bearer "+scope)
			if key != "" {
				r.Header.Set("Idempotency-Key", key)
			}
			return r
		},
		Effects: func(scope string) int {
			var n int
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE scope = $1`, scope).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
		KeyRequired: true,
	})
}
