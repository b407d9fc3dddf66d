package adyen_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/payonce/payonce/idempotency"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/internal/testkit"
)

// sent returns the JSON bodies rec sent to the paths ending in suffix.
func sent(t *testing.T, rec *testkit.Recorder, suffix string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, s := range rec.All() {
		if strings.HasSuffix(s.Path, suffix) {
			out = append(out, s.JSON(t))
		}
	}
	return out
}

func field(body map[string]any, path string) any {
	var v any = body
	for _, seg := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[seg]
	}
	return v
}

// Every request the adapter makes carries what Adyen's API reference requires of it, and the
// fake, which refuses a request without a required field, accepts each one: a token payment
// (with shopperReference, shopperInteraction ContAuth and the recurringProcessingModel), its
// capture (manual capture), a refund, a reversal and a technical cancel.
func TestRequestsCarryWhatAdyenRequires(t *testing.T) {
	t.Parallel()
	for _, model := range []adyen.RecurringProcessingModel{"", adyen.RecurringUnscheduledCardOnFile} {
		t.Run("model "+string(model), func(t *testing.T) {
			t.Parallel()
			rec := &testkit.Recorder{}
			b := setupWith(t, &adyentest.Config{CaptureMode: adyentest.CaptureManual}, func(c *adyen.Config) {
				c.CaptureMode = adyen.CaptureManual
				c.RecurringProcessingModel = model
				c.HTTPClient = &http.Client{Timeout: testkit.Patience, Transport: rec}
			})
			ctx := context.Background()
			req := chargeReq("order-required", adyentest.PaymentMethodVisa)
			req.Shopper = "usr_7fQ9x"
			res, err := b.p.Charge(ctx, req)
			if err != nil || res.Status != provider.ChargePending {
				t.Fatalf("charge: %+v %v", res, err)
			}
			if _, err := b.p.Refund(ctx, provider.RefundRequest{Key: "refund-required", ProviderKey: "refund-required_refund_0",
				ChargeID: res.ProviderID, Amount: eur("5.00")}); err != nil {
				t.Fatalf("refund: %v", err)
			}
			if err := b.p.Void(ctx, provider.VoidRequest{ProviderKey: req.ProviderKey, ProviderID: res.ProviderID}); err != nil {
				t.Fatalf("reversal: %v", err)
			}
			if err := b.p.Void(ctx, provider.VoidRequest{ProviderKey: req.ProviderKey}); err != nil {
				t.Fatalf("technical cancel: %v", err)
			}

			want := map[string][]string{ // https://docs.adyen.com/api-explorer/Checkout/71/
				"/payments":  {"amount.currency", "amount.value", "merchantAccount", "paymentMethod.storedPaymentMethodId", "reference", "returnUrl"},
				"/captures":  {"amount.currency", "amount.value", "merchantAccount"},
				"/refunds":   {"amount.currency", "amount.value", "merchantAccount"},
				"/reversals": {"merchantAccount"},
				"/cancels":   {"merchantAccount", "paymentReference"},
			}
			for suffix, fields := range want {
				bodies := sent(t, rec, suffix)
				if len(bodies) != 1 {
					t.Fatalf("%d requests to %s, want 1", len(bodies), suffix)
				}
				for _, f := range fields {
					if v := field(bodies[0], f); v == nil || v == "" {
						t.Errorf("%s sent without %s: %v", suffix, f, bodies[0])
					}
				}
			}
			// A token payment: its shopper, a returning one, and the kind of stored-card payment
			// (https://docs.adyen.com/online-payments/tokenization/make-token-payments).
			wantModel := string(model)
			if wantModel == "" {
				wantModel = "CardOnFile" // the default: the shopper pays, from the checkout
			}
			pay := sent(t, rec, "/payments")[0]
			if pay["shopperReference"] != "usr_7fQ9x" || pay["shopperInteraction"] != "ContAuth" || pay["recurringProcessingModel"] != wantModel {
				t.Fatalf("payment sent %v, want shopperReference usr_7fQ9x, ContAuth, %s", pay, wantModel)
			}
		})
	}
}

// Shopper is Adyen's shopperReference: required, 3 to 256 characters. Anything else is refused
// before sending, naming the field and the fix.
func TestShopperRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, shopper := range []string{"", "u1", strings.Repeat("u", 257)} {
		req := chargeReq("order-shopper", adyentest.PaymentMethodVisa)
		req.Shopper = shopper
		for name, err := range map[string]error{"ValidateCharge": b.p.ValidateCharge(req), "Charge": func() error {
			_, err := b.p.Charge(context.Background(), req)
			return err
		}()} {
			ie := errAs[*provider.InvalidRequestError](t, err)
			if ie.Param != "Shopper" || !strings.Contains(ie.Message, "ChargeParams.Shopper") || idempotency.SafeToRetry(err) {
				t.Fatalf("%s with Shopper %q: %+v", name, shopper, ie)
			}
		}
		wantPayments(t, b, chargeReq("order-shopper", "").ProviderKey, 0)
	}
	for _, shopper := range []string{"abc", strings.Repeat("ü", 256)} {
		req := chargeReq("order-shopper-ok", adyentest.PaymentMethodVisa)
		req.Shopper = shopper
		if err := b.p.ValidateCharge(req); err != nil {
			t.Fatalf("Shopper of %d characters: %v", len([]rune(shopper)), err)
		}
	}
}

func TestRecurringProcessingModelConfig(t *testing.T) {
	t.Parallel()
	_, err := adyen.New(&adyen.Config{APIKey: "k", MerchantAccount: "m", ReturnURL: "https://r.example", RecurringProcessingModel: "Monthly"})
	var ce *adyen.ConfigError
	if !errors.As(err, &ce) || ce.Field != "RecurringProcessingModel" || !strings.Contains(err.Error(), "CardOnFile") {
		t.Fatalf("%v", err)
	}
}
