package stripe_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/testkit"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

const balanceListEndpoint = "GET /v1/balance_transactions"

func (b lookupBundle) chargeAmount(t *testing.T, key string, amount money.Money) provider.ChargeResult {
	t.Helper()
	req := chargeReq(key, stripetest.PaymentMethodVisa)
	req.Amount = amount
	return must(b.p.Charge(context.Background(), req))(t)
}

func (b lookupBundle) totals(t *testing.T, from, to time.Time) map[money.Currency]provider.Totals {
	t.Helper()
	return must(b.p.Totals(context.Background(), from, to))(t)
}

func usd(s string) money.Money { return money.MustParse(s, money.USD) }

// Two EUR charges and a USD one, a partial refund and a refund that
// failed: Charged is what succeeded, Refunded what stayed refunded, per
// currency; the declined and the unauthenticated charge moved nothing. The
// fake's ground truth agrees, and one list request read it all.
func TestTotals(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	ch1 := b.charge(t, "order-1")
	ch2 := b.charge(t, "order-2")
	b.chargeAmount(t, "order-3", usd("15.00"))
	if _, err := b.p.Charge(context.Background(), chargeReq("order-4", stripetest.PaymentMethodDeclined)); !errors.Is(err, provider.ErrDeclined) {
		t.Fatalf("declined card: %v", err)
	}
	must(b.p.Charge(context.Background(), chargeReq("order-5", stripetest.PaymentMethodAuthenticationRequired)))(t)
	b.refund(t, ch1.ProviderID, "order-1-refund", eur("5.00"))
	failed := b.refund(t, ch2.ProviderID, "order-2-refund", eur("7.50"))
	if err := b.srv.FailRefund(failed.ProviderID); err != nil {
		t.Fatal(err)
	}
	b.requests.Take()

	got := b.totals(t, t0, t0.Add(time.Second))
	testkit.WantTotals(t, got, map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("40.00"), Refunded: eur("5.00")},
		money.USD: {Charged: usd("15.00"), Refunded: usd("0")},
	})
	if n := b.requests.calls(balanceListEndpoint); n != 1 {
		t.Fatalf("%d balance transaction lists, want 1", n)
	}
	for cur, tot := range b.srv.Totals() {
		c := money.Currency(strings.ToUpper(cur))
		if must(paystripe.ToAmount(got[c].Charged))(t) != tot.Succeeded || must(paystripe.ToAmount(got[c].Refunded))(t) != tot.Refunded {
			t.Fatalf("%s: Totals %+v, the fake holds %+v", cur, got[c], tot)
		}
	}
}

// The window is [from, to) on the transactions' creation time: moving the
// fake's clock puts charges, refunds and a refund's later failure in
// separate windows, and adjacent windows add up to the whole.
func TestTotalsWindow(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	b.charge(t, "early") // t0
	b.clock.Advance(time.Hour)
	mid := b.charge(t, "mid") // t0+1h
	re := b.refund(t, mid.ProviderID, "mid-refund", eur("4.00"))
	b.clock.Advance(time.Hour)
	b.chargeAmount(t, "late", usd("1.00")) // t0+2h
	if err := b.srv.FailRefund(re.ProviderID); err != nil {
		t.Fatal(err)
	}
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }

	testkit.WantTotals(t, b.totals(t, h(0), h(1)), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("20.00"), Refunded: eur("0")},
	})
	testkit.WantTotals(t, b.totals(t, h(1), h(2)), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("20.00"), Refunded: eur("4.00")},
	})
	// The failure lands in its own window: there it gives the refund back.
	testkit.WantTotals(t, b.totals(t, h(2), h(3)), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("0"), Refunded: eur("-4.00")},
		money.USD: {Charged: usd("1.00"), Refunded: usd("0")},
	})
	testkit.WantTotals(t, b.totals(t, h(0), h(3)), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("40.00"), Refunded: eur("0")},
		money.USD: {Charged: usd("1.00"), Refunded: usd("0")},
	})
	// Bounds: from is in, to is out, to the second.
	testkit.WantTotals(t, b.totals(t, h(1).Add(time.Second), h(2)), map[money.Currency]provider.Totals{})
	testkit.WantTotals(t, b.totals(t, h(2), h(2).Add(time.Second)), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("0"), Refunded: eur("-4.00")},
		money.USD: {Charged: usd("1.00"), Refunded: usd("0")},
	})
	if got := b.totals(t, h(3), h(4)); got == nil || len(got) != 0 {
		t.Fatalf("an empty window: %#v, want an empty map", got)
	}
}

