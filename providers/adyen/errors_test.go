package adyen_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/payonce/payonce/idempotency"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen/adyentest"
)

// Adyen's refusals of payonce's credentials (401 errorCode 000, 403
// errorCode 010 "Not allowed" or 901 "Invalid Merchant Account") are
// configuration errors, never a refusal of the payment; Adyen marks no
// replayed error, so no other refusal claims to be one.
func TestRefusalsOfCredentials(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, code string
		status     int
		body       string
	}{
		{"not allowed", "010", 403, `{"status":403,"errorCode":"010","message":"Not allowed","errorType":"security"}`},
		{"merchant account", "901", 403, `{"status":403,"errorCode":"901","message":"Invalid Merchant Account","errorType":"security"}`},
		{"unauthorized", "000", 401, `{"status":401,"errorCode":"000","message":"HTTP Status Response - Unauthorized","errorType":"security"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := stub(t, tc.status, nil, tc.body).Charge(context.Background(), chargeReq("order-creds", "pm_x"))
			ce := errAs[*provider.CredentialsError](t, err)
			if ce.Code != tc.code || ce.Status != tc.status || errors.Is(err, provider.ErrInvalidRequest) || idempotency.SafeToRetry(err) ||
				!strings.Contains(err.Error(), "check the API key") {
				t.Fatalf("%v, want a refusal of our credentials", err)
			}
		})
	}
	_, err := stub(t, 404, nil, `{"status":404,"errorCode":"000","message":"Not found","errorType":"validation"}`).
		Charge(context.Background(), chargeReq("order-404", "pm_x"))
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Replayed {
		t.Fatalf("%+v: Adyen marks no replay", ie)
	}
}

// The fake's real 401: the key was rolled at Adyen, the adapter still
// sends the old one.
func TestRolledAPIKey(t *testing.T) {
	t.Parallel()
	rolled := setup(t, &adyentest.Config{APIKey: "AQE_the_new_key"})
	_, err := rolled.p.Charge(context.Background(), chargeReq("order-rolled", adyentest.PaymentMethodVisa))
	if ce := errAs[*provider.CredentialsError](t, err); ce.Status != 401 {
		t.Fatalf("%+v", ce)
	}
	wantPayments(t, rolled, chargeReq("order-rolled", "").ProviderKey, 0)
}

// An Idempotency-Key reused with another body: the error's text holds
// neither payonce's key nor the reference derived from it.
func TestKeyMismatchHoldsNoKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	req := chargeReq("usr_secret_charge_order-7f3a9c", adyentest.PaymentMethodVisa)
	must(b.p.Charge(ctx, req))(t)
	req.Amount = eur("21.00")
	_, err := b.p.Charge(ctx, req)
	km := errAs[*provider.KeyMismatchError](t, err)
	for _, text := range []string{err.Error(), km.Message} {
		if strings.Contains(text, req.Key) || strings.Contains(text, req.ProviderKey) || strings.Contains(text, "order-7f3a9c") {
			t.Fatalf("the error holds the key: %q", text)
		}
	}
}
