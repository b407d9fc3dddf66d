// Command checkout is a checkout HTTP service on payonce's payments API:
// every POST /charges with the same Idempotency-Key charges the customer
// once, whatever the retries, double clicks, lost responses or crashes.
// The endpoints and status codes are documented in package service.
//
// Configuration, by environment only:
//
//	ADDR               listen address (default 127.0.0.1:8080)
//	DATABASE_URL       PostgreSQL (default: a throwaway local cluster)
//	STRIPE_API_BASE    Stripe's API base URL, e.g. https://api.stripe.com;
//	                   when unset, a stateful Stripe fake starts in-process
//	                   and its URL is logged
//	STRIPE_SECRET_KEY  the secret key (sk_test_... for test mode); required
//	                   with STRIPE_API_BASE
//
// Try it:
//
//	go run ./examples/checkout &
//	curl -s -XPOST localhost:8080/charges -H 'Authorization: Bearer alice' \
//	  -H 'Idempotency-Key: order-1001' -d '{"amount": "49.99", "currency": "EUR",
//	  "recipient": "acct_x", "payment_method": "pm_card_visa", "provider": "stripe"}'
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
	"github.com/payonce/payonce/internal/localpg"
	"github.com/payonce/payonce/providers/stripe/stripetest"
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
	cfg := service.Config{DatabaseURL: os.Getenv("DATABASE_URL"),
		StripeAPIBase: os.Getenv("STRIPE_API_BASE"), StripeSecretKey: os.Getenv("STRIPE_SECRET_KEY")}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if cfg.StripeAPIBase == "" {
		fake := stripetest.NewServer(nil)
		defer fake.Close()
		cfg.StripeAPIBase, cfg.StripeSecretKey = fake.URL(), "sk_test_checkout"
		slog.Info("STRIPE_API_BASE is unset: started the Stripe fake in-process", "url", fake.URL())
	} else if cfg.StripeSecretKey == "" {
		return errors.New("STRIPE_SECRET_KEY is required with STRIPE_API_BASE")
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
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
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
