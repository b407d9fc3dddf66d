// Package fakes starts payonce's provider fakes (stripetest, adyentest,
// paypaltest) together, wired to post their webhooks to one service, with
// the environment that configures a payments client for them
// (providers.FromEnv): a service's integration tests, the examples and the
// lab's demos run against it. Each fake is the provider's API as its
// documentation describes it, stateful, and refuses what the provider
// refuses; Options adds the faults of a real network (responses lost after
// the commit, failures before it).
//
//	fk := fakes.Start(fakes.Options{Stripe: true, WebhookBase: srv.URL})
//	defer fk.Close()
//	cfg, err := providers.FromEnv(fakes.Getenv(fk.Env()))
package fakes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// Credentials the fakes accept and sign with.
const (
	StripeSecretKey      = "sk_test_payonce_fake"
	StripeWebhookSecret  = stripetest.DefaultWebhookSecret
	AdyenAPIKey          = "adyen_test_payonce_fake"
	AdyenMerchantAccount = "PayonceFakeECOM"
	AdyenHMACKey         = adyentest.DefaultHMACKey
	PayPalClientID       = paypaltest.DefaultClientID
	PayPalSecret         = paypaltest.DefaultSecret
	PayPalWebhookID      = paypaltest.DefaultWebhookID
)

// Options chooses the fakes and their faults.
type Options struct {
	// Stripe, Adyen, PayPal start that provider's fake.
	Stripe, Adyen, PayPal bool
	// WebhookBase is the service's URL; webhooks go to
	// WebhookBase/webhooks/<provider>. Empty: no webhook delivery.
	WebhookBase string
	// LoseAfter is the probability that a write's response is lost after
	// the provider committed it (a connection reset); FailBefore that it
	// fails with a 5xx before doing anything.
	LoseAfter, FailBefore float64
	// Seed makes the faults deterministic.
	Seed int64
	// WebhookRetryFor is how long each fake retries a failing webhook
	// delivery (the providers retry for days); 0: the fakes' short default.
	WebhookRetryFor time.Duration
}

// Set is the running fakes.
type Set struct {
	Stripe *stripetest.Server
	Adyen  *adyentest.Server
	PayPal *paypaltest.Server
}

func hook(base, provider string) string {
	if base == "" {
		return ""
	}
	return base + "/webhooks/" + provider
}

