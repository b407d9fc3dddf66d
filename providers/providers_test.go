package providers_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/fakes"
)

// env is a getenv over a map, as FromEnv takes it.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// names lists the providers' names in order.
func names(provs []provider.Provider) []string {
	var out []string
	for _, p := range provs {
		out = append(out, p.Name())
	}
	return out
}

func TestFromEnvEachProvider(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		vars map[string]string
		want providers.Config
	}{
		{"stripe", map[string]string{"STRIPE_API_BASE": "http://stripe.test", "STRIPE_SECRET_KEY": "sk_test_1",
			"STRIPE_WEBHOOK_SECRET": "whsec_1"},
			providers.Config{Stripe: providers.StripeConfig{APIBase: "http://stripe.test", SecretKey: "sk_test_1", WebhookSecret: "whsec_1"}}},
		{"adyen", map[string]string{"ADYEN_API_BASE": "http://adyen.test/v71", "ADYEN_API_KEY": "ak", "ADYEN_MERCHANT_ACCOUNT": "Shop",
			"ADYEN_HMAC_KEY": "00ff", "ADYEN_RETURN_URL": "https://shop.test/return"},
			providers.Config{Adyen: providers.AdyenConfig{APIBase: "http://adyen.test/v71", APIKey: "ak", MerchantAccount: "Shop",
				HMACKey: "00ff", ReturnURL: "https://shop.test/return"}}},
		{"paypal", map[string]string{"PAYPAL_API_BASE": "http://paypal.test", "PAYPAL_CLIENT_ID": "id", "PAYPAL_SECRET": "secret",
			"PAYPAL_WEBHOOK_ID": "wh"},
			providers.Config{PayPal: providers.PayPalConfig{APIBase: "http://paypal.test", ClientID: "id", Secret: "secret", WebhookID: "wh"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := providers.FromEnv(env(tc.vars))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg, tc.want) {
				t.Fatalf("FromEnv:\n got %+v\nwant %+v", cfg, tc.want)
			}
			if got := cfg.ProviderNames(); !reflect.DeepEqual(got, []string{tc.name}) {
				t.Fatalf("ProviderNames %v, want [%s]", got, tc.name)
			}
			provs, err := providers.Build(nil, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(provs); !reflect.DeepEqual(got, []string{tc.name}) {
				t.Fatalf("providers %v, want [%s]", got, tc.name)
			}
		})
	}
}

func TestFromEnvEveryProviderInOrder(t *testing.T) {
	t.Parallel()
	fk := fakes.Start(fakes.Options{Stripe: true, Adyen: true, PayPal: true})
	t.Cleanup(fk.Close)
	cfg, err := providers.FromEnv(env(fk.Env()))
	if err != nil {
		t.Fatal(err)
	}
	provs, err := providers.Build(nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(provs); !reflect.DeepEqual(got, []string{"stripe", "adyen", "paypal"}) || !reflect.DeepEqual(got, cfg.ProviderNames()) {
		t.Fatalf("providers %v (ProviderNames %v), want stripe, adyen, paypal", got, cfg.ProviderNames())
	}
	for _, p := range provs {
		if _, ok := p.(provider.WebhookVerifier); !ok {
			t.Errorf("%s verifies no webhooks although its secret is set", p.Name())
		}
	}
}

// A provider's API base without its credentials is refused, naming the
// variables to set.
func TestFromEnvNamesMissingVariable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vars    map[string]string
		want    string
		missing []string
	}{
		{map[string]string{"STRIPE_API_BASE": "http://stripe.test"},
			"STRIPE_SECRET_KEY is required with STRIPE_API_BASE", []string{"STRIPE_SECRET_KEY"}},
		{map[string]string{"ADYEN_API_BASE": "http://adyen.test", "ADYEN_API_KEY": "ak"},
			"ADYEN_MERCHANT_ACCOUNT is required with ADYEN_API_BASE", []string{"ADYEN_MERCHANT_ACCOUNT"}},
		{map[string]string{"ADYEN_API_BASE": "http://adyen.test", "ADYEN_MERCHANT_ACCOUNT": "Shop"},
			"ADYEN_API_KEY is required with ADYEN_API_BASE", []string{"ADYEN_API_KEY"}},
		{map[string]string{"ADYEN_API_BASE": "http://adyen.test"},
			"ADYEN_API_KEY and ADYEN_MERCHANT_ACCOUNT are required with ADYEN_API_BASE", []string{"ADYEN_API_KEY", "ADYEN_MERCHANT_ACCOUNT"}},
		{map[string]string{"PAYPAL_API_BASE": "http://paypal.test", "PAYPAL_SECRET": "s"},
			"PAYPAL_CLIENT_ID is required with PAYPAL_API_BASE", []string{"PAYPAL_CLIENT_ID"}},
		{map[string]string{"PAYPAL_API_BASE": "http://paypal.test", "PAYPAL_CLIENT_ID": "c"},
			"PAYPAL_SECRET is required with PAYPAL_API_BASE", []string{"PAYPAL_SECRET"}},
		// Stripe is checked first.
		{map[string]string{"STRIPE_API_BASE": "http://stripe.test", "PAYPAL_API_BASE": "http://paypal.test"},
			"STRIPE_SECRET_KEY is required with STRIPE_API_BASE", []string{"STRIPE_SECRET_KEY"}},
	} {
		_, err := providers.FromEnv(env(tc.vars))
		var envErr *providers.EnvError
		if !errors.As(err, &envErr) || err.Error() != tc.want || !reflect.DeepEqual(envErr.Vars, tc.missing) {
			t.Errorf("FromEnv(%v) = %v, want %q", tc.vars, err, tc.want)
		}
		if !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("FromEnv(%v): %v is not idempotency.ErrInvalid", tc.vars, err)
		}
	}
}

