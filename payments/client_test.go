package payments_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

type bundle struct {
	pool   *pgxpool.Pool
	client *payments.Client
	ledger *ledger.Ledger
	fake   *stripetest.Server
}

func setup(t *testing.T) bundle {
	t.Helper()
	return setupWith(t, nil)
}

func setupWith(t *testing.T, cfg *payments.Config) bundle {
	t.Helper()
	return setupStripe(t, nil, nil, cfg)
}

// setupStripe is a client (cfg, nil: defaults) on a new schema and a
// Stripe fake started with fakeCfg; wrap, when not nil, wraps the adapter.
func setupStripe(t *testing.T, fakeCfg *stripetest.Config, wrap func(provider.Provider) provider.Provider, cfg *payments.Config) bundle {
	t.Helper()
	pool := pgtest.Pool(t)
	store, l := openStoreLedger(t, pool)
	fake := stripetest.NewServer(fakeCfg)
	t.Cleanup(fake.Close)
	sp, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_payments", BaseURL: fake.URL(), HTTPClient: noKeepAliveClient(nil)})
	if err != nil {
		t.Fatal(err)
	}
	var prov provider.Provider = sp
	if wrap != nil {
		prov = wrap(sp)
	}
	c, err := payments.New(pool, []provider.Provider{prov}, withStore(cfg, store, l))
	if err != nil {
		t.Fatal(err)
	}
	return bundle{pool: pool, client: c, ledger: l, fake: fake}
}

// withStore is cfg (nil: defaults) with the test's store and ledger.
func withStore(cfg *payments.Config, store *pgstore.Store, l *ledger.Ledger) *payments.Config {
	c := payments.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Store, c.Ledger = store, l
	return &c
}

func eur(t *testing.T, s string) money.Money {
	t.Helper()
	m, err := money.Parse(s, money.EUR)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func params(t *testing.T, key, amount, method string) payments.ChargeParams {
	return payments.ChargeParams{Scope: "cus_1", Key: key, Provider: "stripe", Amount: eur(t, amount),
		Recipient: "acct_shop", PaymentMethod: method, Description: "order"}
}

// pis counts the PaymentIntents that really exist at the fake for a key.
func pis(t *testing.T, b bundle, key string) int {
	t.Helper()
	k, err := idempotency.ComposeKey("cus_1", "charge", key)
	if err != nil {
		t.Fatal(err)
	}
	return b.fake.CountsByMetadata(paystripe.MetadataKey, k).PaymentIntents
}

// balance is the bundle's provider cash at Stripe.
func balance(t *testing.T, b bundle) string {
	t.Helper()
	return balanceOf(t, b.ledger, ledger.ProviderCash("stripe"))
}

// checkCharged fails unless key made one PaymentIntent at Stripe and the
// ledger's provider cash at Stripe is cash.
func checkCharged(t *testing.T, b bundle, key, cash string) {
	t.Helper()
	if n := pis(t, b, key); n != 1 {
		t.Fatalf("PaymentIntents at Stripe for %s = %d, want 1", key, n)
	}
	if got := balance(t, b); got != cash {
		t.Fatalf("provider:stripe = %s, want %s", got, cash)
	}
}

func TestChargeOnceAndReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	first, err := b.client.Charge(ctx, params(t, "k1", "49.99", stripetest.PaymentMethodVisa))
	if err != nil || first.Status != payments.IntentSucceeded || first.ProviderID == "" || first.Replayed {
		t.Fatalf("charge: %+v %v", first, err)
	}
	again, err := b.client.Charge(ctx, params(t, "k1", "49.990", stripetest.PaymentMethodVisa))
	if err != nil || !again.Replayed || again.ProviderID != first.ProviderID {
		t.Fatalf("retry: %+v %v", again, err)
	}
	checkCharged(t, b, "k1", "49.99")
	in, err := b.client.Intent(ctx, "cus_1", "k1")
	if err != nil || in.Status != payments.IntentSucceeded || in.ProviderID != first.ProviderID {
		t.Fatalf("intent: %+v %v", in, err)
	}
	if _, err := b.client.Charge(ctx, params(t, "k1", "50.00", stripetest.PaymentMethodVisa)); !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("same key, other amount: %v", err)
	}
}

// The provider commits, the response is lost: the outcome is unknown, the
// intent stays open, and a retry with the same key resolves it with the
// same provider key: one PaymentIntent, one set of postings.
func TestLostResponseResolvedByRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.fake.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	_, err := b.client.Charge(ctx, params(t, "lost", "10.00", stripetest.PaymentMethodVisa))
	if !payments.OutcomeUnknown(err) || !idempotency.SafeToRetry(err) {
		t.Fatalf("lost response: %v, want an unknown outcome", err)
	}
	in, err := b.client.Intent(ctx, "cus_1", "lost")
	if err != nil || in.Status != payments.IntentUnknown {
		t.Fatalf("intent after a lost response: %+v %v", in, err)
	}
	if got := balance(t, b); got != "0.00" {
		t.Fatalf("posted %s before the outcome was known", got)
	}
	res, err := b.client.Charge(ctx, params(t, "lost", "10.00", stripetest.PaymentMethodVisa))
	if err != nil || res.Status != payments.IntentSucceeded || res.Replayed {
		t.Fatalf("retry: %+v %v", res, err)
	}
	checkCharged(t, b, "lost", "10.00")
}

func TestDeclineIsReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		res, err := b.client.Charge(ctx, params(t, "dec", "10.00", stripetest.PaymentMethodInsufficientFunds))
		var d *provider.DeclineError
		if !errors.As(err, &d) || d.DeclineCode != "insufficient_funds" || res.Replayed != (i == 1) {
			t.Fatalf("attempt %d: %+v %v", i, res, err)
		}
	}
	if n := pis(t, b, "dec"); n != 1 {
		t.Fatalf("PaymentIntents = %d, want 1 (a decline is final for its key)", n)
	}
	if got := balance(t, b); got != "0.00" {
		t.Fatalf("a decline posted %s", got)
	}
}

func TestConcurrentChargesOneIntent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.fake.Inject(stripetest.Fault{Kind: stripetest.Latency, Delay: 200 * time.Millisecond, Method: "POST"})
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.client.Charge(ctx, params(t, "storm", "5.00", stripetest.PaymentMethodVisa))
			if err != nil && !errors.Is(err, idempotency.ErrInProgress) {
				t.Errorf("charge: %v", err)
			}
		}()
	}
	wg.Wait()
	res, err := b.client.Charge(ctx, params(t, "storm", "5.00", stripetest.PaymentMethodVisa))
	if err != nil || res.Status != payments.IntentSucceeded {
		t.Fatalf("after the storm: %+v %v", res, err)
	}
	checkCharged(t, b, "storm", "5.00")
}

func TestBadInputRecordsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	zero, _ := money.FromMinor(0, money.EUR)
	many := map[string]string{}
	for i := 0; i <= payments.MaxMetadataKeys; i++ {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	ok := payments.ChargeParams{Scope: "cus_1", Key: "k", Provider: "stripe", Amount: eur(t, "1"), Recipient: "r", PaymentMethod: "pm"}
	with := func(f func(p *payments.ChargeParams)) payments.ChargeParams { p := ok; f(&p); return p }
	cases := []struct {
		field string
		p     payments.ChargeParams
	}{
		{"Provider", with(func(p *payments.ChargeParams) { p.Provider = "nope" })},
		{"Amount", with(func(p *payments.ChargeParams) { p.Amount = zero })},
		{"Amount", with(func(p *payments.ChargeParams) { p.Amount = money.Money{} })},                  // no currency
		{"Recipient", with(func(p *payments.ChargeParams) { p.Recipient = strings.Repeat("r", 256) })}, // an empty one: recipient_test.go
		{"PaymentMethod", with(func(p *payments.ChargeParams) { p.PaymentMethod = "" })},
		{"scope", with(func(p *payments.ChargeParams) { p.Scope = "" })},
		{"Metadata", with(func(p *payments.ChargeParams) { p.Metadata = many })},
		{"Metadata", with(func(p *payments.ChargeParams) { p.Metadata = map[string]string{"note": strings.Repeat("x", 501)} })},
		{"Metadata", with(func(p *payments.ChargeParams) { p.Metadata = map[string]string{strings.Repeat("k", 41): "v"} })},
	}
	for _, c := range cases {
		field, p := c.field, c.p
		_, err := b.client.Charge(ctx, p)
		var ce *payments.ConfigError
		var ie *idempotency.InvalidError
		if !(errors.As(err, &ce) && ce.Field == field) && !(errors.As(err, &ie) && ie.Field == field) {
			t.Errorf("%s: err = %v, want an error naming %s", field, err, field)
		}
	}
	var intents, records int
	if err := b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM payment_intents), (SELECT count(*) FROM idempotency_store)`).Scan(&intents, &records); err != nil {
		t.Fatal(err)
	}
	if intents != 0 || records != 0 {
		t.Fatalf("bad input left %d intents and %d records", intents, records)
	}
}

func TestRetentionShorterThanDedupWindowRefused(t *testing.T) {
	t.Parallel()
	checkConfigRefused(t, setup(t), payments.Config{Retention: time.Hour}, "Config.Retention")
}

// checkConfigRefused asserts that New refuses cfg (with the bundle's store
// and ledger) with a ConfigError naming field.
func checkConfigRefused(t *testing.T, b bundle, cfg payments.Config, field string) {
	t.Helper()
	store, _ := openStoreLedger(t, b.pool)
	prov, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_x", BaseURL: b.fake.URL()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.Ledger = store, b.ledger
	_, err = payments.New(b.pool, []provider.Provider{prov}, &cfg)
	var ce *payments.ConfigError
	if !errors.As(err, &ce) || ce.Field != field {
		t.Fatalf("%+v: err = %v, want a ConfigError naming %s", cfg, err, field)
	}
}

// refundBalance is what the bundle's ledger refunded to customers.
func refundBalance(t *testing.T, b bundle) string {
	t.Helper()
	return balanceOf(t, b.ledger, ledger.CustomerRefunds)
}

func TestRefundsPartialReplayedAndBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.client.Charge(ctx, params(t, "c1", "10.00", stripetest.PaymentMethodVisa)); err != nil {
		t.Fatal(err)
	}
	r1, err := b.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: "r1", ChargeKey: "c1", Amount: eur(t, "4.00")})
	if err != nil || r1.Status != payments.IntentSucceeded || r1.ProviderID == "" {
		t.Fatalf("refund: %+v %v", r1, err)
	}
	again, err := b.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: "r1", ChargeKey: "c1", Amount: eur(t, "4.00")})
	if err != nil || !again.Replayed || again.ProviderID != r1.ProviderID {
		t.Fatalf("refund retry: %+v %v", again, err)
	}
	_, err = b.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: "r2", ChargeKey: "c1", Amount: eur(t, "7.00")})
	var inv *provider.InvalidRequestError
	if !errors.As(err, &inv) || inv.Code != "refund_exceeds_charge" {
		t.Fatalf("refund beyond the charge: %v", err)
	}
	if got := refundBalance(t, b); got != "4.00" {
		t.Fatalf("customer:refunds = %s, want 4.00", got)
	}
	if got := balance(t, b); got != "6.00" {
		t.Fatalf("provider:stripe = %s, want 6.00", got)
	}
	if _, err := b.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: "r3", ChargeKey: "nope", Amount: eur(t, "1.00")}); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("refund of an unknown charge: %v", err)
	}
}

// Concurrent refunds with their own keys can never exceed the charge:
// the database refuses the reservation that would.
func TestConcurrentRefundsNeverExceedTheCharge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.client.Charge(ctx, params(t, "c2", "10.00", stripetest.PaymentMethodVisa)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	succeeded := 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := b.client.Refund(ctx, payments.RefundParams{Scope: "cus_1", Key: "r" + string(rune('a'+i)), ChargeKey: "c2", Amount: eur(t, "3.00")})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && res.Status == payments.IntentSucceeded:
				succeeded++
			case errors.Is(err, provider.ErrInvalidRequest):
			default:
				t.Errorf("refund %d: %+v %v", i, res, err)
			}
		}(i)
	}
	wg.Wait()
	if succeeded != 3 {
		t.Fatalf("%d refunds of 3.00 succeeded on a 10.00 charge, want 3", succeeded)
	}
	if got := refundBalance(t, b); got != "9.00" {
		t.Fatalf("customer:refunds = %s, want 9.00", got)
	}
	totals := b.fake.Totals()
	if got := totals["eur"]; got.Refunded != 900 {
		t.Fatalf("refunded at Stripe: %+v, want 900 minor units", got)
	}
}

// ChargeTx: the caller's rows commit with the outcome or not at all, and a
// failing caller part leaves an open intent that a retry resolves without
// a second charge.
func TestChargeTxCommitsTheCallersRowsWithTheOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, paid_by TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	calls := 0
	markPaid := func(ctx context.Context, tx pgx.Tx, out payments.Outcome) error {
		calls++
		if calls == 1 {
			return errors.New("orders table is locked")
		}
		_, err := tx.Exec(ctx, `INSERT INTO orders VALUES ('o1', $1)`, out.ProviderID)
		return err
	}
	p := params(t, "tx1", "12.00", stripetest.PaymentMethodVisa)
	_, err := b.client.ChargeTx(ctx, p, markPaid)
	if !payments.OutcomeUnknown(err) {
		t.Fatalf("a failing caller part: err = %v, want an unknown outcome", err)
	}
	if in, err := b.client.Intent(ctx, "cus_1", "tx1"); err != nil || in.Status == payments.IntentSucceeded {
		t.Fatalf("intent after a rolled-back outcome: %+v %v", in, err)
	}
	out, err := b.client.ChargeTx(ctx, p, markPaid)
	if err != nil || out.Status != payments.IntentSucceeded {
		t.Fatalf("retry: %+v %v", out, err)
	}
	again, err := b.client.ChargeTx(ctx, p, markPaid)
	if err != nil || !again.Replayed || calls != 2 {
		t.Fatalf("replay: %+v %v, fn called %d times, want 2", again, err, calls)
	}
	var paidBy string
	if err := b.pool.QueryRow(ctx, `SELECT paid_by FROM orders WHERE id = 'o1'`).Scan(&paidBy); err != nil || paidBy != out.ProviderID {
		t.Fatalf("order row: %q %v, want paid by %s", paidBy, err, out.ProviderID)
	}
	checkCharged(t, b, "tx1", "12.00")
}
