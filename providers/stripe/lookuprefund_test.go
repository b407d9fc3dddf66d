package stripe_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/testkit"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// lookupOf is the RefundLookupRequest the reconciler sends for r, without a refund id.
var lookupOf = testkit.LookupOf

// onlyRefund fails t unless got is consistent and holds exactly one refund, id, in status st
// for amount.
var onlyRefund = testkit.OnlyRefund

// A refund whose response was lost is found by its key among the charge's
// refunds, and read by its id; another refund of the same charge is not
// returned, and a refund never sent is none, consistently.
func TestLookupRefundAfterLostResponse(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	ctx := context.Background()
	ch := b.charge(t, "order-lr")
	other := b.refund(t, ch.ProviderID, "order-lr-refund-other", eur("3.00"))

	lost := refundReq("order-lr-refund", ch.ProviderID, eur("5.00"))
	b.srv.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/refunds"})
	_, err := b.p.Refund(ctx, lost)
	if !payments.OutcomeUnknown(err) {
		t.Fatalf("lost refund: %v, want an unknown outcome", err)
	}
	wantCount(t, b.bundle, lost.ProviderKey, 0, 1)
	b.requests.Take()

	got := must(b.p.LookupRefund(ctx, lookupOf(lost)))(t)
	if !got.Consistent || len(got.Refunds) != 1 || got.Refunds[0].ProviderID == other.ProviderID {
		t.Fatalf("lookup %+v, want only the lost refund (not %s)", got, other.ProviderID)
	}
	id := got.Refunds[0].ProviderID
	onlyRefund(t, got, id, provider.RefundSucceeded, eur("5.00"))
	if n := b.requests.calls(refundListEndpoint); n != 1 {
		t.Fatalf("%d refund lists, want 1", n)
	}
	// The retry the reconciler might have sent instead names the same refund.
	if re := must(b.p.Refund(ctx, lost))(t); re.ProviderID != id || !re.Replayed {
		t.Fatalf("retry %+v, want a replay of %s", re, id)
	}

	byID := lookupOf(lost)
	byID.ProviderID = id
	onlyRefund(t, must(b.p.LookupRefund(ctx, byID))(t), id, provider.RefundSucceeded, eur("5.00"))
	byID.ChargeID = ""
	onlyRefund(t, must(b.p.LookupRefund(ctx, byID))(t), id, provider.RefundSucceeded, eur("5.00"))

	// The other refund is found by its own key only.
	onlyRefund(t, must(b.p.LookupRefund(ctx, lookupOf(refundReq("order-lr-refund-other", ch.ProviderID, eur("3.00")))))(t),
		other.ProviderID, provider.RefundSucceeded, eur("3.00"))

	never := refundReq("order-lr-refund-never", ch.ProviderID, eur("1.00"))
	none := must(b.p.LookupRefund(ctx, lookupOf(never)))(t)
	if !none.Consistent || len(none.Refunds) != 0 || none.Refunds == nil {
		t.Fatalf("never sent: %+v, want no refunds, consistent", none)
	}
	wantCount(t, b.bundle, never.ProviderKey, 0, 0)
	if c := b.srv.CountsByMetadata(paystripe.MetadataKey, lost.Key); c.Refunds != 1 {
		t.Fatalf("the fake holds %+v for the lost refund's key, want 1 refund", c)
	}
}

// A refund that failed after it was created (a closed card) is found
// failed, by list and by id.
func TestLookupRefundFailed(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	ctx := context.Background()
	ch := b.charge(t, "order-lf")
	req := refundReq("order-lf-refund", ch.ProviderID, eur("7.00"))
	re := b.refund(t, ch.ProviderID, req.Key, req.Amount)
	onlyRefund(t, must(b.p.LookupRefund(ctx, lookupOf(req)))(t), re.ProviderID, provider.RefundSucceeded, eur("7.00"))

	if err := b.srv.FailRefund(re.ProviderID); err != nil {
		t.Fatal(err)
	}
	onlyRefund(t, must(b.p.LookupRefund(ctx, lookupOf(req)))(t), re.ProviderID, provider.RefundFailed, eur("7.00"))
	byID := lookupOf(req)
	byID.ProviderID = re.ProviderID
	onlyRefund(t, must(b.p.LookupRefund(ctx, byID))(t), re.ProviderID, provider.RefundFailed, eur("7.00"))
}

// The charge's refunds are listed to their end: the one looked for is on
// the second page.
func TestLookupRefundPaginates(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	ch := b.charge(t, "order-lp")
	first := b.refund(t, ch.ProviderID, "order-lp-refund-first", eur("0.20"))
	for i := range 100 { // a full page of newer refunds
		b.refund(t, ch.ProviderID, fmt.Sprintf("order-lp-refund-%d", i), eur("0.10"))
	}
	b.requests.Take()
	got := must(b.p.LookupRefund(context.Background(), lookupOf(refundReq("order-lp-refund-first", ch.ProviderID, eur("0.20")))))(t)
	onlyRefund(t, got, first.ProviderID, provider.RefundSucceeded, eur("0.20"))
	if n := b.requests.calls(refundListEndpoint); n != 2 {
		t.Fatalf("%d refund list pages, want 2", n)
	}
}

// Bad requests are refused before sending, naming the field; a refund id
// recorded for another key or charge, or unknown to Stripe, is refused;
// a failing read is a retryable unknown outcome.
func TestLookupRefundRefused(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	ctx := context.Background()
	ch := b.charge(t, "order-lx")
	other := b.charge(t, "order-lx-other")
	re := b.refund(t, ch.ProviderID, "order-lx-refund", eur("2.00"))
	b.requests.Take()

	for _, tc := range []struct {
		name, param string
		req         provider.RefundLookupRequest
	}{
		{"no ChargeID", "ChargeID", provider.RefundLookupRequest{Key: "order-lx-refund", ProviderKey: "pk"}},
		{"no Key", "Key", provider.RefundLookupRequest{ChargeID: ch.ProviderID, ProviderID: re.ProviderID}},
		{"another key", "ProviderID", provider.RefundLookupRequest{Key: "order-lx-refund-2", ProviderID: re.ProviderID}},
		{"another charge", "ProviderID", provider.RefundLookupRequest{Key: "order-lx-refund", ProviderID: re.ProviderID, ChargeID: other.ProviderID}},
		{"unknown id", "id", provider.RefundLookupRequest{Key: "order-lx-refund", ProviderID: "re_unknown"}},
	} {
		_, err := b.p.LookupRefund(ctx, tc.req)
		if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != tc.param || idempotency.SafeToRetry(err) {
			t.Fatalf("%s: %+v, want Param %s", tc.name, ie, tc.param)
		}
	}
	if n := b.requests.calls(refundListEndpoint); n != 0 {
		t.Fatalf("%d refund lists for refused requests, want 0", n)
	}

	b.srv.Inject(stripetest.Fault{Kind: stripetest.FailBefore, Method: "GET", Path: "/v1/refunds"})
	_, err := b.p.LookupRefund(ctx, provider.RefundLookupRequest{Key: "order-lx-refund", ChargeID: ch.ProviderID})
	if ue := errAs[*provider.UnknownOutcomeError](t, err); ue.Status != 500 || !idempotency.SafeToRetry(err) {
		t.Fatalf("%+v", ue)
	}
}
