package dynamostore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/dynamostore"
	"github.com/payonce/payonce/idempotency/dynamostore/dynamotest"
)

// A store on a DynamoDB table under an executor: the first request runs
// its action, the retry gets the stored outcome back.
func Example() {
	endpoint, err := dynamotest.Start() // a local dynalite
	if err != nil {
		log.Fatal(err)
	}
	// In production: dynamodb.NewFromConfig(cfg) with your AWS config.
	client := dynamotest.NewClient(endpoint)

	ctx := context.Background()
	table := dynamotest.TableName() // in production: your table's name
	if err := dynamostore.CreateTable(ctx, client, table); err != nil {
		log.Fatal(err)
	}
	store, err := dynamostore.New(ctx, client, &dynamostore.Config{Table: table})
	if err != nil {
		log.Fatal(err)
	}
	exec, err := idempotency.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer exec.Close()

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
