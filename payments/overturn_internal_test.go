package payments

import (
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

// A provider overturning a final state, decided without a database: what
// names the intent's own object is booked (and supersedes the key's
// record), another object or another amount changes nothing, and what
// cannot be matched goes to review.
func TestDecideOverturningEvents(t *testing.T) {
	pi, re := "pi_1", "re_1"
	declined := intentRow{key: "cus_charge_k", user: "cus", kind: "CHARGE", status: "DECLINED", amount: "10.00", currency: "EUR", providerID: &pi}
	declinedNoObject := declined
	declinedNoObject.providerID = nil
	failed := declined
	failed.status = "FAILED"
	chargeKey := "cus_charge_k"
	refunded := intentRow{key: "cus_refund_r", user: "cus", kind: "REFUND", status: "SUCCEEDED", amount: "4.00", currency: "EUR",
		providerID: &re, chargeKey: &chargeKey}
	pendingRefund := refunded
	pendingRefund.status = "PENDING"
	ten, four := money.MustParse("10.00", money.EUR), money.MustParse("4.00", money.EUR)
	for _, tc := range []struct {
		name    string
		s       subject
		in      intentRow
		ev      provider.WebhookEvent
		outcome string
		want    *want // nil: no transition
	}{
		{"success of the declined object books the charge", chargeSubject, declined,
			provider.WebhookEvent{Kind: provider.EventChargeSucceeded, ProviderID: pi, Amount: ten}, EventSucceededAfterDecline,
			&want{IntentSucceeded, idempotency.StatusCompleted, postCharge, pi, "", "result"}},
		{"a capture of the declined payment books the charge", chargeSubject, declined,
			provider.WebhookEvent{Kind: provider.EventCaptureSucceeded, ProviderID: "psp_capture", ChargeID: pi}, EventSucceededAfterDecline,
			&want{IntentSucceeded, idempotency.StatusCompleted, postCharge, pi, "", "result"}},
		{"success of another object is a second object", chargeSubject, declined,
			provider.WebhookEvent{Kind: provider.EventChargeSucceeded, ProviderID: "pi_2"}, EventSecondObject, nil},
		{"success of another amount conflicts", chargeSubject, declined,
			provider.WebhookEvent{Kind: provider.EventChargeSucceeded, ProviderID: pi, Amount: money.MustParse("9.00", money.EUR)}, EventConflict, nil},
		{"success for a decline that named no object goes to review", chargeSubject, declinedNoObject,
			provider.WebhookEvent{Kind: provider.EventChargeSucceeded, ProviderID: pi}, EventNeedsReview, nil},
		{"success naming no object conflicts", chargeSubject, declined,
			provider.WebhookEvent{Kind: provider.EventChargeSucceeded}, EventConflict, nil},
		{"success after a failure (a void, an absence proven) still conflicts", chargeSubject, failed,
			provider.WebhookEvent{Kind: provider.EventChargeSucceeded, ProviderID: pi}, EventConflict, nil},
		{"the decline's notification names the declined object", chargeSubject, declinedNoObject,
			provider.WebhookEvent{Kind: provider.EventChargeFailed, ProviderID: pi}, EventConfirmed,
			&want{IntentDeclined, "", moveNothing, pi, "", ""}},
		{"a failed refund of the intent's refund is reversed", refundSubject, refunded,
			provider.WebhookEvent{Kind: provider.EventRefundReversed, ProviderID: re, Amount: four, DeclineCode: "expired_or_canceled_card"}, EventRefundFailedAfterSuccess,
			&want{IntentFailed, idempotency.StatusCompleted, reverseRefund, re, "expired_or_canceled_card", "result"}},
		{"a failed refund without a reason still reverses", refundSubject, refunded,
			provider.WebhookEvent{Kind: provider.EventRefundReversed, ProviderID: re}, EventRefundFailedAfterSuccess,
			&want{IntentFailed, idempotency.StatusCompleted, reverseRefund, re, "refund_failed", "result"}},
		{"a refusal after the success (out of order) conflicts", refundSubject, refunded,
			provider.WebhookEvent{Kind: provider.EventRefundFailed, ProviderID: re}, EventConflict, nil},
		{"a reversal of an open refund fails it", refundSubject, pendingRefund,
			provider.WebhookEvent{Kind: provider.EventRefundReversed, ProviderID: re}, EventApplied,
			&want{IntentFailed, "", releaseReservation, "", "", ""}},
		{"a failure of another refund conflicts", refundSubject, refunded,
			provider.WebhookEvent{Kind: provider.EventRefundReversed, ProviderID: "re_2"}, EventConflict, nil},
		{"a failure of another amount conflicts", refundSubject, refunded,
			provider.WebhookEvent{Kind: provider.EventRefundReversed, ProviderID: re, Amount: money.MustParse("3.00", money.EUR)}, EventConflict, nil},
	} {
		outcome, detail, tr := decideEvent(tc.s, tc.in, tc.ev)
		if outcome != tc.outcome || (tr == nil) != (tc.want == nil) {
			t.Errorf("%s: %s %q %+v, want %s (transition %v)", tc.name, outcome, detail, tr, tc.outcome, tc.want != nil)
			continue
		}
		if tr != nil {
			check(t, tc.name, *tr, *tc.want)
			if overturns := outcome != EventConfirmed && outcome != EventApplied; tr.supersede != overturns {
				t.Errorf("%s: supersede %v, want %v", tc.name, tr.supersede, overturns)
			}
		}
		if outcome != EventConfirmed && outcome != EventApplied && detail == "" {
			t.Errorf("%s: %s without a detail", tc.name, outcome)
		}
	}
}
