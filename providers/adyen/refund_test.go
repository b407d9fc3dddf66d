package adyen_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/internal/testkit"
)

// lookupOf is the RefundLookupRequest the reconciler sends for r, without a refund id.
var lookupOf = testkit.LookupOf

// onlyRefund fails t unless got holds exactly one refund, id (any when id is ""), in status st
// for amount, and is not Consistent (notifications may still come).
func onlyRefund(t *testing.T, got provider.RefundLookupResult, id string, st provider.RefundStatus, amount money.Money) provider.RefundResult {
	t.Helper()
	if got.Consistent || len(got.Refunds) != 1 {
		t.Fatalf("found %+v, want one refund, not consistent", got)
	}
	r := got.Refunds[0]
	if (id != "" && r.ProviderID != id) || r.ProviderID == "" || r.Status != st || !r.Amount.Equal(amount) || r.Replayed {
		t.Fatalf("found %+v, want %q %s for %s", r, id, st, amount)
	}
	return r
}

// A refund whose response was lost is found by its REFUND notification, succeeded, with its
// amount; another refund of the same payment is not returned; a refund never sent is none, and
// that is not consistent.
func TestLookupRefundAfterLostResponse(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	ch := must(b.p.Charge(ctx, chargeReq("order-lrf", adyentest.PaymentMethodVisa)))(t)
	otherReq := refundReq("order-lrf-other", ch.ProviderID, eur("3.00"))
	other := must(b.p.Refund(ctx, otherReq))(t)

	lost := refundReq("order-lrf-lost", ch.ProviderID, eur("5.00"))
	b.srv.Inject(adyentest.Fault{Kind: adyentest.ResetAfter, Path: "/payments/*/refunds"})
	if _, err := b.p.Refund(ctx, lost); !payments.OutcomeUnknown(err) {
		t.Fatalf("lost refund: %v, want an unknown outcome", err)
	}
	if c := b.srv.Counts(lost.ProviderKey); c.Refunds != 1 {
		t.Fatalf("the fake holds %+v for the lost refund's reference, want 1 refund", c)
	}

	got := onlyRefund(t, must(b.p.LookupRefund(ctx, lookupOf(lost)))(t), "", provider.RefundSucceeded, eur("5.00"))
	if got.ProviderID == other.ProviderID || got.ProviderID == ch.ProviderID {
		t.Fatalf("found %s: the other refund %s or the payment", got.ProviderID, other.ProviderID)
	}
	byID := lookupOf(lost)
	byID.ProviderID = got.ProviderID
	onlyRefund(t, must(b.p.LookupRefund(ctx, byID))(t), got.ProviderID, provider.RefundSucceeded, eur("5.00"))
	onlyRefund(t, must(b.p.LookupRefund(ctx, lookupOf(otherReq)))(t), other.ProviderID, provider.RefundSucceeded, eur("3.00"))

	// Filters that do not match: another refund id, another payment.
	for _, lr := range []provider.RefundLookupRequest{
		{ProviderKey: lost.ProviderKey, ProviderID: other.ProviderID},
		{ProviderKey: lost.ProviderKey, ChargeID: "PSPOTHERPAYMENT0"},
	} {
		if none := must(b.p.LookupRefund(ctx, lr))(t); len(none.Refunds) != 0 || none.Consistent {
			t.Fatalf("%+v: %+v, want none, not consistent", lr, none)
		}
	}

	never := refundReq("order-lrf-never", ch.ProviderID, eur("1.00"))
	none := must(b.p.LookupRefund(ctx, lookupOf(never)))(t)
	if none.Consistent || none.Refunds == nil || len(none.Refunds) != 0 {
		t.Fatalf("never sent: %+v, want no refunds, not consistent", none)
	}
	if c := b.srv.Counts(never.ProviderKey); c != (adyentest.Counts{}) {
		t.Fatalf("the fake holds %+v for a refund never sent", c)
	}
	if tot := b.srv.Totals()["EUR"]; tot.Refunded != 800 {
		t.Fatalf("the fake's totals %+v, want 8.00 refunded", tot)
	}
}

