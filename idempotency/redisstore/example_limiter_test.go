package redisstore_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/redisstore"
	"github.com/payonce/payonce/idempotency/redisstore/redistest"
)

// The middleware on a Redis store, with the rate limit of new keys shared
// by every instance through the same Redis: past the limit, a new key is
// answered 429 with Retry-After, and a replay is still served.
func ExampleLimiter() {
	addr, err := redistest.Start() // in production: your server's address
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()

	// In production: nil, or a KeyPrefix of your application's.
	cfg := &redisstore.Config{KeyPrefix: redistest.Prefix()}
	store, err := redisstore.New(rdb, cfg)
	if err != nil {
		log.Fatal(err)
	}
	exec, err := idempotency.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer exec.Close()
	// Two new keys per scope per day, counted on the server, beside the
	// store's records (the same Config, so the same key prefix).
	limiter, err := redisstore.NewLimiter(rdb, 2, 24*time.Hour, cfg)
	if err != nil {
		log.Fatal(err)
	}
	mw, err := idempotency.Middleware(exec, idempotency.MiddlewareConfig{
		Scope:   func(r *http.Request) string { return r.Header.Get("X-User") }, // in production: from authentication
		Routes:  []idempotency.Route{{Pattern: "POST /orders", Action: "createOrder"}},
		Limiter: limiter,
	})
	if err != nil {
		log.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"order":"o_1"}`)
	}))

	post := func(key string) {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"sku":"pen"}`))
		r.Header.Set("X-User", "usr_7fQ9x")
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, "replayed:", w.Header().Get("Idempotent-Replayed") == "true",
			"Retry-After set:", w.Header().Get("Retry-After") != "")
	}
	post("0b9f3c1e-6f1a-4d2b-9a57-1f2e3d4c5b01")
	post("0b9f3c1e-6f1a-4d2b-9a57-1f2e3d4c5b02")
	post("0b9f3c1e-6f1a-4d2b-9a57-1f2e3d4c5b03") // a third new key: refused
	post("0b9f3c1e-6f1a-4d2b-9a57-1f2e3d4c5b01") // a replay: never counted
	// Output:
	// 201 replayed: false Retry-After set: false
	// 201 replayed: false Retry-After set: false
	// 429 replayed: false Retry-After set: true
	// 201 replayed: true Retry-After set: false
}
