package payments

import (
	"strings"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments/provider"
)

// A KeyMismatchError's text never holds what its Message quotes (keys,
// references, custom_ids, as providers and adapters quote them): each
// quoted text becomes its ShortHash, so two mismatches can still be told
// apart.
func TestKeyMismatchTextHidesQuotedKeys(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		keys []string
		want string
	}{
		{"Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than 'usr_7fQ9x_charge_a1b2c3_charge_0' if you meant to execute a different request.",
			[]string{"usr_7fQ9x_charge_a1b2c3"}, "'#" + idempotency.ShortHash("usr_7fQ9x_charge_a1b2c3_charge_0") + "'"},
		{`order O-1 carries custom_id "usr_a_charge_k1_charge_0", not this ProviderKey "usr_a_charge_k2_charge_0"`,
			[]string{"usr_a_charge_k1", "usr_a_charge_k2"}, `order O-1 carries custom_id "#`},
		{`unclosed "usr_b_charge_k3_charge_0 and the rest`, []string{"usr_b_charge_k3"}, `unclosed "…`},
		{"nothing quoted, '' empty", nil, "nothing quoted, '' empty"},
	} {
		text := (&provider.KeyMismatchError{Provider: "stripe", Message: tc.msg}).Error()
		for _, k := range tc.keys {
			if strings.Contains(text, k) {
				t.Errorf("%q holds %q", text, k)
			}
		}
		if !strings.Contains(text, tc.want) {
			t.Errorf("%q, want it to hold %q", text, tc.want)
		}
	}
}
