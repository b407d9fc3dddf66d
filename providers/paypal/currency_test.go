package paypal_test

import (
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// Amounts travel with PayPal's decimal places, not ISO 4217's: HUF and TWD have two in ISO (and
// in the money package) but none at PayPal.
func TestAmountOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		m    money.Money
		want string
	}{
		{money.MustParse("10", "HUF"), "10"},
		{money.MustParse("1500", "TWD"), "1500"},
		{money.MustParse("1500", money.JPY), "1500"},
		{money.MustParse("10.5", money.EUR), "10.50"},
		{money.MustParse("7", money.USD), "7.00"},
	} {
		a, err := paypal.AmountOf(tc.m)
		if err != nil || a.Value != tc.want || a.CurrencyCode != string(tc.m.Currency()) {
			t.Fatalf("%s: %+v %v, want %q", tc.m, a, err, tc.want)
		}
		back, err := a.Money()
		if err != nil || !back.Equal(tc.m) {
			t.Fatalf("%s: read back as %s %v", tc.m, back, err)
		}
	}
	for _, m := range []money.Money{money.MustParse("10.50", "HUF"), money.MustParse("0.01", "TWD"),
		money.MustParse("1.000", money.KWD), money.MustParse("1000", money.KRW), money.MustParse("10.00", "RUB")} {
		if _, err := paypal.AmountOf(m); err == nil {
			t.Fatalf("%s accepted", m)
		} else if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != "Amount" {
			t.Fatalf("%s: %+v", m, ie)
		}
	}
	cs := paypal.Currencies()
	if len(cs) != 24 || cs["HUF"] != 0 || cs["TWD"] != 0 || cs["JPY"] != 0 || cs[money.EUR] != 2 {
		t.Fatalf("Currencies %v", cs)
	}
}

// Charges and refunds in the currencies PayPal writes without decimals round-trip through the
// fake, which checks them with its own table.
func TestZeroDecimalCurrencyRoundTrip(t *testing.T) {
	t.Parallel()
	for _, cur := range []money.Currency{"HUF", "TWD"} {
		t.Run(string(cur), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			req := chargeReq("zero-dec-"+string(cur), paypaltest.PaymentMethodVisa)
			req.Amount = money.MustParse("10", cur)
			res := must(b.p.Charge(ctxT(t), req))(t)
			if res.Status != provider.ChargeSucceeded || !res.Amount.Equal(req.Amount) {
				t.Fatalf("%+v", res)
			}
			o := must(b.p.Client().GetOrder(ctxT(t), res.ProviderID))(t)
			if v := o.PurchaseUnits[0].Amount.Value; v != "10" {
				t.Fatalf("order amount %q, want \"10\"", v)
			}
			re := must(b.p.Refund(ctxT(t), refundReq("zero-dec-r-"+string(cur), res.ProviderID, money.MustParse("4", cur))))(t)
			if re.Status != provider.RefundSucceeded || !re.Amount.Equal(money.MustParse("4", cur)) {
				t.Fatalf("refund %+v", re)
			}
			if got := b.srv.Totals()[string(cur)]; got.Captured != 1000 || got.Refunded != 400 { // ISO minor units
				t.Fatalf("totals %+v", got)
			}
		})
	}
}

// An amount PayPal cannot represent (10.50 HUF), or a currency PayPal does not support, is
// refused before anything is sent, with an error naming the field: ValidateCharge (which
// payments calls before recording anything), Charge and Refund alike.
func TestCurrencyRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	charged := must(b.p.Charge(ctxT(t), func() provider.ChargeRequest {
		r := chargeReq("huf-ok", paypaltest.PaymentMethodVisa)
		r.Amount = money.MustParse("100", "HUF")
		return r
	}()))(t)
	before := len(b.sent.all())

	for _, m := range []money.Money{money.MustParse("10.50", "HUF"), money.MustParse("10.01", "TWD"),
		money.MustParse("1.500", money.KWD), money.MustParse("1000", money.KRW), money.MustParse("10.00", "RUB")} {
		req := chargeReq("refused-"+string(m.Currency()), paypaltest.PaymentMethodVisa)
		req.Amount = m
		if ie := errAs[*provider.InvalidRequestError](t, b.p.ValidateCharge(req)); ie.Param != "Amount" || idempotency.SafeToRetry(ie) {
			t.Fatalf("ValidateCharge %s: %+v", m, ie)
		}
		_, err := b.p.Charge(ctxT(t), req)
		if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != "Amount" {
			t.Fatalf("Charge %s: %+v", m, ie)
		}
		wantCounts(t, b, req.ProviderKey, paypaltest.Counts{})
	}
	_, err := b.p.Refund(ctxT(t), refundReq("huf-half", charged.ProviderID, money.MustParse("0.50", "HUF")))
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != "Amount" {
		t.Fatalf("Refund: %+v", ie)
	}
	if got := b.sent.all(); len(got) != before {
		t.Fatalf("requests sent for refused amounts: %v", got[before:])
	}
	if got := b.srv.Totals()["HUF"]; got.Refunded != 0 {
		t.Fatalf("%+v", got)
	}
	if err := b.p.ValidateCharge(chargeReq("eur-ok", paypaltest.PaymentMethodVisa)); err != nil {
		t.Fatal(err)
	}
}
