package stripe_test

import (
	"errors"
	"testing"

	"github.com/payonce/payonce/payments/provider"
	paystripe "github.com/payonce/payonce/providers/stripe"
)

// An operator's proof names the object this adapter records: a
// PaymentIntent's id for a charge, a Refund's for a refund; a Charge's id,
// another kind's or a typo is refused naming ProviderID.
func TestCheckID(t *testing.T) {
	t.Parallel()
	p, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_x"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		step, id string
		ok       bool
	}{
		{provider.StepCharge, "pi_3MtwBwLkdIwHu7ix28a3tqPa", true},
		{provider.StepCharge, "pi_fake00000000000001", true},
		{provider.StepCharge, "ch_3MtwBwLkdIwHu7ix28a3tqPa", false},
		{provider.StepCharge, "re_3MtwBwLkdIwHu7ix28a3tqPa", false},
		{provider.StepCharge, "pi_", false},
		{provider.StepCharge, "pi_3Mtw Bw", false},
		{provider.StepCharge, "not a stripe id", false},
		{provider.StepRefund, "re_1Nispe2eZvKYlo2Cd31jOCgZ", true},
		{provider.StepRefund, "pyr_1Nispe2eZvKYlo2Cd31jOCgZ", true},
		{provider.StepRefund, "pi_3MtwBwLkdIwHu7ix28a3tqPa", false},
	} {
		err := p.CheckID(tc.step, tc.id)
		var ir *provider.InvalidRequestError
		switch {
		case tc.ok && err != nil:
			t.Errorf("CheckID(%s, %q) = %v, want nil", tc.step, tc.id, err)
		case !tc.ok && (!errors.As(err, &ir) || ir.Param != "ProviderID"):
			t.Errorf("CheckID(%s, %q) = %v, want a refusal naming ProviderID", tc.step, tc.id, err)
		}
	}
}
