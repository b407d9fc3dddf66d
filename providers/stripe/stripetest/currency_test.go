package stripetest_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stripe/stripe-go/v79"

	"github.com/payonce/payonce/providers/stripe/stripetest"
)

func chargeIn(key, currency string, amount int64) *stripe.PaymentIntentParams {
	p := chargeParams(key, amount, stripetest.PaymentMethodVisa)
	p.Currency = stripe.String(currency)
	return p
}

// The fake reads integer amounts with Stripe's exponents (https://docs.stripe.com/currencies),
// not ISO 4217's: ISK and UGX are written with two decimals, MGA with none, the three-decimal
// currencies with three.
func TestFormatAmount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		amount   int64
		currency string
		want     string
	}{
		{1050, "eur", "10.50"},
		{5, "usd", "0.05"},
		{-300, "usd", "-3.00"},
		{500, "jpy", "500"},
		{100, "MGA", "100"},
		{1230, "kwd", "1.230"},
		{10, "bhd", "0.010"},
		{500000, "isk", "5000.00"},
		{500, "ugx", "5.00"},
		{1045, "huf", "10.45"},
		{0, "eur", "0.00"},
	} {
		if got := stripetest.FormatAmount(tc.amount, tc.currency); got != tc.want {
			t.Fatalf("FormatAmount(%d, %s) = %s, want %s", tc.amount, tc.currency, got, tc.want)
		}
	}
}

// Amounts Stripe takes are created as sent: 5000 ISK is 500000, 1.230 KWD 1230, 500 JPY 500,
// 10.50 EUR 1050, and HUF takes two decimals for charges (its whole-unit rule is for payouts).
func TestAmountsStripeTakes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tc := range []struct {
		currency string
		amount   int64
	}{
		{"isk", 500000}, {"ugx", 500}, {"kwd", 1230}, {"bhd", 10}, {"jpy", 500}, {"mga", 7},
		{"eur", 1050}, {"huf", 1045}, {"twd", 80045},
	} {
		pi, err := b.sc.PaymentIntents.New(chargeIn("k-"+tc.currency, tc.currency, tc.amount))
		if err != nil || pi.Amount != tc.amount || string(pi.Currency) != tc.currency || pi.Status != stripe.PaymentIntentStatusSucceeded {
			t.Fatalf("%d %s: %v, %v", tc.amount, tc.currency, pi, err)
		}
	}
}

// An amount Stripe's rules for its currency refuse is Stripe's 400 invalid_request_error naming
// amount: a three-decimal amount whose last digit is not 0 (https://docs.stripe.com/currencies
// #three-decimal), an ISK or UGX amount that is not a multiple of 100
// (invalid_charge_amount_no_decimal_compatible,
// https://support.stripe.com/questions/deprecation-of-fractional-isk-charges-and-refunds). It is
// a validation failure: nothing is created, and nothing is saved for the key, so the same key
// with a valid amount then executes (https://docs.stripe.com/api/idempotent_requests).
func TestUnrepresentableAmountsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		currency    string
		bad, good   int64
		code        stripe.ErrorCode
		messageHint string
	}{
		{"kwd", 1235, 1230, stripe.ErrorCodeInvalidChargeAmount, "three-decimal"},
		{"bhd", 1, 10, stripe.ErrorCodeInvalidChargeAmount, "three-decimal"},
		{"jod", 99999, 99990, stripe.ErrorCodeInvalidChargeAmount, "three-decimal"},
		{"omr", 5, 10, stripe.ErrorCodeInvalidChargeAmount, "three-decimal"},
		{"TND", 1001, 1000, stripe.ErrorCodeInvalidChargeAmount, "three-decimal"},
		{"isk", 500050, 500000, "invalid_charge_amount_no_decimal_compatible", "Currency ISK has become effectively zero-decimal"},
		{"ugx", 550, 500, "invalid_charge_amount_no_decimal_compatible", "Currency UGX has become effectively zero-decimal"},
	} {
		t.Run(tc.currency, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			_, err := b.sc.PaymentIntents.New(chargeIn("k1", tc.currency, tc.bad))
			se := stripeErr(t, err)
			if se.HTTPStatusCode != http.StatusBadRequest || se.Type != stripe.ErrorTypeInvalidRequest ||
				se.Code != tc.code || se.Param != "amount" || !strings.Contains(se.Msg, tc.messageHint) {
				t.Fatalf("got %+v", se)
			}
			wantCounts(t, b.srv, "k1", stripetest.Counts{})
			if tot := b.srv.Totals(); len(tot) != 0 {
				t.Fatalf("something was created: %+v", tot)
			}
			pi, err := b.sc.PaymentIntents.New(chargeIn("k1", tc.currency, tc.good))
			if err != nil || pi.LastResponse.Header.Get("Idempotent-Replayed") != "" || pi.Amount != tc.good {
				t.Fatalf("the same key with %d after the refusal: %v, %v", tc.good, pi, err)
			}
			wantCounts(t, b.srv, "k1", stripetest.Counts{PaymentIntents: 1})
		})
	}
}

// Refunds follow the same rules ("Payment Intents, Refunds, and Disputes" for three-decimal
// currencies; fractional ISK refunds get the same answer as charges), before execution.
func TestUnrepresentableRefundsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tc := range []struct {
		currency   string
		charge     int64
		bad, good  int64
		wantedCode stripe.ErrorCode
	}{
		{"kwd", 1230, 615, 610, stripe.ErrorCodeInvalidChargeAmount},
		{"isk", 500000, 150, 100, "invalid_charge_amount_no_decimal_compatible"},
	} {
		pi, err := b.sc.PaymentIntents.New(chargeIn("pi-"+tc.currency, tc.currency, tc.charge))
		if err != nil {
			t.Fatal(err)
		}
		key := "re-" + tc.currency
		rp := &stripe.RefundParams{PaymentIntent: stripe.String(pi.ID), Amount: stripe.Int64(tc.bad)}
		rp.SetIdempotencyKey(key)
		_, err = b.sc.Refunds.New(rp)
		if se := stripeErr(t, err); se.HTTPStatusCode != http.StatusBadRequest || se.Type != stripe.ErrorTypeInvalidRequest ||
			se.Code != tc.wantedCode || se.Param != "amount" {
			t.Fatalf("refund of %d %s: %+v", tc.bad, tc.currency, se)
		}
		wantCounts(t, b.srv, key, stripetest.Counts{})
		rp.Amount = stripe.Int64(tc.good)
		re, err := b.sc.Refunds.New(rp)
		if err != nil || re.Amount != tc.good || re.LastResponse.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("refund of %d %s after the refusal: %v, %v", tc.good, tc.currency, re, err)
		}
		wantCounts(t, b.srv, key, stripetest.Counts{Refunds: 1})
		if got := b.srv.Totals()[tc.currency].Refunded; got != tc.good {
			t.Fatalf("%s refunded %d, want %d", tc.currency, got, tc.good)
		}
	}
}
