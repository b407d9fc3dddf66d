// Package fakes starts payonce's provider fakes together, wired to post
// their webhooks to one service, for the checkout example and the demo.
package fakes

import (
	"os"

	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// Credentials the fakes accept and sign with.
const (
	StripeSecretKey      = "sk_test_payonce_fake"
	StripeWebhookSecret  = stripetest.DefaultWebhookSecret
	AdyenAPIKey          = "adyen_test_payonce_fake"
	AdyenMerchantAccount = "PayonceFakeECOM"
	AdyenHMACKey         = adyentest.DefaultHMACKey
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
}

// Set is the running fakes.
type Set struct {
	Stripe *stripetest.Server
	Adyen  *adyentest.Server
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
		s.Stripe = stripetest.NewServer(&stripetest.Config{Seed: o.Seed, Faults: faults, WebhookURL: hook(o.WebhookBase, "stripe")})
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
			MerchantAccount: AdyenMerchantAccount, WebhookURL: hook(o.WebhookBase, "adyen")})
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
	return env
}

// Getenv reads the environment, falling back to the fakes' variables.
func Getenv(env map[string]string) func(string) string {
	return func(k string) string {
		if v := getenv(k); v != "" {
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
}

var getenv = os.Getenv
