package redisstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/redisstore"
	"github.com/payonce/payonce/idempotency/redisstore/redistest"
)

// instance is one instance of a service: its own client, store, executor
// and middleware, on the server every instance shares.
type instance struct {
	rdb   *redis.Client
	store *redisstore.Store
	h     http.Handler
}

// service starts n instances under one key prefix, each protecting
// POST /orders with next; mutate adjusts each instance's middleware
// config (given the instance's client and the prefix).
func service(t *testing.T, n int, next http.Handler, mutate func(c *idempotency.MiddlewareConfig, rdb *redis.Client, prefix string)) []instance {
	t.Helper()
	prefix := redistest.Prefix()
	var out []instance
	for range n {
		rdb := redistest.Client(t)
		store, err := redisstore.New(rdb, &redisstore.Config{KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		exec, err := idempotency.New(store, &idempotency.Config{LockTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = exec.Close() })
		cfg := idempotency.MiddlewareConfig{
			Scope:  func(r *http.Request) string { return r.Header.Get("X-User") },
			Routes: []idempotency.Route{{Pattern: "POST /orders", Action: "createOrder", RequireKey: true}},
		}
		if mutate != nil {
			mutate(&cfg, rdb, prefix)
		}
		mw, err := idempotency.Middleware(exec, cfg)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, instance{rdb: rdb, store: store, h: mw(next)})
	}
	return out
}

func post(h http.Handler, user, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	r.Header.Set("X-User", user)
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// clientKey is a client's key: 128 bits and more, as the middleware
// requires by default.
func clientKey() string { return rand.Text() }

const order = `{"sku":"pen","qty":2}`

// A storm of the same request (same key, same body) from many callers
// through three instances: the handler runs once. It holds the key until
// every other caller has been answered, so each of them is answered "in
// progress" (409 with Retry-After), and each one's retry then gets the
// first response, byte for byte, marked replayed. The same key with
// another body is refused (422), and the record stays as it was.
func TestMiddlewareStormRunsHandlerOnce(t *testing.T) {
	t.Parallel()
	const callers = 48
	var calls, answered atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		// Hold until everyone not running this handler has an answer.
		poll := time.NewTicker(time.Millisecond)
		defer poll.Stop()
		for answered.Load()+calls.Load() < callers {
			select {
			case <-poll.C:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Location", "/orders/o_"+strconv.FormatInt(n, 10))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":"o_%d"}`, n)
	})
	svc := service(t, 3, handler, func(c *idempotency.MiddlewareConfig, rdb *redis.Client, prefix string) {
		c.MismatchStatus = http.StatusUnprocessableEntity
		l, err := redisstore.NewLimiter(rdb, 1000, time.Hour, &redisstore.Config{KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		c.Limiter = l
	})
	key := clientKey()

	res := make([]*httptest.ResponseRecorder, callers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res[i] = post(svc[i%len(svc)].h, "usr_storm", key, order)
			if res[i].Header().Get("Idempotent-Replayed") == "" && res[i].Code == http.StatusCreated {
				return // the caller that ran the handler
			}
			answered.Add(1)
		}()
	}
	close(start)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times for one key, want 1", n)
	}

	var first *httptest.ResponseRecorder
	var retry []int
	for i, w := range res {
		switch {
		case w.Code == http.StatusCreated && w.Header().Get("Idempotent-Replayed") == "":
			if first != nil {
				t.Fatalf("two callers got a first (not replayed) response")
			}
			first = w
		case w.Code == http.StatusConflict:
			if w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "request-in-progress") {
				t.Fatalf("caller %d: 409 without Retry-After or not in progress: %v %s", i, w.Header(), w.Body)
			}
			retry = append(retry, i)
		default:
			t.Fatalf("caller %d: %d %v %s, want the first response or 409 in progress", i, w.Code, w.Header(), w.Body)
		}
	}
	if first == nil || len(retry) != callers-1 {
		t.Fatalf("first response: %v; in progress: %d, want %d", first != nil, len(retry), callers-1)
	}
	// Their retries (each through another instance) get the first response.
	for _, i := range retry {
		w := post(svc[(i+1)%len(svc)].h, "usr_storm", key, order)
		if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" ||
			!bytes.Equal(w.Body.Bytes(), first.Body.Bytes()) || w.Header().Get("Location") != first.Header().Get("Location") {
			t.Fatalf("retry of caller %d: %d %v %q, want the first response %q replayed", i, w.Code, w.Header(), w.Body, first.Body)
		}
	}

	// The same key with another body: refused, nothing run, nothing changed.
	mm := post(svc[0].h, "usr_storm", key, `{"sku":"pen","qty":3}`)
	if mm.Code != http.StatusUnprocessableEntity || !strings.Contains(mm.Body.String(), "idempotency-key-reused") ||
		strings.Contains(mm.Body.String(), "o_1") || strings.Contains(mm.Body.String(), key) {
		t.Fatalf("another body under the key: %d %s, want 422 idempotency-key-reused without the first answer or the key", mm.Code, mm.Body)
	}
	if w := post(svc[2].h, "usr_storm", key, order); !bytes.Equal(w.Body.Bytes(), first.Body.Bytes()) {
		t.Fatalf("after the mismatch: %d %q, want the first response", w.Code, w.Body)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
}

// Past the limit shared on Redis by two instances, a new key is answered
// 429 with a Retry-After within the window, and its claim is taken back
// (no record); replays are still served, and another scope has its own
// budget.
func TestMiddlewareRateLimitSharedOnRedis(t *testing.T) {
	t.Parallel()
	const limit = 3
	const window = time.Hour
	var calls atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "created")
	})
	svc := service(t, 2, handler, func(c *idempotency.MiddlewareConfig, rdb *redis.Client, prefix string) {
		l, err := redisstore.NewLimiter(rdb, limit, window, &redisstore.Config{KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		c.Limiter = l
	})
	ctx := ctxFor(t)
	inOneWindow(t, svc[0].rdb, window, func(try int) error {
		calls.Store(0)
		user, other := "usr_busy"+strconv.Itoa(try), "usr_calm"+strconv.Itoa(try)
		keys := []string{clientKey(), clientKey(), clientKey(), clientKey()}
		for i := range limit { // alternating instances: the count is shared
			if w := post(svc[i%2].h, user, keys[i], order); w.Code != http.StatusCreated {
				return fmt.Errorf("new key %d: %d %s", i, w.Code, w.Body)
			}
		}
		over := post(svc[1].h, user, keys[limit], order)
		if over.Code != http.StatusTooManyRequests || !strings.Contains(over.Body.String(), "too-many-keys") {
			return fmt.Errorf("new key past the limit: %d %s, want 429 too-many-keys", over.Code, over.Body)
		}
		after, err := strconv.Atoi(over.Header().Get("Retry-After"))
		if err != nil || after < 1 || time.Duration(after)*time.Second > window {
			return fmt.Errorf("429 Retry-After %q, want whole seconds within the window %s", over.Header().Get("Retry-After"), window)
		}
		if _, err := svc[0].store.Get(ctx, user, "createOrder_"+keys[limit]); !errors.Is(err, idempotency.ErrNotFound) {
			return fmt.Errorf("the refused key left a record: %v", err)
		}
		if w := post(svc[1].h, user, keys[0], order); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
			return fmt.Errorf("a replay past the limit: %d %v, want 201 replayed", w.Code, w.Header())
		}
		if w := post(svc[0].h, other, keys[limit], order); w.Code != http.StatusCreated {
			return fmt.Errorf("another scope: %d %s", w.Code, w.Body)
		}
		if n := calls.Load(); n != limit+1 {
			return fmt.Errorf("the handler ran %d times, want %d", n, limit+1)
		}
		return nil
	})
}

// Executor.Do on many keys at once, through three executors on three
// clients: each key's action runs once, and every caller gets that run's
// response (each caller is told "in progress" first, and retries until
// it gets it).
func TestDoStormOneExecutionPerKey(t *testing.T) {
	t.Parallel()
	const keys, callersPerKey = 8, 12
	prefix := redistest.Prefix()
	var execs []*idempotency.Executor
	for range 3 {
		s, err := redisstore.New(redistest.Client(t), &redisstore.Config{KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		e, err := idempotency.New(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		execs = append(execs, e)
	}
	fp, err := idempotency.NewFingerprint().Decimal("amount", "10").String("currency", "EUR").Sum()
	if err != nil {
		t.Fatal(err)
	}
	var runs, answered [keys]atomic.Int64
	var bodies [keys][callersPerKey][]byte
	ctx := ctxFor(t)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for k := range keys {
		key, err := idempotency.ComposeKey("usr_do", "charge", clientKey())
		if err != nil {
			t.Fatal(err)
		}
		req := idempotency.Request{Scope: "usr_do", Key: key, Fingerprint: fp}
		// The action holds the key until every caller of it has had a
		// first answer: all of them meet it running.
		action := func(actx context.Context) (idempotency.Response, error) {
			n := runs[k].Add(1)
			poll := time.NewTicker(time.Millisecond)
			defer poll.Stop()
			for answered[k].Load()+runs[k].Load() < callersPerKey {
				select {
				case <-poll.C:
				case <-actx.Done():
					return idempotency.Response{}, actx.Err()
				}
			}
			return idempotency.Response{Code: 201, Body: fmt.Appendf(nil, "key %d run %d", k, n)}, nil
		}
		for c := range callersPerKey {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				poll := time.NewTicker(2 * time.Millisecond)
				defer poll.Stop()
				ran := false
				act := func(actx context.Context) (idempotency.Response, error) {
					ran = true
					return action(actx)
				}
				for try := 0; ; try++ {
					res, err := execs[(k+c)%len(execs)].Do(ctx, req, act)
					var ip *idempotency.InProgressError
					if try == 0 {
						if !ran && !errors.As(err, &ip) {
							t.Errorf("key %d: a first answer while the action runs: %v, want in progress", k, err)
						}
						answered[k].Add(1)
					}
					if errors.As(err, &ip) {
						select {
						case <-poll.C:
							continue
						case <-ctx.Done():
							t.Errorf("key %d: still in progress at the deadline", k)
							return
						}
					}
					if err != nil {
						t.Errorf("key %d: %v", k, err)
						return
					}
					bodies[k][c] = res.Response.Body
					return
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	for k := range keys {
		if n := runs[k].Load(); n != 1 {
			t.Errorf("key %d: the action ran %d times, want 1", k, n)
		}
		for c := range callersPerKey {
			if want := fmt.Sprintf("key %d run 1", k); string(bodies[k][c]) != want {
				t.Errorf("key %d caller %d: %q, want %q", k, c, bodies[k][c], want)
			}
		}
	}
}
