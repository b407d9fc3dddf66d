package adyen_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/payonce/payonce/payments"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
)

// Capture modes, technical cancels and reversals, through the adapter against the fake over
// real HTTP. The fake models Adyen's documented behaviour (see package adyentest); these tests
// would have caught an adapter and a fake that both assumed a technical cancel voids any
// Authorised payment.

func manual(c *adyen.Config) { c.CaptureMode = adyen.CaptureManual }

// setupManual is a fake and an adapter both under manual capture.
func setupManual(t *testing.T) bundle {
	t.Helper()
	return setupWith(t, &adyentest.Config{CaptureMode: adyentest.CaptureManual}, manual)
}

// onlyEvent waits for the fake's deliveries so far and returns the one event of type typ under
// reference, failing t otherwise.
func onlyEvent(t *testing.T, b bundle, reference, typ string) provider.WebhookEvent {
	t.Helper()
	b.wait(t)
	var found []provider.WebhookEvent
	for _, ev := range b.inbox.byReference(reference) {
		if ev.Type == typ {
			found = append(found, ev)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s events under %q, want 1: %+v", len(found), typ, reference, b.inbox.byReference(reference))
	}
	return found[0]
}

// authorisedOnly charges key under manual capture and stops it once the payment is authorised,
// before the adapter sends the capture (its Progress fails). It returns the request, Progress
// still set, and the payment.
func authorisedOnly(t *testing.T, b bundle, key string) (provider.ChargeRequest, provider.ChargeResult) {
	t.Helper()
	req := chargeReq(key, adyentest.PaymentMethodVisa)
	req.Progress = func(context.Context, string) error { return errors.New("stop before the capture") }
	res, _ := b.p.Charge(context.Background(), req)
	if res.ProviderID == "" {
		t.Fatalf("charge %+v: no payment authorised", res)
	}
	return req, res
}

func wantTotal(t *testing.T, b bundle, want adyentest.Total) {
	t.Helper()
	if got := b.srv.Totals()["EUR"]; got != want {
		t.Fatalf("the fake's EUR totals %+v, want %+v", got, want)
	}
}

// Automatic capture (Adyen's default): a payment whose response AND AUTHORISATION
// notification were lost is captured. The technical cancel by reference cannot undo it: its
// TECHNICAL_CANCEL fails (provider.EventCancelFailed, with Adyen's reason and the payment it
// found), the money stays captured, and Lookup does not call the charge failed. The reversal
// of the payment it named refunds it (CANCEL_OR_REFUND, action refund).
func TestTechnicalCancelOfACapturedPaymentFails(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	req := chargeReq("order-captured", adyentest.PaymentMethodVisa)

	b.inbox.drop.Store(true) // the AUTHORISATION never reaches payonce
	b.srv.Inject(adyentest.Fault{Kind: adyentest.ResetAfter, Path: "/payments"})
	if _, err := b.p.Charge(ctx, req); !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v, want an unknown outcome", err)
	}
	b.wait(t)
	b.inbox.drop.Store(false)
	wantTotal(t, b, adyentest.Total{Authorised: 2000, Captured: 2000, Net: 2000, NetAmount: "20.00"})
	if got := b.lookup(t, req); len(got.Charges) != 0 || got.Consistent {
		t.Fatalf("lookup without the AUTHORISATION: %+v, want nothing known, not consistent", got)
	}

	b.void(t, req, "")
	failed := onlyEvent(t, b, req.ProviderKey, "TECHNICAL_CANCEL")
	if failed.Kind != provider.EventCancelFailed || failed.DeclineCode != adyentest.ReasonCancelCaptured || len(failed.ChargeID) != 16 {
		t.Fatalf("technical cancel of a captured payment: %+v, want cancel_failed naming the payment with Adyen's reason", failed)
	}
	// The fake did not pretend: the payment is still captured.
	wantTotal(t, b, adyentest.Total{Authorised: 2000, Captured: 2000, Net: 2000, NetAmount: "20.00"})
	if c := b.srv.Counts(req.ProviderKey); c != (adyentest.Counts{Payments: 1, Cancels: 1}) {
		t.Fatalf("counts %+v", c)
	}
	if got := b.lookup(t, req); len(got.Charges) != 0 {
		t.Fatalf("lookup after a failed technical cancel: %+v, want no charge claimed either way", got)
	}

	// The failed cancel named the payment: a reversal refunds it, whatever its capture state.
	b.void(t, req, failed.ChargeID)
	b.void(t, req, failed.ChargeID) // a retry replays: one reversal
	refunded := onlyEvent(t, b, req.ProviderKey, "CANCEL_OR_REFUND")
	if refunded.Kind != provider.EventCancelled || refunded.DeclineCode != "refunded" || refunded.ChargeID != failed.ChargeID ||
		!refunded.Amount.Equal(req.Amount) {
		t.Fatalf("reversal of a captured payment: %+v, want cancelled (refunded) naming %s", refunded, failed.ChargeID)
	}
	wantTotal(t, b, adyentest.Total{Authorised: 2000, Captured: 2000, Refunded: 2000, NetAmount: "0.00"})
	if c := b.srv.Counts(req.ProviderKey); c.Reversals != 1 {
		t.Fatalf("counts %+v, want one reversal", c)
	}
	got := b.lookup(t, req)
	if len(got.Charges) != 0 {
		t.Fatalf("lookup: %+v", got)
	}
}