// A value an adapter cannot take is refused when the providers are built,
// naming the setting.
func TestProvidersRefuseAnInvalidSetting(t *testing.T) {
	t.Parallel()
	cfg, err := providers.FromEnv(env(map[string]string{"ADYEN_API_BASE": "http://adyen.test", "ADYEN_API_KEY": "ak",
		"ADYEN_MERCHANT_ACCOUNT": "Shop", "ADYEN_HMAC_KEY": "not hex"}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = providers.Build(nil, cfg)
	var cfgErr *adyen.ConfigError
	if !errors.As(err, &cfgErr) || !strings.HasPrefix(cfgErr.Field, "HMACKeys") {
		t.Fatalf("Providers with a non-hex ADYEN_HMAC_KEY: %v, want adyen's ConfigError on HMACKeys", err)
	}
	if _, err := providers.NewClient(nil, cfg); !errors.As(err, &cfgErr) {
		t.Fatalf("Client with a non-hex ADYEN_HMAC_KEY: %v", err)
	}
}

// A negative ProviderTimeout is refused, not taken by net/http as no
// timeout at all.
func TestNegativeProviderTimeoutRefused(t *testing.T) {
	t.Parallel()
	cfg, err := providers.FromEnv(env(map[string]string{"STRIPE_API_BASE": "http://stripe.test", "STRIPE_SECRET_KEY": "sk_test_1"}))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ProviderTimeout = -time.Second
	_, err = providers.Build(nil, cfg)
	var cfgErr *payments.ConfigError
	if !errors.As(err, &cfgErr) || cfgErr.Field != "providers.Config.ProviderTimeout" || !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("Build with ProviderTimeout -1s: %v, want a *payments.ConfigError naming it", err)
	}
}

func TestNoProviderConfigured(t *testing.T) {
	t.Parallel()
	cfg, err := providers.FromEnv(env(map[string]string{"STRIPE_SECRET_KEY": "sk_test_1", "DATABASE_URL": "postgres://db"}))
	if err != nil {
		t.Fatalf("FromEnv without any API base: %v", err)
	}
	if provs, err := providers.Build(nil, cfg); err != nil || len(provs) != 0 || len(cfg.ProviderNames()) != 0 {
		t.Fatalf("Providers: %v, %v; want none", names(provs), err)
	}
	if _, err := providers.NewClient(nil, cfg); !errors.Is(err, providers.ErrNoProvider) || !strings.Contains(err.Error(), "STRIPE_API_BASE") {
		t.Fatalf("Client: %v, want ErrNoProvider naming the variables", err)
	}
}

// The client charges through every configured provider, exactly once per
// key, and Adyen's lookups read the inbox of the client's database.
func TestClientChargesThroughEachProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolURL(t, pgtest.MigratedURL(t))
	fk := fakes.Start(fakes.Options{Stripe: true, Adyen: true, PayPal: true})
	t.Cleanup(fk.Close)
	cfg, err := providers.FromEnv(env(fk.Env()))
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	cfg.LockTimeout = time.Second
	client, err := providers.NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range fk.Providers() {
		params := payments.ChargeParams{Scope: "cus_wiring", Key: fmt.Sprintf("order-%d", i), Provider: name,
			Amount: money.MustParse("12.50", money.EUR), Recipient: "acct_shop", PaymentMethod: "pm_card_visa"}
		first, err := client.Charge(ctx, params)
		if err != nil || first.Status != payments.IntentSucceeded {
			t.Fatalf("%s: charge: %+v, %v", name, first, err)
		}
		again, err := client.Charge(ctx, params)
		if err != nil || !again.Replayed || again.ProviderID != first.ProviderID {
			t.Fatalf("%s: retry: %+v, %v; want a replay of %s", name, again, err, first.ProviderID)
		}
		key, err := idempotency.ComposeKey(params.Scope, "charge", params.Key)
		if err != nil {
			t.Fatal(err)
		}
		if n := fk.Charges(name, key); n != 1 {
			t.Fatalf("%s: %d charges at the provider, want 1", name, n)
		}
	}
	// Adyen's lookups read the notifications stored in the client's
	// database: with none stored, the lookup works and finds nothing.
	res, err := client.Provider("adyen").Lookup(ctx, provider.LookupRequest{Key: "cus_wiring_charge_none", ProviderKey: "none_charge"})
	if err != nil || len(res.Charges) != 0 {
		t.Fatalf("Adyen's lookup of a reference without notifications: %+v, %v", res, err)
	}
}

func ExampleFromEnv() {
	vars := map[string]string{"STRIPE_API_BASE": "https://api.stripe.com"}
	_, err := providers.FromEnv(func(k string) string { return vars[k] })
	fmt.Println(err)
	// Output: STRIPE_SECRET_KEY is required with STRIPE_API_BASE
}
