package main

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers"
	"github.com/payonce/payonce/providers/fakes"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// The torture's verdict is only as good as its checks: planted
// violations (a second charge for one key, a charge with no intent, an
// intent left open, an answer that contradicts the record, books that
// differ from the provider) are each named, and a clean payment is not.
func TestTortureCheckFindsViolations(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	fk := fakes.Start(fakes.Options{Stripe: true, Adyen: true, PayPal: true})
	defer fk.Close()
	env := fk.Env()
	cfg, err := providers.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	client, err := providers.NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &tortureRun{pool: pool, fk: fk}
	pay := func(key string) *payment {
		p := &payment{provider: "stripe", customer: "cus_1", key: key, amount: "10.00", currency: "EUR",
			codes: map[int]int{}, providerIDs: map[string]bool{}, finals: map[string]bool{}}
		r.pays = append(r.pays, p)
		return p
	}
	charge := func(p *payment) {
		t.Helper()
		amount, err := money.Parse(p.amount, money.Currency(p.currency))
		if err != nil {
			t.Fatal(err)
		}
		out, err := client.Charge(ctx, payments.ChargeParams{Scope: p.customer, Key: p.key, Provider: p.provider,
			Amount: amount, Recipient: "acct_shop", PaymentMethod: stripetest.PaymentMethodVisa})
		if err != nil || out.Status != payments.IntentSucceeded {
			t.Fatalf("charge %s: %+v, %v", p.key, out, err)
		}
		p.finals[string(out.Status)] = true
	}
	// behind payonce's back: a PaymentIntent carrying p's key
	sneak := func(p *payment) {
		t.Helper()
		key, err := payments.ChargeKey(p.customer, p.key)
		if err != nil {
			t.Fatal(err)
		}
		form := url.Values{"amount": {"1000"}, "currency": {"eur"}, "payment_method": {stripetest.PaymentMethodVisa},
			"confirm": {"true"}, "metadata[" + paystripe.MetadataKey + "]": {key}}
		req, _ := http.NewRequest(http.MethodPost, env["STRIPE_API_BASE"]+"/v1/payment_intents", strings.NewReader(form.Encode()))
		req.Header.Set("Authorization", "Bearer "+fakes.StripeSecretKey)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("planting a PaymentIntent: %s", resp.Status)
		}
	}

	clean := pay("order-clean")
	charge(clean)
	dup := pay("order-dup")
	charge(dup)
	sneak(dup)
	sneak(pay("order-lost"))
	told := pay("order-told")
	charge(told)
	told.finals["DECLINED"] = true
	// told REQUIRES_ACTION, and the intent settled later: no contradiction
	acted := pay("order-acted")
	charge(acted)
	acted.finals["REQUIRES_ACTION"] = true
	// recorded DECLINED while the provider holds a succeeded charge
	hidden := pay("order-hidden")
	charge(hidden)
	hidden.finals = map[string]bool{"DECLINED": true}
	if _, err := pool.Exec(ctx, `UPDATE payment_intents SET status = 'DECLINED' WHERE idempotency_key LIKE '%order-hidden%'`); err != nil {
		t.Fatal(err)
	}
	open := pay("order-open")
	charge(open)
	if _, err := pool.Exec(ctx, `UPDATE payment_intents SET status = 'PENDING' WHERE idempotency_key LIKE '%order-open%'`); err != nil {
		t.Fatal(err)
	}

	err = r.check(ctx, 0)
	var f tortureFailure
	if !errors.As(err, &f) {
		t.Fatalf("check: %v, want the planted violations", err)
	}
	all := strings.Join(f.problems, "\n")
	for _, want := range []string{
		"stripe cus_1/order-dup: 2 charges at the provider",
		"stripe cus_1/order-dup: SUCCEEDED, and 2 charges that moved money at the provider",
		"stripe cus_1/order-hidden: DECLINED, and 1 charges that moved money at the provider",
		"stripe cus_1/order-lost: a charge at the provider and no intent",
		"stripe cus_1/order-told: a client was told DECLINED, payonce recorded SUCCEEDED",
		"stripe cus_1/order-open: still PENDING",
		"stripe cus_1/order-open: a client was told SUCCEEDED, payonce recorded PENDING",
		// six charges through payonce (one of them ledgered, then
		// relabelled DECLINED behind its back), two behind its back
		"stripe EUR: ledger 60.00, provider 80.00",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no problem %q among:\n%s", want, all)
		}
	}
	for _, fine := range []string{"order-clean", "order-acted"} {
		if strings.Contains(all, fine) {
			t.Errorf("%s is named:\n%s", fine, all)
		}
	}
	if len(f.problems) != 8 {
		t.Errorf("%d problems, want the 8 planted:\n%s", len(f.problems), all)
	}
}
