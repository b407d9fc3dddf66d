// Command checkout is a checkout HTTP service on payonce's payments API:
// every POST /charges with the same Idempotency-Key charges the customer
// once, whatever the retries, double clicks, lost responses or crashes;
// every POST /checkout reserves stock, charges and records the order once,
// or undoes what it did (a three-step saga, finished by a recovery job when
// the client gives up). The endpoints and status codes are documented in
// package service.
//
// Configuration, by environment only:
//
//	ADDR                   listen address (default 127.0.0.1:8080)
//	DATABASE_URL           PostgreSQL (default: a throwaway local cluster)
//	STRIPE_API_BASE        Stripe's API base URL, e.g. https://api.stripe.com
//	STRIPE_SECRET_KEY      its secret key (sk_test_... for test mode)
//	STRIPE_WEBHOOK_SECRET  the signing secret of the endpoint /webhooks/stripe
//	ADYEN_API_BASE         e.g. https://checkout-test.adyen.com/v71
//	ADYEN_API_KEY, ADYEN_MERCHANT_ACCOUNT, ADYEN_HMAC_KEY (hex), ADYEN_RETURN_URL
//	PAYPAL_API_BASE        e.g. https://api-m.sandbox.paypal.com
//	PAYPAL_CLIENT_ID, PAYPAL_SECRET, PAYPAL_WEBHOOK_ID
//	CHECKOUT_LOCK_TIMEOUT  lease of a payment or checkout in progress (default 30s)
//	CHECKOUT_RECOVER_SPEC  cron schedule of the checkout sagas' recovery
//	                       (default "@every 1m"; "off" runs none)
//	CHECKOUT_RECONCILE_SPEC     cron schedule of the payments reconciler, which
//	                            settles the payments whose outcome stayed unknown
//	                            (default "@every 1m"; "off" runs none)
//	CHECKOUT_RECONCILE_GRACE    how long an open payment is left to its client's
//	                            retries before the reconciler looks at it (default 2m)
//	CHECKOUT_RECONCILE_RECHECK  the delays before each next look at a payment its
//	                            provider gave no answer for, comma-separated
//	                            (default 1m,5m,1h,6h,24h; the last repeats)
//
// README.md describes every variable.
//
// For tests only (never set them in production):
//
//	PAYONCE_CHECKOUT_CRASH_AT          <step>:<phase> kills the process (SIGKILL) at
//	                                   that point of every checkout: step reserve,
//	                                   charge, confirm, reserve_compensate or
//	                                   charge_compensate; phase before, commit or after
//	PAYONCE_CHECKOUT_FAIL_CONFIRM_SKU  the confirm step refuses every order of this
//	                                   sku (the checkout is refunded and released)
//
// For each provider whose API base is unset, a stateful fake of it starts
// in-process (its URL is logged) and posts its webhooks to this service.
//
// Try it:
//
//	go run ./examples/checkout &
//	curl -s -XPOST localhost:8080/charges -H 'Authorization: Bearer alice' \
//	  -H 'Idempotency-Key: order-1001' -d '{"amount": "49.99", "currency": "EUR",
//	  "recipient": "acct_x", "payment_method": "pm_card_visa", "provider": "stripe"}'
//	curl -s -XPOST localhost:8080/inventory -H 'Authorization: Bearer ops' \
//	  -d '{"sku": "book-42", "stock": 1}'
//	curl -s -XPOST localhost:8080/checkout -H 'Authorization: Bearer alice' \
//	  -H 'Idempotency-Key: cart-2002' -d '{"sku": "book-42", "qty": 1, "amount": "12.00",
//	  "currency": "EUR", "payment_method": "pm_card_visa", "provider": "stripe", "recipient": "acct_x"}'
//	curl -s localhost:8080/checkout/cart-2002 -H 'Authorization: Bearer alice'
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/payonce/payonce/examples/checkout/service"
	"github.com/payonce/payonce/pgtest/localpg"
	"github.com/payonce/payonce/providers/fakes"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "checkout:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer l.Close()

	// Fakes for the providers not configured, posting webhooks here.
	fk := fakes.Start(fakes.Options{Stripe: os.Getenv("STRIPE_API_BASE") == "", Adyen: os.Getenv("ADYEN_API_BASE") == "",
		PayPal:      os.Getenv("PAYPAL_API_BASE") == "",
		WebhookBase: "http://" + l.Addr().String()})
	defer fk.Close()
	env := fk.Env()
	for _, name := range []string{"STRIPE_API_BASE", "ADYEN_API_BASE", "PAYPAL_API_BASE"} {
		if env[name] != "" {
			slog.Info(name+" is unset: started the provider's fake in-process", "url", env[name])
		}
	}
	cfg, err := service.ConfigFrom(fakes.Getenv(env))
	if err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		c, err := localpg.Start(ctx, localpg.Options{Fast: true})
		if err != nil {
			return err
		}
		defer c.Stop()
		cfg.DatabaseURL = c.URL
		slog.Info("DATABASE_URL is unset: started a throwaway PostgreSQL", "port", c.Port)
	}
	svc, err := service.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer svc.Close()
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Printf("checkout: listening on http://%s\n", l.Addr())
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
