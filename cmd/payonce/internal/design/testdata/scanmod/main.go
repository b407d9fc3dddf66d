// Package main is a service with planted idempotency anti-patterns, for
// the scanner's tests (design/scan_test.go). The line numbers matter.
package main

import (
	"database/sql"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/robfig/cron/v3"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/paymentintent"
)

var db *sql.DB

func main() {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", createOrder)
	mux.HandleFunc("GET /orders/{id}", getOrder)
	c := cron.New()
	c.AddFunc("@hourly", payout)
	http.ListenAndServe(":8080", mux)
}

func createOrder(w http.ResponseWriter, r *http.Request) {
	db.Exec("INSERT INTO orders (id, sku) VALUES ($1, $2)", r.FormValue("id"), r.FormValue("sku"))
	params := &stripe.PaymentIntentParams{Amount: stripe.Int64(1000), Currency: stripe.String("eur")}
	paymentintent.New(params)
}

func getOrder(w http.ResponseWriter, r *http.Request) {}

func payout() {
	key := "payout_" + time.Now().Format("2006-01-02")
	reference := uuid.NewString()
	_, _ = key, reference
	db.Exec("SELECT pg_advisory_lock(42)")
}
