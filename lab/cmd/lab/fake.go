package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/payonce/payonce/internal/cli"
	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// fakeServer is what the three fakes have in common.
type fakeServer interface {
	http.Handler
	Close()
}

// fakeFlags are the flags every fake takes.
type fakeFlags struct {
	addr, webhookURL string
	dups             int
}

func newFakeCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "fake stripe|adyen|paypal",
		Short: "a stateful fake of a provider's API",
		Long: `Serves a stateful fake of the provider's API, with its real idempotency
semantics and signed webhooks, for tests and demos against a standalone
process. It prints its base URL and the credentials it accepts, then serves
until interrupted (SIGINT or SIGTERM). The ground truth (what really exists
at the provider) is at http://ADDR/_fake/counts and /_fake/totals.`,
		Example: `  lab fake stripe
  lab fake adyen --addr 127.0.0.1:0 --merchant-account PayonceTest
  lab fake paypal --webhook-url http://127.0.0.1:8080/webhooks/paypal`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cli.Usage("fake needs a provider: stripe, adyen or paypal (see lab fake --help)")
			}
			msg := fmt.Sprintf("fake: unknown provider %q (want stripe, adyen or paypal", args[0])
			if near := c.SuggestionsFor(args[0]); len(near) > 0 {
				msg += "; did you mean " + cli.OrList(near) + "?"
			}
			return cli.Usage(msg + ")")
		},
		RunE: func(*cobra.Command, []string) error { return nil }, // Args refuses every call
	}
	c.AddCommand(newStripeFakeCmd(), newAdyenFakeCmd(), newPayPalFakeCmd())
	return c
}

// fakeCommand is lab fake PROVIDER with the flags every fake takes;
// start builds the fake from the flags, with its credentials to print
// (name, value pairs).
func fakeCommand(provider, defaultAddr string, c *cobra.Command, start func(fakeFlags) (fakeServer, []string)) *cobra.Command {
	var o fakeFlags
	c.Args = cli.NoArgs
	c.RunE = func(*cobra.Command, []string) error { return runFake(provider, o, start) }
	f := c.Flags()
	f.StringVar(&o.addr, "addr", defaultAddr, "listen address (port 0: any free port, printed)")
	f.StringVar(&o.webhookURL, "webhook-url", "", "POST signed webhooks there (default: none; events are still recorded)")
	f.IntVar(&o.dups, "duplicate-webhooks", 0, "deliver every webhook 1+N times")
	_ = c.RegisterFlagCompletionFunc("addr", cobra.NoFileCompletions)
	_ = c.RegisterFlagCompletionFunc("webhook-url", cobra.NoFileCompletions)
	return c
}

func newStripeFakeCmd() *cobra.Command {
	var secret string
	c := fakeCommand("stripe", "127.0.0.1:12111", &cobra.Command{
		Use:   "stripe",
		Short: "Stripe: base URL http://ADDR; any sk_test_ API key as a Bearer token",
		Long: `Serves a stateful fake of the Stripe API endpoints payonce's Stripe adapter
uses, at base URL http://ADDR; it accepts any sk_test_ API key as a Bearer
token.`,
		Example: `  lab fake stripe
  lab fake stripe --addr 127.0.0.1:0 --webhook-url http://127.0.0.1:8080/webhooks/stripe`,
	}, func(o fakeFlags) (fakeServer, []string) {
		s := stripetest.NewUnstartedServer(&stripetest.Config{WebhookURL: o.webhookURL, WebhookSecret: secret, DuplicateWebhooks: o.dups})
		return s, []string{
			"API key", "any sk_test_ key, as Authorization: Bearer sk_test_...",
			"webhook secret", or(secret, stripetest.DefaultWebhookSecret),
		}
	})
	c.Flags().StringVar(&secret, "webhook-secret", "", "Stripe-Signature secret (default "+stripetest.DefaultWebhookSecret+")")
	return c
}

