// Package providers builds payonce's production payments stack from
// settings: the provider adapters (Stripe, Adyen, PayPal) and a
// [payments.Client] over them, with Adyen's lookups fed by the webhook
// inbox. The checkout example's service, the operator CLI (payonce
// reconcile, resolve) and the demo share it, so that each of them reaches
// the providers the same way.
//
//	cfg, err := providers.FromEnv(os.Getenv) // STRIPE_API_BASE, STRIPE_SECRET_KEY, ...
//	if err != nil {
//		return err // names the missing variable
//	}
//	client, err := providers.NewClient(pool, cfg) // pool: a migrated database
//	if errors.Is(err, providers.ErrNoProvider) {
//		// no STRIPE_API_BASE, ADYEN_API_BASE or PAYPAL_API_BASE
//	}
//
// # The environment
//
// [FromEnv] reads, per provider, an API base URL whose presence configures
// the provider, and the credentials that must come with it:
//
//	STRIPE_API_BASE        e.g. https://api.stripe.com
//	STRIPE_SECRET_KEY      required with STRIPE_API_BASE
//	STRIPE_WEBHOOK_SECRET  verifies Stripe's webhooks (optional)
//	ADYEN_API_BASE         e.g. https://checkout-test.adyen.com/v71
//	ADYEN_API_KEY, ADYEN_MERCHANT_ACCOUNT  required with ADYEN_API_BASE
//	ADYEN_HMAC_KEY         hex, verifies Adyen's notifications (optional)
//	ADYEN_RETURN_URL       where shoppers return after 3-D Secure (optional)
//	PAYPAL_API_BASE        e.g. https://api-m.sandbox.paypal.com
//	PAYPAL_CLIENT_ID, PAYPAL_SECRET  required with PAYPAL_API_BASE
//	PAYPAL_WEBHOOK_ID      verifies PayPal's webhooks (optional)
//
// A base URL without its credentials is an [*EnvError] naming them. The
// values themselves are checked by the adapters when [Build] builds
// them (their ConfigError names the field).
//
// # What is built
//
// [Build] returns the configured adapters, sharing one HTTP client;
// Adyen, which has no lookup by reference, looks its payments up in the
// notifications the webhook receiver stored ([payments.WebhookInbox]). [NewClient]
// wraps them in a [payments.Client] with the configured lease and logger.
package providers
