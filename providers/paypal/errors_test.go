package paypal_test

import (
	"strings"
	"testing"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// The order read on a resumed charge carries another attempt's custom_id:
// the KeyMismatchError's text holds neither reference.
func TestKeyMismatchHoldsNoKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	first := chargeReq("usr_secret_charge_order-7f3a9c", paypaltest.PaymentMethodVisa)
	res := must(b.p.Charge(ctxT(t), first))(t)
	other := chargeReq("usr_secret_charge_order-9b2d41", paypaltest.PaymentMethodVisa)
	other.ProviderID = res.ProviderID
	_, err := b.p.Charge(ctxT(t), other)
	km := errAs[*provider.KeyMismatchError](t, err)
	for _, text := range []string{err.Error(), km.Message} {
		for _, k := range []string{first.Key, first.ProviderKey, other.Key, other.ProviderKey, "order-7f3a9c", "order-9b2d41"} {
			if strings.Contains(text, k) {
				t.Fatalf("the error's text holds %q: %s", k, text)
			}
		}
	}
}
