package stripe

import (
	"fmt"
	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments/provider"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// DefaultBaseURL is Stripe's API endpoint.
const DefaultBaseURL = "https://api.stripe.com"

// DefaultHTTPTimeout bounds one HTTP exchange of the default client.
const DefaultHTTPTimeout = 30 * time.Second

// DefaultLookupScanLimit is how many PaymentIntents [Provider.Lookup] lists
// in a creation window before it turns to the Search API.
const DefaultLookupScanLimit = 1000

// Config configures a [Provider]. A nil *Config means all defaults, which
// fails validation because SecretKey is required.
type Config struct {
	// SecretKey is the Stripe secret (or restricted) key, "sk_..." or
	// "rk_...". Required; New refuses a publishable key ("pk_...") and a
	// webhook signing secret ("whsec_..."). Idempotency keys are scoped to
	// it at Stripe.
	SecretKey string

	// BaseURL is the API's base URL; tests point it at
	// [github.com/payonce/payonce/providers/stripe/stripetest]. Default:
	// [DefaultBaseURL].
	BaseURL string

	// HTTPClient sends the requests. Default: a client with a
	// [DefaultHTTPTimeout] (30 s) timeout. Against the stripetest fake,
	// use its Server.Client: without keep-alives, so that the fake's lost
	// responses (ResetAfter) reach the adapter instead of being resent
	// and replayed by net/http.
	HTTPClient *http.Client

	// MaxNetworkRetries is how many times stripe-go itself retries a
	// request (network errors, 409, 5xx with Stripe-Should-Retry, ...).
	// Default: 0, and payonce retries at its own level with the same
	// provider key, where the decision is visible and journaled.
	//
	// stripe-go's retries reuse the Idempotency-Key we set, so they cannot
	// duplicate a charge. But they sleep (up to 5 s, not interruptible by
	// the context) and so stretch one call past the caller's deadline, and
	// a 409 idempotency_key_in_use retried inside stripe-go hides from us
	// that another process is still executing the same key. Must not be
	// negative.
	MaxNetworkRetries int64

	// WebhookSecrets are the webhook endpoint's signing secrets
	// ("whsec_..."), which [Provider.VerifyWebhook] tries in order. During a
	// rotation Stripe signs each delivery with the old and the new secret:
	// list both until the old one expires. Entries must not be empty.
	// Default: none, and VerifyWebhook fails with [ErrNoWebhookSecret]
	// (a provider that only charges needs none).
	WebhookSecrets []string

	// WebhookTolerance is how old a delivery's signature timestamp may be
	// (against this process's clock) before [Provider.VerifyWebhook]
	// refuses it as a possible replay. Must not be negative. Default:
	// [DefaultWebhookTolerance] (300 s, as Stripe's libraries).
	WebhookTolerance time.Duration

	// LookupScanLimit bounds how many PaymentIntents [Provider.Lookup]
	// lists in the request's creation window (the consistent List API)
	// before it gives the scan up and asks the eventually consistent
	// Search API instead. Must not be negative. Default:
	// [DefaultLookupScanLimit] (1000, ten List pages).
	LookupScanLimit int

	// Customer returns the Stripe Customer ("cus_...") the saved card of a
	// charge is attached to, sent as the PaymentIntent's customer. Stripe
	// requires it for a card attached to a Customer: "If the payment
	// method is attached to a Customer, you must also provide the ID of
	// that Customer as the customer parameter of this PaymentIntent"
	// (https://docs.stripe.com/api/payment_intents/create). A saved card
	// is one: cards are saved by attaching them to a Customer. When
	// payments.ChargeParams.Shopper carries the Stripe Customer, use
	// func(r provider.ChargeRequest) string { return r.Shopper }; else map
	// r.Shopper (the charge's Scope by default) to it. An empty answer
	// sends no customer. Default: nil, no customer: right only for
	// PaymentMethods attached to none (collected for this one payment, or
	// Stripe's test PaymentMethods such as pm_card_visa).
	Customer func(provider.ChargeRequest) string
}

// ConfigError reports an invalid [Config] field.
type ConfigError struct {
	// Field is the field's name, e.g. "SecretKey".
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("stripe: Config.%s %s", e.Field, e.Reason)
}

// Is reports idempotency.ErrInvalid: a bad configuration, named.
func (e *ConfigError) Is(target error) bool { return target == idempotency.ErrInvalid }

// withDefaults validates c and returns a copy with the defaults filled in.
func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.SecretKey == "" {
		return out, &ConfigError{Field: "SecretKey", Reason: "is required"}
	}
	// Stripe's keys (https://docs.stripe.com/keys): secret "sk_", restricted
	// "rk_", publishable "pk_" (for the browser and mobile apps only: the API
	// refuses it for creating PaymentIntents or refunds), webhook signing
	// secrets "whsec_".
	switch {
	case strings.HasPrefix(out.SecretKey, "pk_"):
		return out, &ConfigError{Field: "SecretKey", Reason: "is a publishable key (pk_...), which cannot create payments: give the secret key (sk_...) or a restricted key (rk_...) with write access to PaymentIntents and Refunds, from the Dashboard's API keys page"}
	case strings.HasPrefix(out.SecretKey, "whsec_"):
		return out, &ConfigError{Field: "SecretKey", Reason: "is a webhook signing secret (whsec_...): give it as Config.WebhookSecrets, and the secret key (sk_...) or a restricted key (rk_...) here"}
	}
	if out.BaseURL == "" {
		out.BaseURL = DefaultBaseURL
	}
	u, err := url.Parse(out.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return out, &ConfigError{Field: "BaseURL", Reason: fmt.Sprintf("must be an absolute http(s) URL, got %q", out.BaseURL)}
	}
	if out.HTTPClient == nil {
		out.HTTPClient = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	if out.MaxNetworkRetries < 0 {
		return out, &ConfigError{Field: "MaxNetworkRetries", Reason: fmt.Sprintf("must not be negative, got %d", out.MaxNetworkRetries)}
	}
	out.WebhookSecrets = slices.Clone(out.WebhookSecrets)
	for i, s := range out.WebhookSecrets {
		if strings.TrimSpace(s) == "" {
			return out, &ConfigError{Field: fmt.Sprintf("WebhookSecrets[%d]", i), Reason: "is empty or blank"}
		}
	}
	switch {
	case out.WebhookTolerance < 0:
		return out, &ConfigError{Field: "WebhookTolerance", Reason: fmt.Sprintf("must not be negative, got %v", out.WebhookTolerance)}
	case out.WebhookTolerance == 0:
		out.WebhookTolerance = DefaultWebhookTolerance
	}
	switch {
	case out.LookupScanLimit < 0:
		return out, &ConfigError{Field: "LookupScanLimit", Reason: fmt.Sprintf("must not be negative, got %d", out.LookupScanLimit)}
	case out.LookupScanLimit == 0:
		out.LookupScanLimit = DefaultLookupScanLimit
	}
	return out, nil
}
