package stripe_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// A webhook endpoint verifying what the fake delivers: a charge, then a
// delivery whose body was altered on the way.
func ExampleProvider_VerifyWebhook() {
	p, err := paystripe.New(&paystripe.Config{
		SecretKey: "sk_test_example",
		// The new secret and, until the rotation ends, the old one.
		WebhookSecrets: []string{"whsec_new", "whsec_old"},
	})
	if err != nil {
		panic(err)
	}
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		events, err := p.VerifyWebhook(r.Context(), r.Header, body)
		if err != nil {
			http.Error(w, "refused", http.StatusBadRequest)
			return
		}
		for _, e := range events {
			fmt.Println(e.Type, e.Kind, e.Key, e.Amount)
		}
	}))
	defer endpoint.Close()

	srv := stripetest.NewServer(&stripetest.Config{WebhookURL: endpoint.URL, WebhookSecret: "whsec_new"})
	defer srv.Close()
	charger, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_example", BaseURL: srv.URL()})
	if err != nil {
		panic(err)
	}
	_, err = charger.Charge(context.Background(), provider.ChargeRequest{
		Key:           "order-7",
		ProviderKey:   provider.DeriveKey("order-7", "charge", 1, paystripe.MaxProviderKeyLen),
		Amount:        money.MustParse("12.50", money.EUR),
		PaymentMethod: stripetest.PaymentMethodVisa,
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.WaitDeliveries(ctx); err != nil {
		panic(err)
	}

	ev := srv.Events()[0]
	header := http.Header{"Stripe-Signature": {stripetest.Sign(ev.Payload, "whsec_new", time.Now())}}
	_, err = p.VerifyWebhook(context.Background(), header, append(ev.Payload, ' '))
	fmt.Println("altered body refused:", errors.Is(err, provider.ErrWebhookSignature))
	// Output:
	// payment_intent.succeeded charge_succeeded order-7 12.50 EUR
	// altered body refused: true
}

// Without a creation window, Lookup asks Stripe's Search API, whose index
// lags behind: a fresh charge is not found yet, and the answer says it may
// be incomplete.
func ExampleProvider_Lookup() {
	clock := stripetest.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	srv := stripetest.NewServer(&stripetest.Config{Clock: clock.Now, SearchLag: time.Minute})
	defer srv.Close()
	p, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_example", BaseURL: srv.URL()})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	_, err = p.Charge(ctx, provider.ChargeRequest{
		Key:           "order-9",
		ProviderKey:   provider.DeriveKey("order-9", "charge", 1, paystripe.MaxProviderKeyLen),
		Amount:        money.MustParse("3.00", money.EUR),
		PaymentMethod: stripetest.PaymentMethodVisa,
	})
	if err != nil {
		panic(err)
	}

	show := func(what string, req provider.LookupRequest) {
		res, err := p.Lookup(ctx, req)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %d found, consistent %v\n", what, len(res.Charges), res.Consistent)
	}
	show("search at once", provider.LookupRequest{Key: "order-9"})
	show("list of the window", provider.LookupRequest{Key: "order-9", From: clock.Now().Add(-time.Minute), To: clock.Now()})
	clock.Advance(time.Minute)
	show("search a minute later", provider.LookupRequest{Key: "order-9"})
	// Output:
	// search at once: 0 found, consistent false
	// list of the window: 1 found, consistent true
	// search a minute later: 1 found, consistent false
}
