package adyen_test

import (
	"context"
	"strings"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
)

// Adyen counts CLP and ISK with 2 decimals (ISO 4217: 0) and CVE and IDR with 0 (ISO: 2):
// https://docs.adyen.com/development-resources/currency-codes.
func TestDecimals(t *testing.T) {
	t.Parallel()
	for cur, want := range map[money.Currency]int{"EUR": 2, "JPY": 0, "KWD": 3, "CLP": 2, "ISK": 2, "CVE": 0, "IDR": 0, "clp": 2} {
		if got := must(adyen.Decimals(cur))(t); got != want {
			t.Errorf("Decimals(%s) = %d, want %d", cur, got, want)
		}
	}
	if _, err := adyen.Decimals("XXZ"); err == nil {
		t.Fatal("Decimals of an unknown currency")
	}
}

// Round trips through the adapter and the fake, which reads amounts with its own table: 1000
// CVE is value 1000, 1000 CLP is value 100000, and both come back from the AUTHORISATION and
// REFUND notifications as the amounts sent.
func TestCurrencyRoundTrips(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		cur       money.Currency
		amount    string
		value     int64
		netAmount string
	}{
		{"CVE", "1000", 1000, "1000"},
		{"CLP", "1000", 100000, "1000.00"},
		{"ISK", "1000", 100000, "1000.00"},
		{"IDR", "15000", 15000, "15000"},
		{"EUR", "10.50", 1050, "10.50"},
	} {
		req := chargeReq("order-"+string(tc.cur), adyentest.PaymentMethodVisa)
		req.Amount = money.MustParse(tc.amount, tc.cur)
		if err := b.p.ValidateCharge(req); err != nil {
			t.Fatalf("%s: %v", tc.cur, err)
		}
		res := must(b.p.Charge(ctx, req))(t)
		if res.Status != provider.ChargeSucceeded || !res.Amount.Equal(req.Amount) {
			t.Fatalf("%s charge: %+v", tc.cur, res)
		}
		b.wait(t)
		var sent adyentest.Amount
		for _, ev := range b.srv.Events() {
			if ev.Item.EventCode == "AUTHORISATION" && ev.Item.PSPReference == res.ProviderID {
				sent = ev.Item.Amount
			}
		}
		if sent != (adyentest.Amount{Currency: string(tc.cur), Value: tc.value}) {
			t.Fatalf("%s %s reached the fake as %+v, want value %d", tc.amount, tc.cur, sent, tc.value)
		}
		if got := b.srv.Totals()[string(tc.cur)].NetAmount; got != tc.netAmount {
			t.Fatalf("the fake reads %s %s as %s, want %s", tc.amount, tc.cur, got, tc.netAmount)
		}
		auth := onlyEvent(t, b, req.ProviderKey, "AUTHORISATION")
		if !auth.Amount.Equal(req.Amount) {
			t.Fatalf("%s AUTHORISATION amount %s, want %s", tc.cur, auth.Amount, req.Amount)
		}
		r := refundReq("refund-"+string(tc.cur), res.ProviderID, req.Amount)
		rr := must(b.p.Refund(ctx, r))(t)
		if !rr.Amount.Equal(req.Amount) {
			t.Fatalf("%s refund: %+v", tc.cur, rr)
		}
		if ev := onlyEvent(t, b, r.ProviderKey, "REFUND"); ev.Kind != provider.EventRefundSucceeded || !ev.Amount.Equal(req.Amount) {
			t.Fatalf("%s REFUND: %+v", tc.cur, ev)
		}
		if got := b.srv.Totals()[string(tc.cur)]; got.Net != 0 || got.Refunded != tc.value {
			t.Fatalf("%s totals after the refund: %+v", tc.cur, got)
		}
	}
}

// Amounts Adyen cannot represent are refused before anything is sent, naming the field: the
// fake holds nothing for them.
func TestUnrepresentableAmountsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	ok := must(b.p.Charge(ctx, chargeReq("order-ok", adyentest.PaymentMethodVisa)))(t)
	for _, amount := range []money.Money{
		money.MustParse("1000.50", "CVE"), // ISO allows cents, Adyen counts whole escudos
		money.MustParse("10.01", "IDR"),
	} {
		req := chargeReq("order-bad-"+string(amount.Currency()), adyentest.PaymentMethodVisa)
		req.Amount = amount
		for name, err := range map[string]error{"ValidateCharge": b.p.ValidateCharge(req), "Charge": second(b.p.Charge(ctx, req))} {
			ie := errAs[*provider.InvalidRequestError](t, err)
			if ie.Param != "Amount" || !strings.Contains(ie.Message, "Adyen cannot represent") || idempotency.SafeToRetry(err) {
				t.Fatalf("%s of %s: %+v", name, amount, ie)
			}
		}
		if c := b.srv.Counts(req.ProviderKey); c != (adyentest.Counts{}) {
			t.Fatalf("%s reached the fake: %+v", amount, c)
		}
		r := refundReq("refund-bad-"+string(amount.Currency()), ok.ProviderID, amount)
		for name, err := range map[string]error{"ValidateRefund": b.p.ValidateRefund(r), "Refund": second(b.p.Refund(ctx, r))} {
			if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != "Amount" {
				t.Fatalf("%s of %s: %+v", name, amount, ie)
			}
		}
		if c := b.srv.Counts(r.ProviderKey); c != (adyentest.Counts{}) {
			t.Fatalf("refund of %s reached the fake: %+v", amount, c)
		}
	}
	var p provider.Provider = b.p
	if _, ok := p.(provider.Validator); !ok {
		t.Fatal("the adapter is not a provider.Validator")
	}
}

// A notification whose value is finer than payonce's currency can hold (100050 CLP is 1000.50
// CLP at Adyen; ISO 4217 has no centavos) is malformed for payonce, not rounded.
func TestNotificationAmountFinerThanISO(t *testing.T) {
	t.Parallel()
	it := refundItem()
	it.Amount = adyentest.Amount{Currency: "CLP", Value: 100050}
	_, err := verifier(t, newKey).VerifyWebhook(context.Background(), nil, signedDelivery(t, it, newKey))
	if err == nil || !strings.Contains(err.Error(), "amount.value") {
		t.Fatalf("100050 CLP: %v, want a malformed amount.value", err)
	}
	it.Amount.Value = 100000
	ev := must(verifier(t, newKey).VerifyWebhook(context.Background(), nil, signedDelivery(t, it, newKey)))(t)[0]
	if !ev.Amount.Equal(money.MustParse("1000", "CLP")) {
		t.Fatalf("100000 CLP read as %s", ev.Amount)
	}
}

func second[T any](_ T, err error) error { return err }