// Manual capture: an authorisation whose response was lost holds the funds without moving
// them; the technical cancel by reference voids it (provider.EventCancelled) and Lookup reads
// the charge failed.
func TestTechnicalCancelOfAnUncapturedAuthorisation(t *testing.T) {
	t.Parallel()
	b := setupManual(t)
	ctx := context.Background()
	req := chargeReq("order-held", adyentest.PaymentMethodVisa)
	b.srv.Inject(adyentest.Fault{Kind: adyentest.ResetAfter, Path: "/payments"})
	if _, err := b.p.Charge(ctx, req); !payments.OutcomeUnknown(err) {
		t.Fatalf("lost response: %v", err)
	}
	wantTotal(t, b, adyentest.Total{Authorised: 2000, NetAmount: "0.00"})
	got := b.lookup(t, req)
	if len(got.Charges) != 1 || got.Charges[0].Status != provider.ChargePending {
		t.Fatalf("lookup of an uncaptured authorisation: %+v, want pending (nothing moved yet)", got)
	}
	psp := got.Charges[0].ProviderID

	b.void(t, req, "")
	cancelled := onlyEvent(t, b, req.ProviderKey, "TECHNICAL_CANCEL")
	if cancelled.Kind != provider.EventCancelled || cancelled.ChargeID != psp || cancelled.DeclineCode != "cancelled" {
		t.Fatalf("technical cancel: %+v", cancelled)
	}
	wantTotal(t, b, adyentest.Total{NetAmount: "0.00"})
	got = b.lookup(t, req)
	if len(got.Charges) != 1 || got.Charges[0].Status != provider.ChargeFailed || got.Charges[0].ProviderID != psp {
		t.Fatalf("lookup of a cancelled authorisation: %+v", got)
	}
	// A technical cancel of a reference nothing has fails too; it proves nothing.
	nothing := chargeReq("order-none", adyentest.PaymentMethodVisa) // never sent
	none := nothing.ProviderKey
	b.void(t, nothing, "")
	if ev := onlyEvent(t, b, none, "TECHNICAL_CANCEL"); ev.Kind != provider.EventCancelFailed || ev.ChargeID != "" ||
		ev.DeclineCode != adyentest.ReasonNoPayment {
		t.Fatalf("technical cancel of nothing: %+v", ev)
	}
}