// More than a page of transactions: Totals reads every page.
func TestTotalsPages(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	for i := range 110 {
		ch := b.chargeAmount(t, fmt.Sprint("order-", i), eur("1.00"))
		if i%3 == 0 {
			b.refund(t, ch.ProviderID, fmt.Sprint("refund-", i), eur("0.25"))
		}
	}
	b.requests.Take()
	testkit.WantTotals(t, b.totals(t, t0, t0.Add(time.Second)), map[money.Currency]provider.Totals{ // 110 + 37 transactions
		money.EUR: {Charged: eur("110.00"), Refunded: eur("9.25")},
	})
	if n := b.requests.calls(balanceListEndpoint); n != 2 {
		t.Fatalf("%d balance transaction lists for 147 transactions, want 2 pages of 100", n)
	}
}

// A bad window is refused before sending, naming the bound.
func TestTotalsBadWindow(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	testkit.RefusesBadWindows(t, t0, func(from, to time.Time) error {
		_, err := b.p.Totals(context.Background(), from, to)
		return err
	})
	if n := b.requests.calls(balanceListEndpoint); n != 0 {
		t.Fatalf("%d requests sent for bad windows", n)
	}
}

// A failure on a later page is classified like any read's; a transaction
// in a currency money does not know fails the sum instead of being
// skipped.
func TestTotalsErrors(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	for i := range 101 {
		b.chargeAmount(t, fmt.Sprint("order-", i), eur("1.00"))
	}
	// The first page is served (after a token delay), the second fails.
	b.srv.Inject(stripetest.Fault{Kind: stripetest.Latency, Delay: time.Millisecond, Path: "/v1/balance_transactions"})
	b.srv.Inject(stripetest.Fault{Kind: stripetest.FailBefore, Path: "/v1/balance_transactions"})
	_, err := b.p.Totals(context.Background(), t0, t0.Add(time.Second))
	if u := errAs[*provider.UnknownOutcomeError](t, err); u.Status != http.StatusInternalServerError || !idempotency.SafeToRetry(err) {
		t.Fatalf("a 500 on page 2: %+v", u)
	}
	testkit.WantTotals(t, b.totals(t, t0, t0.Add(time.Second)), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("101.00"), Refunded: eur("0")},
	})

	// money cannot build "zzz": charge it at the fake directly.
	form := url.Values{"amount": {"100"}, "currency": {"zzz"}, "payment_method": {stripetest.PaymentMethodVisa}, "confirm": {"true"}}
	req := must(http.NewRequest(http.MethodPost, b.srv.URL()+"/v1/payment_intents", strings.NewReader(form.Encode())))(t)
	req.Header.Set("Authorization", "Bearer sk_test_lookup")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp := must(http.DefaultClient.Do(req))(t)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("charging zzz at the fake: %d", resp.StatusCode)
	}
	_, err = b.p.Totals(context.Background(), t0, t0.Add(time.Second))
	errAs[*provider.UnknownOutcomeError](t, err)
	if !errors.Is(err, money.ErrUnknownCurrency) || !strings.Contains(err.Error(), "ZZZ") {
		t.Fatalf("a transaction in zzz: %v, want an unknown currency error naming it", err)
	}

	// Stripe unreachable: nothing was sent.
	ln := must(net.Listen("tcp", "127.0.0.1:0"))(t)
	addr := ln.Addr().String()
	ln.Close()
	p := must(paystripe.New(&paystripe.Config{SecretKey: "sk_test_x", BaseURL: "http://" + addr,
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}))(t)
	_, err = p.Totals(context.Background(), t0, t0.Add(time.Second))
	errAs[*provider.NotSentError](t, err)
}
