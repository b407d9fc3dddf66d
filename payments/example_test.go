package payments_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	paystripe "github.com/payonce/payonce/providers/stripe"
)

// A checkout handler: the client's Idempotency-Key is the charge's key, so
// that any number of retries charge once. (It needs a migrated database
// and Stripe, so it is compiled, not run; examples/checkout is the
// complete service.)
func Example() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	stripe, _ := paystripe.New(&paystripe.Config{SecretKey: os.Getenv("STRIPE_SECRET_KEY")})
	client, err := payments.New(pool, []provider.Provider{stripe}, nil)
	if err != nil {
		panic(err)
	}

	http.HandleFunc("POST /pay", func(w http.ResponseWriter, r *http.Request) {
		out, err := client.Charge(r.Context(), payments.ChargeParams{
			Scope: r.Header.Get("X-Customer"), Key: r.Header.Get("Idempotency-Key"), Provider: "stripe",
			Amount: money.MustParse("49.99", money.EUR), Recipient: "acct_shop", PaymentMethod: "pm_card_visa",
		})
		var decline *provider.DeclineError
		switch {
		case err == nil:
			fmt.Fprintf(w, "%s %s (replayed: %v)\n", out.Status, out.ProviderID, out.Replayed)
		case errors.As(err, &decline):
			http.Error(w, "declined: "+decline.DeclineCode, http.StatusPaymentRequired) // final for this key
		case payments.OutcomeUnknown(err), idempotency.SafeToRetry(err), errors.Is(err, idempotency.ErrInProgress):
			w.Header().Set("Retry-After", "1") // retry with the SAME key: it never charges twice
			http.Error(w, "outcome pending", http.StatusServiceUnavailable)
		default:
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	})
}

// ChargeTx commits the caller's own rows with the charge's outcome: the
// order is marked paid exactly when the charge is recorded as succeeded.
func ExampleClient_ChargeTx() {
	var client *payments.Client // from payments.New
	charge := func(ctx context.Context, orderID, customer string) error {
		_, err := client.ChargeTx(ctx, payments.ChargeParams{
			Scope: customer, Key: "order-" + orderID, Provider: "stripe",
			Amount: money.MustParse("49.99", money.EUR), Recipient: "acct_shop", PaymentMethod: "pm_card_visa",
		}, func(ctx context.Context, tx pgx.Tx, out payments.Outcome) error {
			if out.Status != payments.IntentSucceeded {
				return nil
			}
			_, err := tx.Exec(ctx, `UPDATE orders SET paid_by = $1 WHERE id = $2`, out.ProviderID, orderID)
			return err
		})
		return err
	}
	_ = charge
}