// A reversal of an uncaptured authorisation cancels it (CANCEL_OR_REFUND, action cancel).
func TestReversalOfAnUncapturedAuthorisationCancels(t *testing.T) {
	t.Parallel()
	b := setupManual(t)
	ctx := context.Background()
	req := chargeReq("order-rev", adyentest.PaymentMethodVisa)
	var recorded string
	req.Progress = func(_ context.Context, id string) error {
		recorded = id
		return errors.New("database down")
	}
	res, err := b.p.Charge(ctx, req)
	if !payments.OutcomeUnknown(err) || res.ProviderID == "" || res.ProviderID != recorded {
		t.Fatalf("charge whose Progress failed: %+v %v, want an unknown outcome naming the payment", res, err)
	}
	if c := b.srv.Counts(req.ProviderKey); c != (adyentest.Counts{Payments: 1}) {
		t.Fatalf("counts %+v: the capture must not be sent when the payment could not be recorded", c)
	}
	b.void(t, req, recorded)
	ev := onlyEvent(t, b, req.ProviderKey, "CANCEL_OR_REFUND")
	if ev.Kind != provider.EventCancelled || ev.DeclineCode != "cancelled" || ev.ChargeID != recorded {
		t.Fatalf("reversal of an authorisation: %+v", ev)
	}
	wantTotal(t, b, adyentest.Total{NetAmount: "0.00"})
	// Nothing left to reverse: CANCEL_OR_REFUND success=false, a failed void with Adyen's reason.
	if _, err := b.p.Client().Reversal(ctx, recorded, "again", "again"); err != nil {
		t.Fatal(err)
	}
	again := onlyEvent(t, b, "again", "CANCEL_OR_REFUND")
	if again.Kind != provider.EventCancelFailed || again.DeclineCode == "" || again.ChargeID != recorded {
		t.Fatalf("second reversal: %+v", again)
	}
}

// Manual capture: Charge authorises, records the payment through Progress, then captures; the
// charge is pending until the CAPTURE notification. A capture whose response was lost is
// resumed from the recorded payment and replayed: one payment, one capture.
func TestManualCaptureFlow(t *testing.T) {
	t.Parallel()
	b := setupManual(t)
	ctx := context.Background()

	req := chargeReq("order-manual", adyentest.PaymentMethodVisa)
	var recorded []string
	req.Progress = func(_ context.Context, id string) error { recorded = append(recorded, id); return nil }
	res := must(b.p.Charge(ctx, req))(t)
	if res.Status != provider.ChargePending || len(res.ProviderID) != 16 || len(recorded) != 1 || recorded[0] != res.ProviderID {
		t.Fatalf("manual charge: %+v, recorded %v; want pending, recorded before the capture", res, recorded)
	}
	if c := b.srv.Counts(req.ProviderKey); c != (adyentest.Counts{Payments: 1, Captures: 1}) {
		t.Fatalf("counts %+v", c)
	}
	if ev := onlyEvent(t, b, req.ProviderKey, "AUTHORISATION"); ev.Kind != provider.EventChargePending {
		t.Fatalf("AUTHORISATION under manual capture: %+v, want charge_pending (no money moved)", ev)
	}
	capt := onlyEvent(t, b, req.ProviderKey, "CAPTURE")
	if capt.Kind != provider.EventCaptureSucceeded || capt.ChargeID != res.ProviderID || !capt.Amount.Equal(req.Amount) {
		t.Fatalf("CAPTURE: %+v", capt)
	}
	got := b.lookup(t, req)
	if len(got.Charges) != 1 || got.Charges[0].Status != provider.ChargeSucceeded {
		t.Fatalf("lookup after the CAPTURE: %+v", got)
	}

	// The capture's response is lost: the outcome is unknown, the payment recorded.
	lost := chargeReq("order-manual-lost", adyentest.PaymentMethodVisa)
	var known string
	lost.Progress = func(_ context.Context, id string) error { known = id; return nil }
	b.srv.Inject(adyentest.Fault{Kind: adyentest.ResetAfter, Path: "/payments/*/captures"})
	if _, err := b.p.Charge(ctx, lost); !payments.OutcomeUnknown(err) || known == "" {
		t.Fatalf("lost capture response: %v (recorded %q), want an unknown outcome after recording", err, known)
	}
	// The retry resumes from the recorded payment: no second /payments, the capture replayed.
	lost.ProviderID = known
	lost.Progress = func(context.Context, string) error { t.Error("Progress called on a resumed charge"); return nil }
	again := must(b.p.Charge(ctx, lost))(t)
	if again.Status != provider.ChargePending || again.ProviderID != known {
		t.Fatalf("resumed charge: %+v, want pending on %s", again, known)
	}
	if c := b.srv.Counts(lost.ProviderKey); c != (adyentest.Counts{Payments: 1, Captures: 1}) {
		t.Fatalf("counts %+v, want one payment and one capture", c)
	}
	if c := b.srv.CountsByIdempotencyKey(adyen.IdempotencyKey(lost.ProviderKey)); c.Payments != 1 {
		t.Fatalf("payments under the charge's key: %+v", c)
	}
	wantTotal(t, b, adyentest.Total{Authorised: 4000, Captured: 4000, Net: 4000, NetAmount: "40.00"})
	if ev := onlyEvent(t, b, lost.ProviderKey, "CAPTURE"); ev.Kind != provider.EventCaptureSucceeded || ev.ChargeID != known {
		t.Fatalf("CAPTURE: %+v", ev)
	}
}

