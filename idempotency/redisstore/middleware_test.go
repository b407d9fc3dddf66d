package redisstore_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/idempotencytest"
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

// Several instances of a service on one Redis: the middleware storm and
// the Executor.Do storm of idempotencytest.CheckInstances.
func TestInstances(t *testing.T) {
	t.Parallel()
	idempotencytest.CheckInstances(t, func(t *testing.T, n int) []*idempotency.Executor {
		prefix := redistest.Prefix()
		var out []*idempotency.Executor
		for range n {
			s, err := redisstore.New(redistest.Client(t), &redisstore.Config{KeyPrefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			e, err := idempotency.New(s, &idempotency.Config{LockTimeout: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close() })
			out = append(out, e)
		}
		return out
	}, &idempotencytest.InstancesConfig{Callers: 48, Keys: 8, CallersPerKey: 12})
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
