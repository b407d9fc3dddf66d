package main

import (
	"sync"

	"github.com/google/uuid"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/paymentintent"
	"github.com/stripe/stripe-go/v79/refund"
)

// chargeWithRetry retries a Stripe charge, with a new key per attempt.
func chargeWithRetry(amount int64) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		params := &stripe.PaymentIntentParams{Amount: stripe.Int64(amount), Currency: stripe.String("eur")}
		params.SetIdempotencyKey(uuid.New().String())
		if _, err = paymentintent.New(params); err == nil {
			return nil
		}
	}
	return err
}

func refundOnce(charge string) error {
	p := &stripe.RefundParams{Charge: stripe.String(charge)}
	p.IdempotencyKey = stripe.String(uuid.NewString())
	_, err := refund.New(p)
	return err
}

func confirmOnce(id string) error {
	idem := uuid.NewString()
	params := &stripe.PaymentIntentConfirmParams{}
	params.SetIdempotencyKey(idem)
	_, err := paymentintent.Confirm(id, params)
	return err
}

func captureOnce(id string) error {
	token := uuid.NewString()
	params := &stripe.PaymentIntentCaptureParams{}
	params.SetIdempotencyKey(token)
	_, err := paymentintent.Capture(id, params)
	return err
}

var mu sync.Mutex

func saveOrder(id, sku string) {
	mu.Lock()
	defer mu.Unlock()
	db.Exec("INSERT INTO orders (id, sku) VALUES ($1, $2)", id, sku)
}
