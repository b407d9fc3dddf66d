package reconcile_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// stripeClient is a payments client (defaults) on pool over a new Stripe
// fake started with fakeCfg. Its adapter sends through rt (nil: a
// transport without keep-alives, so that a lost answer reaches it as
// lost), verifies webhooks signed with the fake's default secret, and is
// wrapped by wrap when not nil.
func stripeClient(t *testing.T, pool *pgxpool.Pool, fakeCfg *stripetest.Config, rt http.RoundTripper,
	wrap func(provider.Provider) provider.Provider) (*payments.Client, *stripetest.Server) {
	t.Helper()
	fake := stripetest.NewServer(fakeCfg)
	t.Cleanup(fake.Close)
	if rt == nil {
		rt = &http.Transport{DisableKeepAlives: true}
	}
	sp, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_reconcile", BaseURL: fake.URL(),
		HTTPClient:     &http.Client{Timeout: 10 * time.Second, Transport: rt},
		WebhookSecrets: []string{stripetest.DefaultWebhookSecret}})
	if err != nil {
		t.Fatal(err)
	}
	var prov provider.Provider = sp
	if wrap != nil {
		prov = wrap(sp)
	}
	client, err := payments.New(pool, []provider.Provider{prov}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return client, fake
}
