package main

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/redis/go-redis/v9"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/dynamostore"
	"github.com/payonce/payonce/idempotency/dynamostore/dynamotest"
	"github.com/payonce/payonce/idempotency/redisstore"
	"github.com/payonce/payonce/idempotency/redisstore/redistest"
)

// The raw paths are worth comparing only if they do the store's work: the
// same scripts or requests, leaving the same record. These tests run one
// raw cycle on a real server and check that the store reads its record
// as its own (the response Do stores, COMPLETED, at the raw claim's
// version, expiring at the retention) and replays it, and that the raw
// record has the fields of one the store wrote, with the same types.

func checkRawRecord(t *testing.T, rec idempotency.Record, err error, v int64, t0 time.Time) {
	t.Helper()
	if err != nil {
		t.Fatalf("the store's Get of the raw record: %v", err)
	}
	if rec.Status != idempotency.StatusCompleted || rec.LockVersion != v || rec.Response == nil ||
		rec.Response.Code != 201 || string(rec.Response.Body) != string(body) ||
		!slices.Equal(rec.Response.Header["Content-Type"], benchHeader["Content-Type"]) {
		t.Fatalf("the raw record, as the store reads it: %+v (response %+v), want COMPLETED at version %d with Do's response", rec, rec.Response, v)
	}
	if exp := t0.Add(storeRetention); rec.ExpiresAt.Before(exp.Add(-time.Minute)) || rec.ExpiresAt.After(exp.Add(time.Minute)) {
		t.Fatalf("the raw record expires at %s, want about %s", rec.ExpiresAt, exp)
	}
}

func replays(t *testing.T, exec *idempotency.Executor, fp idempotency.Fingerprint, key string) {
	t.Helper()
	res, err := exec.Do(context.Background(), idempotency.Request{Scope: scope, Key: key, Fingerprint: fp},
		func(context.Context) (idempotency.Response, error) {
			t.Fatal("the raw record's key executed again")
			return idempotency.Response{}, nil
		})
	if err != nil || !res.Replayed || string(res.Response.Body) != string(body) {
		t.Fatalf("Do of the raw record's key: %+v %v, want a replay of Do's response", res, err)
	}
}

func TestRawRedisDoesTheStoresWork(t *testing.T) {
	addr, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(redistest.Stop)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	store, err := redisstore.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	exec, err := newStoreExecutor(store)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := benchFingerprint()
	if err != nil {
		t.Fatal(err)
	}
	if err := seed(ctx, exec, fp, 1); err != nil { // the store runs its scripts once
		t.Fatal(err)
	}
	raw, err := newRawRedis(ctx, rdb, fp)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := raw.cycle(ctx, "raw", 12345); err != nil {
		t.Fatal(err)
	}
	rec, err := store.Get(ctx, scope, "raw")
	checkRawRecord(t, rec, err, 12345, t0)
	replays(t, exec, fp, "raw")

	sdkFields, err := rdb.HGetAll(ctx, raw.recordKey("1")).Result()
	if err != nil {
		t.Fatal(err)
	}
	rawFields, err := rdb.HGetAll(ctx, raw.recordKey("raw")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if a, b := slices.Sorted(maps.Keys(sdkFields)), slices.Sorted(maps.Keys(rawFields)); !slices.Equal(a, b) {
		t.Fatalf("the raw record's fields %q, the store's %q", b, a)
	}
	if err := raw.replayWorker(1)(ctx, rand.New(rand.NewPCG(1, 2)), 0); err != nil {
		t.Fatalf("the raw replay of a key the store completed: %v", err)
	}
}

func TestRawDynamoDoesTheStoresWork(t *testing.T) {
	endpoint, err := dynamotest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dynamotest.Stop)
	ctx := context.Background()
	client := dynamotest.NewClient(endpoint)
	if err := dynamostore.CreateTable(ctx, client, dynamoTable); err != nil {
		t.Fatal(err)
	}
	store, err := dynamostore.New(ctx, client, &dynamostore.Config{Table: dynamoTable})
	if err != nil {
		t.Fatal(err)
	}
	exec, err := newStoreExecutor(store)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := benchFingerprint()
	if err != nil {
		t.Fatal(err)
	}
	if err := seed(ctx, exec, fp, 1); err != nil {
		t.Fatal(err)
	}
	raw, err := newRawDynamo(client, fp)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := raw.cycle(ctx, "raw", 12345); err != nil {
		t.Fatal(err)
	}
	rec, err := store.Get(ctx, scope, "raw")
	checkRawRecord(t, rec, err, 12345, t0)
	replays(t, exec, fp, "raw")

	shape := func(key string) map[string]string {
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(dynamoTable), Key: dynamoPK(key), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for k, v := range out.Item {
			switch v.(type) {
			case *types.AttributeValueMemberS:
				m[k] = "S"
			case *types.AttributeValueMemberN:
				m[k] = "N"
			case *types.AttributeValueMemberB:
				m[k] = "B"
			default:
				m[k] = "?"
			}
		}
		return m
	}
	if sdk, r := shape("1"), shape("raw"); !maps.Equal(sdk, r) {
		t.Fatalf("the raw item's attributes %v, the store's %v", r, sdk)
	}
	if err := raw.replayWorker(1)(ctx, rand.New(rand.NewPCG(1, 2)), 0); err != nil {
		t.Fatalf("the raw read of a key the store completed: %v", err)
	}
}
