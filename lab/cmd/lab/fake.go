package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

const fakeUsage = `Usage: lab fake stripe|adyen|paypal [--addr ADDR] [flags]

Serves a stateful fake of the provider's API, with its real idempotency
semantics and signed webhooks, for tests and demos against a standalone
process. It prints its base URL and the credentials it accepts, then serves
until interrupted (SIGINT or SIGTERM). The ground truth (what really exists
at the provider) is at http://ADDR/_fake/counts and /_fake/totals.

  stripe  base URL http://ADDR (default ADDR 127.0.0.1:12111); any sk_test_
          API key as a Bearer token
  adyen   base URL http://ADDR/v71 (default ADDR 127.0.0.1:12112); any
          non-empty X-API-Key and merchantAccount, unless --api-key and
          --merchant-account name the only ones accepted
  paypal  base URL http://ADDR (default ADDR 127.0.0.1:12113); OAuth client
          client_test, secret secret_test, unless --client-id and --secret

Flags:
  --addr ADDR              listen address (port 0: any free port, printed)
  --webhook-url URL        POST signed webhooks there (default: none; events
                           are still recorded)
  --duplicate-webhooks N   deliver every webhook 1+N times (default 0)
  stripe: --webhook-secret S   Stripe-Signature secret (default whsec_test)
  adyen:  --api-key K, --merchant-account M, --hmac-key HEX (the notification
          HMAC key; default adyentest.DefaultHMACKey, printed)
  paypal: --client-id ID, --secret S, --webhook-id ID (default WH-FAKE-PAYONCE)

Examples:
  lab fake stripe
  lab fake adyen --addr 127.0.0.1:0 --merchant-account PayonceTest
  lab fake paypal --webhook-url http://127.0.0.1:8080/webhooks/paypal
`

// fakeServer is what the three fakes have in common.
type fakeServer interface {
	http.Handler
	Close()
}

func runFake(args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if _, err := parseFlags(flag.NewFlagSet("fake", flag.ContinueOnError), fakeUsage, args); err != nil {
			return err
		}
		return usageError{"fake needs a provider: stripe, adyen or paypal (see lab fake --help)"}
	}
	provider := args[0]
	fs := flag.NewFlagSet("fake "+provider, flag.ContinueOnError)
	webhookURL := fs.String("webhook-url", "", "")
	dups := fs.Int("duplicate-webhooks", 0, "")
	var (
		addr  *string
		start func() (fakeServer, []string)
	)
	switch provider {
	case "stripe":
		addr = fs.String("addr", "127.0.0.1:12111", "")
		secret := fs.String("webhook-secret", "", "")
		start = func() (fakeServer, []string) {
			s := stripetest.NewUnstartedServer(&stripetest.Config{WebhookURL: *webhookURL, WebhookSecret: *secret, DuplicateWebhooks: *dups})
			return s, []string{
				"API key", "any sk_test_ key, as Authorization: Bearer sk_test_...",
				"webhook secret", or(*secret, stripetest.DefaultWebhookSecret),
			}
		}
	case "adyen":
		addr = fs.String("addr", "127.0.0.1:12112", "")
		apiKey := fs.String("api-key", "", "")
		merchant := fs.String("merchant-account", "", "")
		hmacKey := fs.String("hmac-key", "", "")
		start = func() (fakeServer, []string) {
			s := adyentest.NewUnstartedServer(&adyentest.Config{APIKey: *apiKey, MerchantAccount: *merchant,
				HMACKey: *hmacKey, WebhookURL: *webhookURL, DuplicateWebhooks: *dups})
			return s, []string{
				"X-API-Key", or(*apiKey, "any non-empty key"),
				"merchantAccount", or(*merchant, "any non-empty account"),
				"HMAC key", or(*hmacKey, adyentest.DefaultHMACKey) + " (notification signatures, hex)",
			}
		}
	case "paypal":
		addr = fs.String("addr", "127.0.0.1:12113", "")
		clientID := fs.String("client-id", "", "")
		secret := fs.String("secret", "", "")
		webhookID := fs.String("webhook-id", "", "")
		start = func() (fakeServer, []string) {
			s := paypaltest.NewUnstartedServer(&paypaltest.Config{ClientID: *clientID, Secret: *secret,
				WebhookID: *webhookID, WebhookURL: *webhookURL, DuplicateWebhooks: *dups})
			return s, []string{
				"client id", or(*clientID, paypaltest.DefaultClientID),
				"secret", or(*secret, paypaltest.DefaultSecret) + " (POST /v1/oauth2/token, Basic auth)",
				"webhook id", or(*webhookID, paypaltest.DefaultWebhookID),
			}
		}
	default:
		return usageError{fmt.Sprintf("fake: unknown provider %q (want stripe, adyen or paypal)", provider)}
	}
	pos, err := parseFlags(fs, fakeUsage, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("fake %s: unexpected argument %q", provider, pos[0])}
	}
	// The fakes panic on a bad Config, naming the field.
	fake, creds, err := func() (f fakeServer, creds []string, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = usageError{fmt.Sprintf("fake %s: %v", provider, p)}
			}
		}()
		f, creds = start()
		return f, creds, nil
	}()
	if err != nil {
		return err
	}
	defer fake.Close()
	l, err := net.Listen("tcp", *addr)
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
	fmt.Printf("  %-16s %s\n", "webhooks", or(*webhookURL, "not delivered (recorded only)"))
	fmt.Printf("  %-16s %s/_fake/counts, %s/_fake/totals\n", "ground truth", base, base)
	return serveFake(l, fake)
}

// serveFake serves h on l until SIGINT or SIGTERM, then shuts down
// gracefully.
func serveFake(l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signalContext()
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