// A capture Adyen refuses (CAPTURE success=false) leaves Lookup's charge pending: the
// authorisation stands and nothing moved, which is no proof the charge failed either.
func TestRefusedCaptureStaysPending(t *testing.T) {
	t.Parallel()
	b := setupManual(t)
	ctx := context.Background()
	req, res := authorisedOnly(t, b, "order-refused-capture")
	// Someone captured 1.00 by hand first: Adyen allows one capture, so the adapter's fails.
	if _, err := b.p.Client().Capture(ctx, res.ProviderID, adyen.ModificationRequest{Amount: adyen.Amount{Currency: "EUR", Value: 100},
		Reference: "by-hand"}, "by-hand"); err != nil {
		t.Fatal(err)
	}
	req.Progress, req.ProviderID = nil, res.ProviderID
	if again := must(b.p.Charge(ctx, req))(t); again.Status != provider.ChargePending {
		t.Fatalf("resumed charge: %+v", again)
	}
	if ev := onlyEvent(t, b, req.ProviderKey, "CAPTURE"); ev.Kind != provider.EventCaptureFailed || ev.DeclineCode == "" {
		t.Fatalf("CAPTURE: %+v", ev)
	}
	got := b.lookup(t, req)
	if len(got.Charges) != 1 || got.Charges[0].Status != provider.ChargePending {
		t.Fatalf("lookup after a refused capture: %+v, want pending", got)
	}
}

// Under automatic capture a refund works at once; under manual capture a refund of a payment
// not captured yet fails with Adyen's reason.
func TestRefundNeedsACapture(t *testing.T) {
	t.Parallel()
	b := setupManual(t)
	ctx := context.Background()
	_, res := authorisedOnly(t, b, "order-norefund")
	r := refundReq("order-norefund-r", res.ProviderID, eur("5.00"))
	must(b.p.Refund(ctx, r))(t)
	if ev := onlyEvent(t, b, r.ProviderKey, "REFUND"); ev.Kind != provider.EventRefundFailed || ev.DeclineCode != adyentest.ReasonRefundNotCaptured {
		t.Fatalf("refund of an uncaptured payment: %+v", ev)
	}
}

// signedItems returns a delivery of it signed with hexKey, keeping its additionalData.
func signedItems(t *testing.T, hexKey string, items ...adyentest.NotificationItem) []byte {
	t.Helper()
	n := adyentest.Notification{Live: "false"}
	for _, it := range items {
		ad := map[string]string{"hmacSignature": must(adyentest.Sign(it, hexKey))(t)}
		for k, v := range it.AdditionalData {
			ad[k] = v
		}
		it.AdditionalData = ad
		n.NotificationItems = append(n.NotificationItems, adyentest.NotificationEntry{NotificationRequestItem: it})
	}
	return must(json.Marshal(n))(t)
}

