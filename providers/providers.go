package providers

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/paypal"
	paystripe "github.com/payonce/payonce/providers/stripe"
)

// Config says which providers to reach and how. The zero value configures
// no provider.
type Config struct {
	Stripe StripeConfig
	Adyen  AdyenConfig
	PayPal PayPalConfig
	// ProviderTimeout bounds each HTTP request to a provider (connection,
	// request, the whole answer) when HTTPClient is nil: it is that
	// client's Timeout. A call that makes several requests (PayPal's token,
	// then the order; a lookup that reads pages) may take longer in all.
	// Default 10s; a negative value is refused.
	ProviderTimeout time.Duration
	// HTTPClient, when set, makes every provider call (its Timeout wins
	// over ProviderTimeout). Keep-alive connections let net/http resend a
	// request carrying an Idempotency-Key on its own when a reused
	// connection breaks, which is safe (the provider deduplicates it);
	// turn them off where lost responses must reach payonce (the demo,
	// fault tests). Default: a client with ProviderTimeout.
	HTTPClient *http.Client
	// LockTimeout is the lease of a payment in progress
	// (payments.Config.LockTimeout); after a crash, retries of its key wait
	// this long. Default 30s.
	LockTimeout time.Duration
	// Logger receives the payments client's warnings and errors
	// (payments.Config.Logger). Default: slog.Default().
	Logger *slog.Logger
	// MeterProvider and TracerProvider receive the payments client's
	// metrics and spans (payments.Config). Default: none.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// StripeConfig reaches Stripe (or a fake of it). Stripe is configured
// when APIBase is set.
type StripeConfig struct {
	// APIBase is Stripe's API base URL (STRIPE_API_BASE).
	APIBase string
	// SecretKey authenticates the calls (STRIPE_SECRET_KEY); required
	// with APIBase.
	SecretKey string
	// WebhookSecret verifies Stripe's webhooks (STRIPE_WEBHOOK_SECRET).
	// Default none: webhooks are not verified, hence not received.
	WebhookSecret string
}

// AdyenConfig reaches Adyen's Checkout API (or a fake of it). Adyen is
// configured when APIBase is set.
type AdyenConfig struct {
	// APIBase is the Checkout API's base URL, version included
	// (ADYEN_API_BASE).
	APIBase string
	// APIKey (ADYEN_API_KEY) and MerchantAccount (ADYEN_MERCHANT_ACCOUNT)
	// are required with APIBase.
	APIKey, MerchantAccount string
	// HMACKey verifies Adyen's notifications, hex (ADYEN_HMAC_KEY).
	// Default none: notifications are not verified, hence not received.
	HMACKey string
	// ReturnURL is where a shopper returns after a redirect (3-D Secure)
	// (ADYEN_RETURN_URL). Default [DefaultAdyenReturnURL].
	ReturnURL string
}

// PayPalConfig reaches PayPal's REST API (or a fake of it). PayPal is
// configured when APIBase is set.
type PayPalConfig struct {
	// APIBase is PayPal's API base URL (PAYPAL_API_BASE).
	APIBase string
	// ClientID (PAYPAL_CLIENT_ID) and Secret (PAYPAL_SECRET) are required
	// with APIBase.
	ClientID, Secret string
	// WebhookID verifies PayPal's webhooks (PAYPAL_WEBHOOK_ID). Default
	// none: webhooks are not verified, hence not received.
	WebhookID string
}

// DefaultAdyenReturnURL is AdyenConfig.ReturnURL's default, the checkout
// example's return page. Adyen requires a return URL on every payment;
// set yours in production.
const DefaultAdyenReturnURL = "http://localhost/checkout/return"

// defaultProviderTimeout is Config.ProviderTimeout's default.
const defaultProviderTimeout = 10 * time.Second

// ErrNoProvider is returned by [NewClient] when cfg configures no provider.
var ErrNoProvider = errors.New("no provider configured (set STRIPE_API_BASE, ADYEN_API_BASE or PAYPAL_API_BASE)")

// EnvError is [FromEnv]'s error for a provider's API base set without the
// variables that must come with it.
type EnvError struct {
	// Vars are the required variables that are unset, With the one that
	// requires them.
	Vars []string
	With string
}

func (e *EnvError) Error() string {
	verb := " is required with "
	if len(e.Vars) > 1 {
		verb = " are required with "
	}
	return strings.Join(e.Vars, " and ") + verb + e.With
}

// Is reports idempotency.ErrInvalid: a bad configuration, named.
func (e *EnvError) Is(target error) bool { return target == idempotency.ErrInvalid }

// FromEnv reads the providers' settings through getenv (os.Getenv, or a
// map's lookup in tests): the variables listed in the package doc. It
// returns an [*EnvError] naming the variables a configured provider lacks,
// checking Stripe, then Adyen, then PayPal; the Config read is returned
// with it.
func FromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		Stripe: StripeConfig{APIBase: getenv("STRIPE_API_BASE"), SecretKey: getenv("STRIPE_SECRET_KEY"),
			WebhookSecret: getenv("STRIPE_WEBHOOK_SECRET")},
		Adyen: AdyenConfig{APIBase: getenv("ADYEN_API_BASE"), APIKey: getenv("ADYEN_API_KEY"),
			MerchantAccount: getenv("ADYEN_MERCHANT_ACCOUNT"), HMACKey: getenv("ADYEN_HMAC_KEY"),
			ReturnURL: getenv("ADYEN_RETURN_URL")},
		PayPal: PayPalConfig{APIBase: getenv("PAYPAL_API_BASE"), ClientID: getenv("PAYPAL_CLIENT_ID"),
			Secret: getenv("PAYPAL_SECRET"), WebhookID: getenv("PAYPAL_WEBHOOK_ID")},
	}
	type setting struct{ name, value string }
	for _, p := range []struct {
		base     setting
		required []setting
	}{
		{setting{"STRIPE_API_BASE", c.Stripe.APIBase}, []setting{{"STRIPE_SECRET_KEY", c.Stripe.SecretKey}}},
		{setting{"ADYEN_API_BASE", c.Adyen.APIBase}, []setting{{"ADYEN_API_KEY", c.Adyen.APIKey}, {"ADYEN_MERCHANT_ACCOUNT", c.Adyen.MerchantAccount}}},
		{setting{"PAYPAL_API_BASE", c.PayPal.APIBase}, []setting{{"PAYPAL_CLIENT_ID", c.PayPal.ClientID}, {"PAYPAL_SECRET", c.PayPal.Secret}}},
	} {
		if p.base.value == "" {
			continue
		}
		var missing []string
		for _, r := range p.required {
			if r.value == "" {
				missing = append(missing, r.name)
			}
		}
		if len(missing) > 0 {
			return c, &EnvError{Vars: missing, With: p.base.name}
		}
	}
	return c, nil
}

