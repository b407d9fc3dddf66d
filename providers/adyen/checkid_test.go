package adyen_test

import (
	"errors"
	"testing"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen"
)

// An operator's proof names a pspReference: 16 letters and digits, for
// charges and refunds alike; anything else is refused naming ProviderID.
func TestCheckID(t *testing.T) {
	t.Parallel()
	p, err := adyen.New(&adyen.Config{APIKey: "k", MerchantAccount: "m", ReturnURL: "https://r.example"})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{provider.StepCharge, provider.StepRefund} {
		for _, id := range []string{"8815658961765250", "QFQTPCQ8HXSKGK82", "FK00000000000012"} {
			if err := p.CheckID(step, id); err != nil {
				t.Errorf("CheckID(%s, %q) = %v, want nil", step, id, err)
			}
		}
		for _, id := range []string{"", "881565896176525", "88156589617652500", "8815-6589617652", "pi_3Qx0fake0000000", "8815658961765250 "} {
			var ir *provider.InvalidRequestError
			if err := p.CheckID(step, id); !errors.As(err, &ir) || ir.Param != "ProviderID" {
				t.Errorf("CheckID(%s, %q) = %v, want a refusal naming ProviderID", step, id, err)
			}
		}
	}
}