// The notification kinds that depend on the capture mode and on the reversal's action.
func TestWebhookCaptureModesAndReversals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	auto := verifier(t, newKey)
	man := must(adyen.New(&adyen.Config{APIKey: "k", MerchantAccount: merchant, ReturnURL: "https://r.example",
		HMACKeys: []string{newKey}, CaptureMode: adyen.CaptureManual}))(t)
	auth := adyentest.NotificationItem{Amount: adyentest.Amount{Currency: "EUR", Value: 2000}, EventCode: "AUTHORISATION",
		MerchantAccountCode: merchant, MerchantReference: "order_charge_0", PSPReference: "PSP_PAYMENT_0001", Success: "true"}
	for p, want := range map[*adyen.Provider]provider.EventKind{auto: provider.EventChargeSucceeded, man: provider.EventChargePending} {
		if ev := must(p.VerifyWebhook(ctx, nil, signedItems(t, newKey, auth)))(t)[0]; ev.Kind != want {
			t.Fatalf("AUTHORISATION success: %s, want %s", ev.Kind, want)
		}
	}
	auth.Success, auth.Reason = "false", "Refused"
	if ev := must(man.VerifyWebhook(ctx, nil, signedItems(t, newKey, auth)))(t)[0]; ev.Kind != provider.EventChargeFailed {
		t.Fatalf("AUTHORISATION failure under manual capture: %+v", ev)
	}

	rev := adyentest.NotificationItem{Amount: adyentest.Amount{Currency: "EUR", Value: 2000}, EventCode: "CANCEL_OR_REFUND",
		MerchantAccountCode: merchant, MerchantReference: "order_charge_0", OriginalReference: "PSP_PAYMENT_0001",
		PSPReference: "PSP_REVERSAL_001", Success: "true"}
	for action, decline := range map[string]string{"cancel": "cancelled", "refund": "refunded"} {
		it := rev
		it.AdditionalData = map[string]string{adyentest.ModificationAction: action}
		ev := must(auto.VerifyWebhook(ctx, nil, signedItems(t, newKey, it)))(t)[0]
		if ev.Kind != provider.EventCancelled || ev.DeclineCode != decline || ev.ChargeID != "PSP_PAYMENT_0001" || ev.ProviderID != "PSP_REVERSAL_001" {
			t.Fatalf("CANCEL_OR_REFUND %s: %+v", action, ev)
		}
	}
	rev.Success, rev.Reason = "false", "Payment already refunded"
	if ev := must(auto.VerifyWebhook(ctx, nil, signedItems(t, newKey, rev)))(t)[0]; ev.Kind != provider.EventCancelFailed ||
		ev.DeclineCode != "Payment already refunded" || ev.ChargeID != "PSP_PAYMENT_0001" {
		t.Fatalf("CANCEL_OR_REFUND failure: %+v", ev)
	}
}

// A capture delay (automatic capture, Adyen's account setting) leaves a window in which the
// technical cancel still works; after it, it fails.
func TestCaptureDelayWindow(t *testing.T) {
	t.Parallel()
	clock := adyentest.NewManualClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	b := setup(t, &adyentest.Config{Clock: clock.Now, CaptureDelay: 2 * time.Hour})
	ctx := context.Background()
	early := chargeReq("order-early", adyentest.PaymentMethodVisa)
	late := chargeReq("order-late", adyentest.PaymentMethodVisa)
	must(b.p.Charge(ctx, early))(t)
	must(b.p.Charge(ctx, late))(t)
	b.void(t, early, "")
	clock.Advance(2 * time.Hour)
	b.void(t, late, "")
	if ev := onlyEvent(t, b, early.ProviderKey, "TECHNICAL_CANCEL"); ev.Kind != provider.EventCancelled {
		t.Fatalf("cancel within the capture delay: %+v", ev)
	}
	if ev := onlyEvent(t, b, late.ProviderKey, "TECHNICAL_CANCEL"); ev.Kind != provider.EventCancelFailed {
		t.Fatalf("cancel after the capture delay: %+v", ev)
	}
	wantTotal(t, b, adyentest.Total{Authorised: 2000, Captured: 2000, Net: 2000, NetAmount: "20.00"})
}