func newAdyenFakeCmd() *cobra.Command {
	var apiKey, merchant, hmacKey string
	c := fakeCommand("adyen", "127.0.0.1:12112", &cobra.Command{
		Use:   "adyen",
		Short: "Adyen: base URL http://ADDR/" + adyentest.APIVersion + "; any X-API-Key and merchantAccount unless named",
		Long: `Serves a stateful fake of the Adyen Checkout API endpoints payonce's Adyen
adapter uses, at base URL http://ADDR/` + adyentest.APIVersion + `; it accepts any non-empty
X-API-Key and merchantAccount, unless --api-key and --merchant-account name
the only ones accepted.`,
		Example: `  lab fake adyen
  lab fake adyen --addr 127.0.0.1:0 --merchant-account PayonceTest`,
	}, func(o fakeFlags) (fakeServer, []string) {
		s := adyentest.NewUnstartedServer(&adyentest.Config{APIKey: apiKey, MerchantAccount: merchant,
			HMACKey: hmacKey, WebhookURL: o.webhookURL, DuplicateWebhooks: o.dups})
		return s, []string{
			"X-API-Key", or(apiKey, "any non-empty key"),
			"merchantAccount", or(merchant, "any non-empty account"),
			"HMAC key", or(hmacKey, adyentest.DefaultHMACKey) + " (notification signatures, hex)",
		}
	})
	f := c.Flags()
	f.StringVar(&apiKey, "api-key", "", "the only X-API-Key accepted (default: any non-empty key)")
	f.StringVar(&merchant, "merchant-account", "", "the only merchantAccount accepted (default: any non-empty account)")
	f.StringVar(&hmacKey, "hmac-key", "", "the notification HMAC key, hex (default adyentest.DefaultHMACKey, printed)")
	return c
}

func newPayPalFakeCmd() *cobra.Command {
	var clientID, secret, webhookID string
	c := fakeCommand("paypal", "127.0.0.1:12113", &cobra.Command{
		Use:   "paypal",
		Short: "PayPal: base URL http://ADDR; OAuth client client_test, secret secret_test unless named",
		Long: `Serves a stateful fake of the PayPal REST endpoints payonce's PayPal adapter
uses, at base URL http://ADDR; its OAuth client is ` + paypaltest.DefaultClientID + `, secret
` + paypaltest.DefaultSecret + `, unless --client-id and --secret name others.`,
		Example: `  lab fake paypal
  lab fake paypal --webhook-url http://127.0.0.1:8080/webhooks/paypal`,
	}, func(o fakeFlags) (fakeServer, []string) {
		s := paypaltest.NewUnstartedServer(&paypaltest.Config{ClientID: clientID, Secret: secret,
			WebhookID: webhookID, WebhookURL: o.webhookURL, DuplicateWebhooks: o.dups})
		return s, []string{
			"client id", or(clientID, paypaltest.DefaultClientID),
			"secret", or(secret, paypaltest.DefaultSecret) + " (POST /v1/oauth2/token, Basic auth)",
			"webhook id", or(webhookID, paypaltest.DefaultWebhookID),
		}
	})
	f := c.Flags()
	f.StringVar(&clientID, "client-id", "", "the OAuth client id accepted (default "+paypaltest.DefaultClientID+")")
	f.StringVar(&secret, "secret", "", "the OAuth client secret accepted (default "+paypaltest.DefaultSecret+")")
	f.StringVar(&webhookID, "webhook-id", "", "the webhook subscription's id (default "+paypaltest.DefaultWebhookID+")")
	return c
}

// runFake starts provider's fake from o and start, prints its URL and
// credentials, and serves it until SIGINT or SIGTERM.
func runFake(provider string, o fakeFlags, start func(fakeFlags) (fakeServer, []string)) error {
	// The fakes panic on a bad Config, naming the field.
	fake, creds, err := func() (f fakeServer, creds []string, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = cli.Usage(fmt.Sprintf("fake %s: %v", provider, p))
			}
		}()
		f, creds = start(o)
		return f, creds, nil
	}()
	if err != nil {
		return err
	}
	defer fake.Close()
	l, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	base := "http://" + l.Addr().String()
	url := base
	if provider == "adyen" {
		url += "/" + adyentest.APIVersion
	}
	fmt.Printf("fake %s: listening on %s\n", provider, url)
	for i := 0; i < len(creds); i += 2 {
		fmt.Printf("  %-16s %s\n", creds[i], creds[i+1])
	}
	fmt.Printf("  %-16s %s\n", "webhooks", or(o.webhookURL, "not delivered (recorded only)"))
	fmt.Printf("  %-16s %s/_fake/counts, %s/_fake/totals\n", "ground truth", base, base)
	return serveFake(l, fake)
}

// serveFake serves h on l until SIGINT or SIGTERM, then shuts down
// gracefully.
func serveFake(l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := cli.SignalContext()
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.Serve(l)
	if !errors.Is(err, http.ErrServerClosed) {
		stop()
		<-done
		return err
	}
	<-done
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