// Start starts the chosen fakes on loopback ports.
func Start(o Options) *Set {
	s := &Set{}
	if o.Stripe {
		var faults []stripetest.Fault
		if o.LoseAfter > 0 {
			faults = append(faults, stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/", Probability: o.LoseAfter})
		}
		if o.FailBefore > 0 {
			faults = append(faults, stripetest.Fault{Kind: stripetest.FailBefore, Method: "POST", Path: "/v1/", Probability: o.FailBefore / (1 - o.LoseAfter)})
		}
		s.Stripe = stripetest.NewServer(&stripetest.Config{Seed: o.Seed, Faults: faults, WebhookURL: hook(o.WebhookBase, "stripe"),
			WebhookRetryFor: o.WebhookRetryFor})
	}
	if o.Adyen {
		var faults []adyentest.Fault
		if o.LoseAfter > 0 {
			faults = append(faults, adyentest.Fault{Kind: adyentest.ResetAfter, Probability: o.LoseAfter})
		}
		if o.FailBefore > 0 {
			faults = append(faults, adyentest.Fault{Kind: adyentest.FailBefore, Probability: o.FailBefore / (1 - o.LoseAfter)})
		}
		s.Adyen = adyentest.NewServer(&adyentest.Config{Seed: o.Seed + 1, Faults: faults, APIKey: AdyenAPIKey,
			MerchantAccount: AdyenMerchantAccount, WebhookURL: hook(o.WebhookBase, "adyen"), WebhookRetryFor: o.WebhookRetryFor})
	}
	if o.PayPal {
		var faults []paypaltest.Fault
		if o.LoseAfter > 0 {
			faults = append(faults, paypaltest.Fault{Kind: paypaltest.ResetAfter, Method: "POST", Path: "/v2/*", Probability: o.LoseAfter})
		}
		if o.FailBefore > 0 {
			faults = append(faults, paypaltest.Fault{Kind: paypaltest.FailBefore, Method: "POST", Path: "/v2/*", Probability: o.FailBefore / (1 - o.LoseAfter)})
		}
		s.PayPal = paypaltest.NewServer(&paypaltest.Config{Seed: o.Seed + 2, Faults: faults, WebhookURL: hook(o.WebhookBase, "paypal"),
			WebhookRetryFor: o.WebhookRetryFor})
	}
	return s
}

// Env returns the checkout service's environment for the running fakes
// (STRIPE_API_BASE, ADYEN_API_BASE, ... and their credentials).
func (s *Set) Env() map[string]string {
	env := map[string]string{}
	if s.Stripe != nil {
		env["STRIPE_API_BASE"], env["STRIPE_SECRET_KEY"], env["STRIPE_WEBHOOK_SECRET"] = s.Stripe.URL(), StripeSecretKey, StripeWebhookSecret
	}
	if s.Adyen != nil {
		env["ADYEN_API_BASE"], env["ADYEN_API_KEY"] = s.Adyen.URL(), AdyenAPIKey
		env["ADYEN_MERCHANT_ACCOUNT"], env["ADYEN_HMAC_KEY"] = AdyenMerchantAccount, AdyenHMACKey
	}
	if s.PayPal != nil {
		env["PAYPAL_API_BASE"], env["PAYPAL_CLIENT_ID"] = s.PayPal.URL(), PayPalClientID
		env["PAYPAL_SECRET"], env["PAYPAL_WEBHOOK_ID"] = PayPalSecret, PayPalWebhookID
	}
	return env
}

// Getenv reads the environment, falling back to the fakes' variables.
func Getenv(env map[string]string) func(string) string {
	return func(k string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return env[k]
	}
}

// Close stops the fakes.
func (s *Set) Close() {
	if s.Stripe != nil {
		s.Stripe.Close()
	}
	if s.Adyen != nil {
		s.Adyen.Close()
	}
	if s.PayPal != nil {
		s.PayPal.Close()
	}
}

// Providers lists the running fakes' provider names.
func (s *Set) Providers() []string {
	var out []string
	if s.Stripe != nil {
		out = append(out, "stripe")
	}
	if s.Adyen != nil {
		out = append(out, "adyen")
	}
	if s.PayPal != nil {
		out = append(out, "paypal")
	}
	return out
}

// MaxAttempts bounds the attempt numbers [Set.Charges] counts: payments
// moves to the next attempt only after proving the previous one left
// nothing, so real intents stay far below it.
const MaxAttempts = 32

// Charges counts the charges that really exist at provider's fake for a
// local key (payonce's composed key), over every attempt's references:
// PaymentIntents carrying it in their metadata (Stripe), payments with an
// attempt's reference (Adyen), captures of orders with an attempt's
// custom_id (PayPal).
func (s *Set) Charges(provName, key string) int {
	return s.count(provName, key, provider.StepCharge,
		func(v string) int { return s.Stripe.CountsByMetadata(paystripe.MetadataKey, v).PaymentIntents },
		func(ref string) int { return s.Adyen.Counts(ref).Payments },
		func(ref string) int { return s.PayPal.CountsByCustomID(ref).Captures })
}

// count sums, for provider, what stripe counts of the objects carrying key
// in their metadata, or what adyen or paypal count for each attempt's
// reference of step (provider.DeriveKey) up to MaxAttempts.
func (s *Set) count(provName, key, step string, stripe, adyenRef, paypalRef func(string) int) int {
	if provName == "stripe" {
		return stripe(key)
	}
	n := 0
	for attempt := range MaxAttempts {
		switch provName {
		case "adyen":
			n += adyenRef(provider.DeriveKey(key, step, attempt, adyen.MaxReferenceLen))
		case "paypal":
			n += paypalRef(provider.DeriveKey(key, step, attempt, paypal.MaxProviderKeyLen))
		}
	}
	return n
}

// Net returns, per uppercase currency code, the money provider's fake
// holds in that provider's own minor units: charged minus refunded (see
// [Set.NetAmounts] for amounts).
func (s *Set) Net(provider string) map[string]int64 {
	out := map[string]int64{}
	switch provider {
	case "stripe":
		for c, t := range s.Stripe.Totals() {
			out[strings.ToUpper(c)] = t.Net
		}
	case "adyen":
		for c, t := range s.Adyen.Totals() {
			out[strings.ToUpper(c)] = t.Net
		}
	case "paypal":
		for c, t := range s.PayPal.Totals() {
			out[strings.ToUpper(c)] = t.Net
		}
	}
	return out
}

// NetAmounts returns, per uppercase currency code, the money provider's
// fake holds (charged minus refunded) as amounts, read in that provider's
// own units (Stripe writes ISK with two decimals, Adyen CVE with none),
// for comparison with the ledger.
func (s *Set) NetAmounts(provider string) (map[string]money.Money, error) {
	out := map[string]money.Money{}
	add := func(code string, amount string) error {
		cur := money.Currency(strings.ToUpper(code))
		m, err := money.Parse(amount, cur)
		if err != nil {
			return fmt.Errorf("%s net %s %s: %w", provider, amount, cur, err)
		}
		out[string(cur)] = m
		return nil
	}
	switch provider {
	case "stripe":
		for c, t := range s.Stripe.Totals() {
			if err := add(c, stripetest.FormatAmount(t.Net, c)); err != nil {
				return nil, err
			}
		}
	case "adyen":
		for c, t := range s.Adyen.Totals() {
			if err := add(c, t.NetAmount); err != nil {
				return nil, err
			}
		}
	case "paypal":
		for c, t := range s.PayPal.Totals() { // the PayPal fake sums ISO minor units
			m, err := money.FromMinor(t.Net, money.Currency(strings.ToUpper(c)))
			if err != nil {
				return nil, err
			}
			out[strings.ToUpper(c)] = m
		}
	}
	return out, nil
}

// WaitDeliveries waits until every fake has delivered (or given up on)
// its webhooks.
func (s *Set) WaitDeliveries(ctx context.Context) error {
	var errs []error
	if s.Stripe != nil {
		errs = append(errs, s.Stripe.WaitDeliveries(ctx))
	}
	if s.Adyen != nil {
		errs = append(errs, s.Adyen.WaitDeliveries(ctx))
	}
	if s.PayPal != nil {
		errs = append(errs, s.PayPal.WaitDeliveries(ctx))
	}
	return errors.Join(errs...)
}

// Refunds counts the refunds that really exist at provider's fake for a
// refund's local key (payonce's composed key), over every attempt's
// references, as [Set.Charges] counts charges: refunds carrying it in
// their metadata (Stripe), modifications with an attempt's reference
// (Adyen), refunds with an attempt's custom_id (PayPal).
func (s *Set) Refunds(provName, key string) int {
	return s.count(provName, key, provider.StepRefund,
		func(v string) int { return s.Stripe.CountsByMetadata(paystripe.MetadataKey, v).Refunds },
		func(ref string) int { return s.Adyen.Counts(ref).Refunds },
		func(ref string) int { return s.PayPal.CountsByCustomID(ref).Refunds })
}

// Charged counts, of [Set.Charges], the charges that moved money at the
// provider's fake: succeeded PaymentIntents (Stripe), payments authorised
// and not cancelled (Adyen), captures not declined (PayPal), the objects
// each fake's totals sum.
func (s *Set) Charged(provName, key string) int {
	return s.count(provName, key, provider.StepCharge,
		func(v string) int { return s.Stripe.SucceededByMetadata(paystripe.MetadataKey, v) },
		s.Adyen.Charged, s.PayPal.CapturedByCustomID)
}
