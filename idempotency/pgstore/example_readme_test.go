package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/pgtest"
)

// The README's core API, run: an order created once, whatever the
// retries; the retry gets the first answer byte for byte.
func Example_coreAPI() {
	ctx := context.Background()
	pool, done := pgtest.ExamplePool(ctx) // a fresh schema of TEST_DATABASE_URL
	defer done()

	// Once, at start-up: the core's tables only (migrations.Migrate for every
	// component; `payonce migrate print` for your own tool).
	if _, err := migrations.MigrateLines(ctx, pool, migrations.LineIdempotency); err != nil {
		panic(err)
	}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		panic(err)
	}
	exec, err := pgstore.NewExecutor(store, &idempotency.Config{
		LockTimeout: 30 * time.Second, // lease, kept alive by heartbeats while the action runs
		Retention:   24 * time.Hour,   // how long outcomes are replayed
	})
	if err != nil {
		panic(err)
	}

	created := 0
	createOrder := func(userID, clientKey, sku string, qty int64) {
		// Per request: the key names the intent, the fingerprint its significant fields.
		key, err := idempotency.ComposeKey(userID, "createOrder", clientKey)
		if err != nil {
			panic(err)
		}
		fp, err := idempotency.NewFingerprint().String("sku", sku).Int("qty", qty).Sum()
		if err != nil {
			panic(err)
		}
		res, err := exec.Do(ctx, idempotency.Request{Scope: userID, Key: key, Fingerprint: fp},
			func(ctx context.Context) (idempotency.Response, error) {
				created++
				return idempotency.Response{Code: 201, Body: []byte(`{"order_id":"ord_1"}`)}, nil
			})
		switch {
		case errors.Is(err, idempotency.ErrInProgress):
			fmt.Println("409: still in progress")
		case errors.Is(err, idempotency.ErrFingerprintMismatch):
			fmt.Println("409: same key, other fields; nothing changed")
		case err != nil:
			panic(err)
		default:
			fmt.Printf("%d %s replayed=%v\n", res.Response.Code, res.Response.Body, res.Replayed)
		}
	}
	createOrder("usr_1", "7f0c1a9e-5b4d-4e6f-8a2b-3c9d0e1f2a3b", "sku-42", 2)
	createOrder("usr_1", "7f0c1a9e-5b4d-4e6f-8a2b-3c9d0e1f2a3b", "sku-42", 2) // the client's retry
	createOrder("usr_1", "7f0c1a9e-5b4d-4e6f-8a2b-3c9d0e1f2a3b", "sku-42", 3) // same key, other quantity
	fmt.Println("orders created:", created)
	// Output:
	// 201 {"order_id":"ord_1"} replayed=false
	// 201 {"order_id":"ord_1"} replayed=true
	// 409: same key, other fields; nothing changed
	// orders created: 1
}

// The README's middleware, run: the order row and the stored response
// commit in one transaction; a retry replays the response.
func Example_middleware() {
	ctx := context.Background()
	pool, done := pgtest.ExamplePool(ctx)
	defer done()
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, sku TEXT, qty INT)`); err != nil {
		panic(err)
	}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		panic(err)
	}
	exec, err := pgstore.NewExecutor(store, nil)
	if err != nil {
		panic(err)
	}

	protect, err := idempotency.Middleware(exec.WithTx(), idempotency.MiddlewareConfig{
		Scope: func(r *http.Request) string { return r.Header.Get("X-User") }, // from authentication, never the body
		Routes: []idempotency.Route{{
			Pattern: "POST /orders", Action: "createOrder", RequireKey: true,
			Fields: []string{"sku", "qty"}, // the significant fields
		}},
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		tx, _ := pgstore.TxFromContext(r.Context()) // commits with the stored response
		var id int64
		if err := tx.QueryRow(r.Context(), `INSERT INTO orders (sku, qty) VALUES ('sku-42', 2) RETURNING id`).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order_id":%d}`, id)
	})
	srv := httptest.NewServer(protect(mux))
	defer srv.Close()

	for i := 0; i < 2; i++ {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", bytes.NewBufferString(`{"sku": "sku-42", "qty": 2}`))
		req.Header.Set("X-User", "usr_1")
		req.Header.Set("Idempotency-Key", "0b6f3f0e-9d0a-4c1e-8a57-2f1d3c4b5a69")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, body.String(), "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("orders:", n)
	// Output:
	// 201 {"order_id":1} replayed: false
	// 201 {"order_id":1} replayed: true
	// orders: 1
}