// ProviderNames names the providers c configures (those whose APIBase is
// set), in the order [Build] builds them.
func (c Config) ProviderNames() []string {
	var names []string
	for _, p := range []struct{ name, base string }{{"stripe", c.Stripe.APIBase}, {"adyen", c.Adyen.APIBase},
		{"paypal", c.PayPal.APIBase}} {
		if p.base != "" {
			names = append(names, p.name)
		}
	}
	return names
}

// Build builds the adapters cfg configures, in the order Stripe,
// Adyen, PayPal, all calling through one HTTP client; Adyen's lookups read
// the notifications stored in pool's webhook inbox. It returns none (and
// no error) when cfg configures no provider, and the adapters' own
// ConfigError (naming the field) for a bad setting.
func Build(pool *pgxpool.Pool, cfg Config) ([]provider.Provider, error) {
	if cfg.ProviderTimeout < 0 {
		return nil, &payments.ConfigError{Field: "providers.Config.ProviderTimeout",
			Reason: fmt.Sprintf("%s is negative: give the longest a provider's request may take (default 10s)", cfg.ProviderTimeout)}
	}
	hc := cfg.HTTPClient
	if hc == nil {
		timeout := cfg.ProviderTimeout
		if timeout == 0 {
			timeout = defaultProviderTimeout
		}
		hc = &http.Client{Timeout: timeout}
	}
	var provs []provider.Provider
	if s := cfg.Stripe; s.APIBase != "" {
		p, err := paystripe.New(&paystripe.Config{SecretKey: s.SecretKey, BaseURL: s.APIBase,
			HTTPClient: hc, WebhookSecrets: optional(s.WebhookSecret)})
		if err != nil {
			return nil, err
		}
		provs = append(provs, p)
	}
	if a := cfg.Adyen; a.APIBase != "" {
		returnURL := a.ReturnURL
		if returnURL == "" {
			returnURL = DefaultAdyenReturnURL
		}
		p, err := adyen.New(&adyen.Config{APIKey: a.APIKey, MerchantAccount: a.MerchantAccount,
			BaseURL: a.APIBase, HTTPClient: hc, HMACKeys: optional(a.HMACKey), ReturnURL: returnURL,
			// Adyen has no lookup by reference: its notifications, as the
			// receiver stored them, are the lookup.
			Notifications: payments.NewWebhookInbox(pool).Source("adyen")})
		if err != nil {
			return nil, err
		}
		provs = append(provs, p)
	}
	if pp := cfg.PayPal; pp.APIBase != "" {
		p, err := paypal.New(&paypal.Config{ClientID: pp.ClientID, Secret: pp.Secret,
			BaseURL: pp.APIBase, HTTPClient: hc, WebhookID: pp.WebhookID})
		if err != nil {
			return nil, err
		}
		provs = append(provs, p)
	}
	return provs, nil
}

// NewClient returns a payments client on pool's database, which must be
// migrated, over the providers cfg configures ([Build]). It returns
// [ErrNoProvider] when cfg configures none, an adapter's ConfigError for a
// bad provider setting and a *payments.ConfigError for a bad client one.
func NewClient(pool *pgxpool.Pool, cfg Config) (*payments.Client, error) {
	if len(cfg.ProviderNames()) == 0 {
		return nil, ErrNoProvider
	}
	provs, err := Build(pool, cfg)
	if err != nil {
		return nil, err
	}
	return payments.New(pool, provs, &payments.Config{Logger: cfg.Logger, LockTimeout: cfg.LockTimeout,
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider})
}

// optional is a setting that may be unset, as the adapters' lists take it.
func optional(v string) []string {
	if v == "" {
		return nil
	}
	return []string{v}
}
