package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/pgtest"
)

// The README's quick start, run: HTTP routes protected on PostgreSQL in
// one call. The order row and the stored response commit in one
// transaction; the retry replays the response; a guessable key is
// refused before anything is stored.
func ExampleMiddleware() {
	ctx := context.Background()
	pool, done := pgtest.ExamplePool(ctx) // a fresh schema of TEST_DATABASE_URL
	defer done()
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, sku TEXT, qty INT)`); err != nil {
		panic(err)
	}
	userFromAuth := func(r *http.Request) string { return r.Header.Get("X-User") } // your authentication
	mux := http.NewServeMux()

	_, err := migrations.MigrateLines(ctx, pool, migrations.LineIdempotency) // or `payonce migrate up`
	if err != nil {
		panic(err)
	}
	protect, err := pgstore.Middleware(pool, idempotency.MiddlewareConfig{
		Scope: func(r *http.Request) string { return userFromAuth(r) }, // never from the body
		Routes: []idempotency.Route{{
			Pattern: "POST /orders", Action: "createOrder", RequireKey: true,
			Fields: []string{"sku", "qty"}, // the significant fields
		}},
	}, nil)
	if err != nil {
		panic(err)
	}
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
	handler := protect(mux) // http.ListenAndServe(addr, handler)

	srv := httptest.NewServer(handler)
	defer srv.Close()
	send := func(key string) {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(`{"sku": "sku-42", "qty": 2}`))
		req.Header.Set("X-User", "usr_1")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusBadRequest {
			body = []byte(resp.Header.Get("Content-Type"))
		}
		fmt.Println(resp.StatusCode, string(body), "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	send("0b6f3f0e-9d0a-4c1e-8a57-2f1d3c4b5a69")
	send("0b6f3f0e-9d0a-4c1e-8a57-2f1d3c4b5a69") // the client's retry
	send("order-1")                              // guessable: refused
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("orders:", n)
	// Output:
	// 201 {"order_id":1} replayed: false
	// 201 {"order_id":1} replayed: true
	// 400 application/problem+json replayed: false
	// orders: 1
}
