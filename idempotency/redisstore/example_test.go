package redisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/redisstore"
	"github.com/payonce/payonce/idempotency/redisstore/redistest"
)

// A store on a standalone Redis server under an executor: the first
// request runs its action, the retry gets the stored outcome back.
func Example() {
	addr, err := redistest.Start() // in production: your server's address
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()

	// In production: nil, or a KeyPrefix of your application's.
	store, err := redisstore.New(rdb, &redisstore.Config{KeyPrefix: redistest.Prefix()})
	if err != nil {
		log.Fatal(err)
	}
	exec, err := idempotency.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer exec.Close()

	ctx := context.Background()
	key, _ := idempotency.ComposeKey("usr_7fQ9x", "createOrder", "a1b2c3d4-0000-4000-8000-000000000001")
	fp, _ := idempotency.NewFingerprint().Decimal("amount", "12.50").String("currency", "EUR").Sum()
	req := idempotency.Request{Scope: "usr_7fQ9x", Key: key, Fingerprint: fp}
	createOrder := func(ctx context.Context) (idempotency.Response, error) {
		fmt.Println("creating the order")
		return idempotency.Response{Code: 201, Body: []byte(`{"order":"o_1"}`)}, nil
	}

	for range 2 {
		res, err := exec.Do(ctx, req, createOrder)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Response.Code, string(res.Response.Body), "replayed:", res.Replayed)
	}
	// Output:
	// creating the order
	// 201 {"order":"o_1"} replayed: false
	// 201 {"order":"o_1"} replayed: true
}