// A refund over what is left is acknowledged, then refused by its REFUND notification (success
// false): failed, with the amount asked.
func TestLookupRefundFailed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	ch := must(b.p.Charge(ctx, chargeReq("order-lrf-failed", adyentest.PaymentMethodVisa)))(t)
	req := refundReq("order-lrf-failed", ch.ProviderID, eur("25.00"))
	re := must(b.p.Refund(ctx, req))(t)
	if re.Status != provider.RefundPending {
		t.Fatalf("refund %+v, want pending", re)
	}
	onlyRefund(t, must(b.p.LookupRefund(ctx, lookupOf(req)))(t), re.ProviderID, provider.RefundFailed, eur("25.00"))
	if tot := b.srv.Totals()["EUR"]; tot.Refunded != 0 {
		t.Fatalf("the fake's totals %+v, want nothing refunded", tot)
	}
}

// The mapping over what a source may hold: duplicates, a REFUND_FAILED after a success (without
// an amount), events of other codes, references and payments.
func TestLookupRefundEvents(t *testing.T) {
	t.Parallel()
	const ref, payment = "order-ev_refund_0", "PSPPAYMENT000001"
	refund := func(psp, code string, ok bool, amount string) provider.WebhookEvent {
		ev := provider.WebhookEvent{Type: code, Reference: ref, ProviderID: psp, ChargeID: payment, Kind: provider.EventRefundFailed}
		if ok {
			ev.Kind = provider.EventRefundSucceeded
		}
		if amount != "" {
			ev.Amount = eur(amount)
		}
		return ev
	}
	events := []provider.WebhookEvent{
		refund("PSPREFUNDOK00001", "REFUND", true, "2.00"),
		refund("PSPREFUNDOK00001", "REFUND", true, "2.00"), // a duplicate delivery
		refund("PSPREFUNDLATE001", "REFUND", true, "3.00"),
		refund("PSPREFUNDLATE001", "REFUND_FAILED", false, ""), // failed after success
		refund("PSPREFUNDLATE001", "REFUND", true, "3.00"),     // a late duplicate of the success
		refund("PSPREFUNDNOK0001", "REFUND_FAILED", false, ""), // a failure first, amount unknown
		refund("PSPREFUNDNOK0001", "REFUND", true, "4.00"),
		{Type: "AUTHORISATION", Kind: provider.EventChargeSucceeded, Reference: ref, ProviderID: "PSPAUTH000000001", Amount: eur("9.00")},
		{Type: "CAPTURE", Kind: provider.EventCaptureSucceeded, Reference: ref, ProviderID: "PSPCAPTURE000001", ChargeID: payment, Amount: eur("9.00")},
		{Type: "REFUND", Kind: provider.EventRefundSucceeded, Reference: "another", ProviderID: "PSPANOTHER000001", ChargeID: payment, Amount: eur("1.00")},
		{Type: "REFUND", Kind: provider.EventRefundSucceeded, Reference: ref, ProviderID: "PSPOTHERPAY00001", ChargeID: "PSPPAYMENT000002", Amount: eur("1.00")},
	}
	var asked []string
	p := must(adyen.New(&adyen.Config{APIKey: "k", MerchantAccount: "m", ReturnURL: "https://r.example",
		Notifications: func(_ context.Context, reference string) ([]provider.WebhookEvent, error) {
			asked = append(asked, reference)
			if reference == "broken" {
				return nil, errors.New("inbox down")
			}
			return events, nil
		}}))(t)
	ctx := context.Background()

	got := must(p.LookupRefund(ctx, provider.RefundLookupRequest{ProviderKey: ref, ChargeID: payment}))(t)
	want := []provider.RefundResult{
		{ProviderID: "PSPREFUNDOK00001", Status: provider.RefundSucceeded, Amount: eur("2.00")},
		{ProviderID: "PSPREFUNDLATE001", Status: provider.RefundFailed, Amount: eur("3.00")},
		{ProviderID: "PSPREFUNDNOK0001", Status: provider.RefundFailed, Amount: eur("4.00")},
	}
	if got.Consistent || len(got.Refunds) != len(want) {
		t.Fatalf("found %+v, want %+v, not consistent", got, want)
	}
	for i, w := range want {
		if r := got.Refunds[i]; r.ProviderID != w.ProviderID || r.Status != w.Status || !r.Amount.Equal(w.Amount) {
			t.Fatalf("refund %d: %+v, want %+v", i, r, w)
		}
	}
	// Without ChargeID the other payment's refund under the same reference counts too.
	if got := must(p.LookupRefund(ctx, provider.RefundLookupRequest{ProviderKey: ref}))(t); len(got.Refunds) != 4 {
		t.Fatalf("found %+v, want 4 refunds", got)
	}
	if strings.Join(asked, ",") != ref+","+ref {
		t.Fatalf("the source was asked for %q", asked)
	}

	// The error names the reference by its hash: it holds the key.
	_, err := p.LookupRefund(ctx, provider.RefundLookupRequest{ProviderKey: "broken"})
	if err == nil || !strings.Contains(err.Error(), "inbox down") || strings.Contains(err.Error(), "broken") ||
		!strings.Contains(err.Error(), idempotency.ShortHash("broken")) {
		t.Fatalf("a failing source: %v", err)
	}
	for _, pk := range []string{"", strings.Repeat("r", 81)} {
		_, err := p.LookupRefund(ctx, provider.RefundLookupRequest{Key: "k", ProviderKey: pk})
		if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != "ProviderKey" {
			t.Fatalf("ProviderKey %q: %+v", pk, ie)
		}
	}
	if len(asked) != 3 {
		t.Fatalf("the source was asked %d times, want 3 (not for refused requests)", len(asked))
	}

	bare := must(adyen.New(&adyen.Config{APIKey: "k", MerchantAccount: "m", ReturnURL: "https://r.example"}))(t)
	if _, err := bare.LookupRefund(ctx, provider.RefundLookupRequest{ProviderKey: ref}); !errors.Is(err, adyen.ErrNoNotificationSource) {
		t.Fatalf("without a source: %v", err)
	}
}

func TestRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	charge := must(b.p.Charge(ctx, chargeReq("order-r", adyentest.PaymentMethodVisa)))(t)

	r1 := refundReq("order-r", charge.ProviderID, eur("15.00"))
	res := must(b.p.Refund(ctx, r1))(t)
	if res.Status != provider.RefundPending || res.ProviderID == "" || res.ProviderID == charge.ProviderID || !res.Amount.Equal(r1.Amount) || res.Replayed {
		t.Fatalf("refund: %+v", res)
	}
	again := must(b.p.Refund(ctx, r1))(t)
	if again.ProviderID != res.ProviderID {
		t.Fatalf("replayed refund: %+v, first %+v", again, res)
	}
	// More than what is left: received, then REFUND success=false.
	r2 := refundReq("order-r2", charge.ProviderID, eur("10.00"))
	res2 := must(b.p.Refund(ctx, r2))(t)
	if res2.Status != provider.RefundPending {
		t.Fatalf("%+v", res2)
	}
	if c := b.srv.Counts(r1.ProviderKey); c.Refunds != 1 {
		t.Fatalf("refunds for %s: %+v", r1.ProviderKey, c)
	}
	b.wait(t)
	ok := b.inbox.byReference(r1.ProviderKey)
	if len(ok) != 1 || ok[0].Kind != provider.EventRefundSucceeded || ok[0].ChargeID != charge.ProviderID ||
		ok[0].ProviderID != res.ProviderID || !ok[0].Amount.Equal(eur("15.00")) || ok[0].ID != res.ProviderID+":REFUND:true" {
		t.Fatalf("REFUND events: %+v", ok)
	}
	bad := b.inbox.byReference(r2.ProviderKey)
	if len(bad) != 1 || bad[0].Kind != provider.EventRefundFailed || bad[0].DeclineCode == "" || bad[0].ChargeID != charge.ProviderID {
		t.Fatalf("REFUND failure events: %+v", bad)
	}
	if tot := b.srv.Totals()["EUR"]; tot.Authorised != 2000 || tot.Refunded != 1500 || tot.Net != 500 {
		t.Fatalf("totals %+v", tot)
	}
	_, err := b.p.Refund(ctx, provider.RefundRequest{Key: "x", ProviderKey: "x_refund_0", ChargeID: "NOSUCHPSP0000000", Amount: eur("1.00")})
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Code != "unknown_psp_reference" {
		t.Fatalf("%+v", ie)
	}
}
