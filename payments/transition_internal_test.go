package payments

import (
	"errors"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

// The decisions from a provider's answer, a proof, a settled intent or a
// webhook event to a transition, without a database.

var (
	chargeSubject = subject{scope: "cus", key: "cus_charge_k", kind: KindCharge, provider: "stripe", amount: money.MustParse("10.00", money.EUR)}
	refundSubject = subject{scope: "cus", key: "cus_refund_r", kind: KindRefund, provider: "stripe", amount: money.MustParse("4.00", money.EUR),
		chargeKey: "cus_charge_k"}
)

type want struct {
	status      IntentStatus
	record      idempotency.Status
	effect      effect
	providerID  string
	declineCode string
	answer      string // "result", "decline", "invalid"
}

func check(t *testing.T, name string, got transition, w want) {
	t.Helper()
	answer := "result"
	switch {
	case got.answer.Decline != nil:
		answer = "decline"
	case got.answer.Invalid != nil:
		answer = "invalid"
	case got.answer.Result == nil:
		answer = ""
	}
	if got.status != w.status || got.record != w.record || got.effect != w.effect || got.providerID != w.providerID ||
		got.declineCode != w.declineCode || answer != w.answer {
		t.Errorf("%s: got %s/%v/effect %d/%q/%q/%s, want %+v", name, got.status, got.record, got.effect, got.providerID,
			got.declineCode, answer, w)
	}
	if got.answer.Result != nil && (got.answer.Result.Status != got.status || got.answer.Result.Amount == "") {
		t.Errorf("%s: the answer %+v does not say the transition's status and amount", name, *got.answer.Result)
	}
}

func TestDecideCharge(t *testing.T) {
	decline := &provider.DeclineError{Provider: "stripe", Code: "card_declined", DeclineCode: "insufficient_funds"}
	invalid := &provider.InvalidRequestError{Provider: "stripe", Code: "parameter_invalid"}
	for _, tc := range []struct {
		name string
		res  provider.ChargeResult
		err  error
		want want
	}{
		{"succeeded", provider.ChargeResult{ProviderID: "pi_1", Status: provider.ChargeSucceeded}, nil,
			want{IntentSucceeded, idempotency.StatusCompleted, postCharge, "pi_1", "", "result"}},
		{"requires action", provider.ChargeResult{ProviderID: "pi_1", Status: provider.ChargeRequiresAction}, nil,
			want{IntentRequiresAction, idempotency.StatusCompleted, moveNothing, "pi_1", "", "result"}},
		{"pending", provider.ChargeResult{ProviderID: "pi_1", Status: provider.ChargePending}, nil,
			want{IntentPending, idempotency.StatusCompleted, moveNothing, "pi_1", "", "result"}},
		{"failed object", provider.ChargeResult{ProviderID: "pi_1", Status: provider.ChargeFailed}, nil,
			want{IntentFailed, idempotency.StatusCompleted, moveNothing, "pi_1", "", "result"}},
		{"declined", provider.ChargeResult{}, decline, want{IntentDeclined, idempotency.StatusFailed, moveNothing, "", "insufficient_funds", "decline"}},
		{"refused", provider.ChargeResult{}, invalid, want{IntentFailed, idempotency.StatusFailed, moveNothing, "", "", "invalid"}},
	} {
		got, err := decideCharge(chargeSubject, false, tc.res, tc.err)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		check(t, tc.name, got, tc.want)
	}
	for _, err := range []error{&provider.UnknownOutcomeError{Provider: "stripe"}, &provider.NotSentError{Provider: "stripe"},
		&provider.InProgressError{Provider: "stripe"}, &provider.KeyMismatchError{Provider: "stripe"}, &provider.CredentialsError{Provider: "stripe", Status: 401}} {
		if _, got := decideCharge(chargeSubject, false, provider.ChargeResult{}, err); got != err {
			t.Errorf("%T proves nothing: got %v, want the error back", err, got)
		}
	}
}

func TestDecideRefund(t *testing.T) {
	decline := &provider.DeclineError{Provider: "stripe", Code: "declined", DeclineCode: "expired"}
	for _, tc := range []struct {
		name string
		res  provider.RefundResult
		err  error
		want want
	}{
		{"succeeded", provider.RefundResult{ProviderID: "re_1", Status: provider.RefundSucceeded}, nil,
			want{IntentSucceeded, idempotency.StatusCompleted, postRefund, "re_1", "", "result"}},
		{"pending", provider.RefundResult{ProviderID: "re_1", Status: provider.RefundPending}, nil,
			want{IntentPending, idempotency.StatusCompleted, moveNothing, "re_1", "", "result"}},
		{"failed object releases the reservation", provider.RefundResult{ProviderID: "re_1", Status: provider.RefundFailed}, nil,
			want{IntentFailed, idempotency.StatusCompleted, releaseReservation, "re_1", "", "result"}},
		{"declined releases the reservation", provider.RefundResult{}, decline,
			want{IntentDeclined, idempotency.StatusFailed, releaseReservation, "", "expired", "decline"}},
		{"refused releases the reservation", provider.RefundResult{}, &provider.InvalidRequestError{Provider: "stripe"},
			want{IntentFailed, idempotency.StatusFailed, releaseReservation, "", "", "invalid"}},
	} {
		got, err := decideRefund(refundSubject, false, tc.res, tc.err)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		check(t, tc.name, got, tc.want)
	}
	unknown := &provider.UnknownOutcomeError{Provider: "stripe"}
	if _, err := decideRefund(refundSubject, false, provider.RefundResult{}, unknown); !errors.Is(err, provider.ErrOutcomeUnknown) {
		t.Errorf("an unknown refund outcome: %v", err)
	}
}

// A resumed attempt (a retry re-sending the references of an attempt
// whose outcome is unknown) is settled by the provider's answer to its
// references (a success, a decline, a refusal the provider replayed),
// never by a refusal of this send alone: the intent stays open and the
// caller learns the outcome is unknown. Refused credentials never settle
// anything, first attempt or not.
func TestDecideResumed(t *testing.T) {
	fresh := &provider.InvalidRequestError{Provider: "stripe", Code: "resource_missing", Message: "No such PaymentMethod"}
	replayed := &provider.InvalidRequestError{Provider: "stripe", Code: "parameter_invalid", Replayed: true}
	decline := &provider.DeclineError{Provider: "stripe", Code: "card_declined", DeclineCode: "insufficient_funds"}
	creds := &provider.CredentialsError{Provider: "stripe", Status: 401, Message: "Invalid API Key provided"}

	for _, s := range []subject{chargeSubject, refundSubject} {
		decideOf := func(resumed bool, err error) (transition, error) {
			if s.kind == KindRefund {
				return decideRefund(s, resumed, provider.RefundResult{}, err)
			}
			return decideCharge(s, resumed, provider.ChargeResult{}, err)
		}
		name := string(s.kind)
		if _, err := decideOf(true, fresh); !OutcomeUnknown(err) || errors.Is(err, provider.ErrInvalidRequest) || !idempotency.SafeToRetry(err) {
			t.Errorf("%s: a resumed attempt refused afresh: %v, want an unknown outcome, never an invalid request", name, err)
		} else if rr := (*RefusedRetryError)(nil); !errors.As(err, &rr) || rr.Refusal != fresh {
			t.Errorf("%s: %v does not carry the refusal", name, err)
		}
		if got, err := decideOf(true, replayed); err != nil || got.status != IntentFailed || got.record != idempotency.StatusFailed {
			t.Errorf("%s: a resumed attempt whose refusal the provider replayed: %+v %v, want FAILED", name, got, err)
		}
		if got, err := decideOf(true, decline); err != nil || got.status != IntentDeclined {
			t.Errorf("%s: a resumed attempt declined: %+v %v, want DECLINED", name, got, err)
		}
		if got, err := decideOf(false, fresh); err != nil || got.status != IntentFailed {
			t.Errorf("%s: a first attempt refused: %+v %v, want FAILED", name, got, err)
		}
		for _, resumed := range []bool{false, true} {
			if _, err := decideOf(resumed, creds); err != creds || idempotency.SafeToRetry(err) || !errors.Is(err, provider.ErrCredentials) {
				t.Errorf("%s (resumed %v): refused credentials: %v, want the *CredentialsError back", name, resumed, err)
			}
		}
	}
}

// An intent settled by a webhook or the reconciler while no call held its
// key: the retry records that state; only a success moves money (again,
// idempotently), a settled failure released its reservation already.
func TestDecideSettled(t *testing.T) {
	check(t, "charge succeeded", decideSettled(chargeSubject, IntentSucceeded, "pi_1", ""),
		want{IntentSucceeded, idempotency.StatusCompleted, postCharge, "pi_1", "", "result"})
	check(t, "refund succeeded", decideSettled(refundSubject, IntentSucceeded, "re_1", ""),
		want{IntentSucceeded, idempotency.StatusCompleted, postRefund, "re_1", "", "result"})
	check(t, "refund declined", decideSettled(refundSubject, IntentDeclined, "", "expired"),
		want{IntentDeclined, idempotency.StatusFailed, moveNothing, "", "expired", "decline"})
	check(t, "charge failed", decideSettled(chargeSubject, IntentFailed, "", "cancelled"),
		want{IntentFailed, idempotency.StatusFailed, moveNothing, "", "cancelled", "invalid"})
}

func TestDecideProof(t *testing.T) {
	check(t, "succeeded", decideProof(chargeSubject, Proof{Status: IntentSucceeded, ProviderID: "pi_1"}),
		want{IntentSucceeded, idempotency.StatusCompleted, postCharge, "pi_1", "", "result"})
	check(t, "requires action", decideProof(chargeSubject, Proof{Status: IntentRequiresAction, ProviderID: "pi_1"}),
		want{IntentRequiresAction, idempotency.StatusCompleted, moveNothing, "pi_1", "", "result"})
	check(t, "declined", decideProof(chargeSubject, Proof{Status: IntentDeclined, ProviderID: "pi_1", DeclineCode: "declined"}),
		want{IntentDeclined, idempotency.StatusFailed, moveNothing, "pi_1", "declined", "decline"})
	check(t, "refund failed with proof", decideProof(refundSubject, Proof{Status: IntentFailed, Reason: "none found"}),
		want{IntentFailed, idempotency.StatusFailed, releaseReservation, "", "", "invalid"})
	if got := decideProof(chargeSubject, Proof{Status: IntentFailed, Reason: "none found"}); got.answer.Invalid.Code != "payment_void" {
		t.Errorf("a proven void answers %+v", got.answer.Invalid)
	}
}

func TestDecideEvent(t *testing.T) {
	pi := "pi_1"
	open := intentRow{key: "cus_charge_k", user: "cus", kind: "CHARGE", status: "UNKNOWN", amount: "10.00", currency: "EUR"}
	settled := open
	settled.status, settled.providerID = "SUCCEEDED", &pi
	declinedRow := open
	declinedRow.status = "DECLINED"
	ten := money.MustParse("10.00", money.EUR)
	for _, tc := range []struct {
		name    string
		in      intentRow
		ev      provider.WebhookEvent
		outcome string
		status  IntentStatus // "" when nothing moves
		effect  effect
	}{
		{"success applies", open, provider.WebhookEvent{Kind: provider.EventChargeSucceeded, ProviderID: pi, Amount: ten}, EventApplied, IntentSucceeded, postCharge},
		{"success confirms", settled, provider.WebhookEvent{Kind: provider.EventChargeSucceeded, ProviderID: pi}, EventConfirmed, "", 0},
		{"second object", settled, provider.WebhookEvent{Kind: provider.EventChargeSucceeded, ProviderID: "pi_2"}, EventSecondObject, "", 0},
		{"another amount", open, provider.WebhookEvent{Kind: provider.EventChargeSucceeded, Amount: money.MustParse("11.00", money.EUR)}, EventConflict, "", 0},
		{"success after a decline", declinedRow, provider.WebhookEvent{Kind: provider.EventChargeSucceeded}, EventConflict, "", 0},
		{"failure applies", open, provider.WebhookEvent{Kind: provider.EventChargeFailed, DeclineCode: "x"}, EventApplied, IntentDeclined, moveNothing},
		{"cancel fails the intent", open, provider.WebhookEvent{Kind: provider.EventCancelled}, EventApplied, IntentFailed, moveNothing},
		{"late failure is stale", settled, provider.WebhookEvent{Kind: provider.EventChargeFailed}, EventStale, "", 0},
		{"cancel after success conflicts", settled, provider.WebhookEvent{Kind: provider.EventCancelled}, EventConflict, "", 0},
		{"pending confirms an open intent", open, provider.WebhookEvent{Kind: provider.EventChargePending}, EventConfirmed, "", 0},
		{"pending after success is stale", settled, provider.WebhookEvent{Kind: provider.EventChargePending}, EventStale, "", 0},
		{"capture failed after success conflicts", settled, provider.WebhookEvent{Kind: provider.EventCaptureFailed}, EventConflict, "", 0},
	} {
		s := chargeSubject
		outcome, _, tr := decideEvent(s, tc.in, tc.ev)
		if outcome != tc.outcome || (tr == nil) != (tc.status == "") || (tr != nil && (tr.status != tc.status || tr.effect != tc.effect)) {
			t.Errorf("%s: %s %+v, want %s %s effect %d", tc.name, outcome, tr, tc.outcome, tc.status, tc.effect)
		}
	}
	refund := intentRow{key: "cus_refund_r", user: "cus", kind: "REFUND", status: "PENDING", amount: "4.00", currency: "EUR"}
	if outcome, _, tr := decideEvent(refundSubject, refund, provider.WebhookEvent{Kind: provider.EventRefundFailed}); outcome != EventApplied ||
		tr == nil || tr.status != IntentFailed || tr.effect != releaseReservation {
		t.Errorf("a failed refund: %s %+v", outcome, tr)
	}
	if outcome, _, tr := decideEvent(refundSubject, refund, provider.WebhookEvent{Kind: provider.EventRefundSucceeded}); outcome != EventApplied ||
		tr == nil || tr.effect != postRefund {
		t.Errorf("a succeeded refund: %s %+v", outcome, tr)
	}
}

// A lookup's finding proves what the synchronous answer of the same
// status would, and a pending object proves nothing yet.
func TestProofOfLookups(t *testing.T) {
	for _, tc := range []struct {
		name   string
		proof  proofOK
		ok     bool
		status IntentStatus
	}{
		{"charge succeeded", first(ProofOfCharge(provider.ChargeResult{ProviderID: "pi_1", Status: provider.ChargeSucceeded})), true, IntentSucceeded},
		{"charge failed", first(ProofOfCharge(provider.ChargeResult{ProviderID: "pi_1", Status: provider.ChargeFailed})), true, IntentDeclined},
		{"charge waits", first(ProofOfCharge(provider.ChargeResult{ProviderID: "pi_1", Status: provider.ChargeRequiresAction})), true, IntentRequiresAction},
		{"charge pending", first(ProofOfCharge(provider.ChargeResult{ProviderID: "pi_1", Status: provider.ChargePending})), false, ""},
		{"refund succeeded", first(ProofOfRefund(provider.RefundResult{ProviderID: "re_1", Status: provider.RefundSucceeded})), true, IntentSucceeded},
		{"refund failed", first(ProofOfRefund(provider.RefundResult{ProviderID: "re_1", Status: provider.RefundFailed})), true, IntentFailed},
		{"refund pending", first(ProofOfRefund(provider.RefundResult{ProviderID: "re_1", Status: provider.RefundPending})), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.proof.ok != tc.ok || tc.proof.Status != tc.status {
				t.Fatalf("proof %+v, want ok=%v status %q", tc.proof, tc.ok, tc.status)
			}
			if !tc.ok {
				return
			}
			if tc.proof.ProviderID == "" || tc.proof.Reason == "" {
				t.Fatalf("proof %+v names no provider object or no reason", tc.proof)
			}
			// The proof moves an open intent as the same answer would.
			got := decideProof(chargeSubject, tc.proof.Proof)
			if got.status != tc.status || got.providerID != tc.proof.ProviderID {
				t.Fatalf("decideProof: %+v", got)
			}
		})
	}
}

type proofOK struct {
	Proof
	ok bool
}

func first(p Proof, ok bool) proofOK { return proofOK{p, ok} }
