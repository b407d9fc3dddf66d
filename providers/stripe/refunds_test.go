package stripe_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

const refundListEndpoint = "GET /v1/refunds"

func (b lookupBundle) refund(t *testing.T, chargeID, key string, amount money.Money) provider.RefundResult {
	t.Helper()
	return must(b.p.Refund(context.Background(), provider.RefundRequest{Key: key,
		ProviderKey: provider.DeriveKey(key, "refund", 0, paystripe.MaxProviderKeyLen), ChargeID: chargeID, Amount: amount}))(t)
}

// onlyCharge fails t unless the Lookup found exactly one charge, id, and
// returns it.
func onlyCharge(t *testing.T, got provider.LookupResult, id string) provider.ChargeResult {
	t.Helper()
	if len(got.Charges) != 1 || got.Charges[0].ProviderID != id {
		t.Fatalf("lookup found %+v, want only %s", got.Charges, id)
	}
	return got.Charges[0]
}

// A charge with two succeeded partial refunds and one that failed later:
// Lookup WithRefunds reports the succeeded sum from one refund list;
// without WithRefunds it sends no refund list and knows nothing.
func TestLookupWithRefunds(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	ch := b.charge(t, "order-r")
	other := b.charge(t, "order-other") // its refund must not count
	b.refund(t, ch.ProviderID, "order-r-refund-1", eur("5.00"))
	b.refund(t, ch.ProviderID, "order-r-refund-2", eur("3.00"))
	failed := b.refund(t, ch.ProviderID, "order-r-refund-3", eur("2.50"))
	b.refund(t, other.ProviderID, "order-other-refund", eur("7.00"))
	if err := b.srv.FailRefund(failed.ProviderID); err != nil {
		t.Fatal(err)
	}
	b.requests.Take()
	window := provider.LookupRequest{Key: "order-r", From: t0, To: t0}

	with := window
	with.WithRefunds = true
	got := onlyCharge(t, b.lookup(t, with), ch.ProviderID)
	if !got.RefundsKnown || !got.Refunded.Equal(eur("8.00")) || !got.Amount.Equal(eur("20.00")) {
		t.Fatalf("with refunds: %+v, want 8.00 EUR refunded and known", got)
	}
	if n := b.requests.calls(refundListEndpoint); n != 1 {
		t.Fatalf("%d refund lists, want 1", n)
	}
	// The fake agrees: 10.50 was refunded, 2.50 of it failed.
	if c := b.srv.CountsByMetadata(paystripe.MetadataKey, "order-r-refund-3"); c.Refunds != 1 {
		t.Fatalf("the failed refund is not at the fake: %+v", c)
	}

	got = onlyCharge(t, b.lookup(t, window), ch.ProviderID)
	if got.RefundsKnown || got.Refunded != (money.Money{}) {
		t.Fatalf("without WithRefunds: %+v, want nothing known", got)
	}
	if n := b.requests.calls(refundListEndpoint); n != 0 {
		t.Fatalf("%d refund lists without WithRefunds, want 0", n)
	}

	// Search finds the charge as well, and its refunds are the same.
	search := provider.LookupRequest{Key: "order-r", WithRefunds: true}
	res := b.lookup(t, search)
	if got := onlyCharge(t, res, ch.ProviderID); res.Consistent || !got.RefundsKnown || !got.Refunded.Equal(eur("8.00")) {
		t.Fatalf("search with refunds: %+v", res)
	}
	if n := b.requests.calls(refundListEndpoint); n != 1 {
		t.Fatalf("%d refund lists after search, want 1", n)
	}
}

// A charge without refunds, and a declined one: zero Money of the charge's
// currency, known.
func TestLookupWithRefundsNone(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	ch := b.charge(t, "order-n")
	req := chargeReq("order-d", stripetest.PaymentMethodDeclined)
	declined, err := b.p.Charge(context.Background(), req)
	errAs[*provider.DeclineError](t, err)
	b.requests.Take()

	if declined.ProviderID == "" || declined.Status != provider.ChargeFailed {
		t.Fatalf("declined charge: %+v", declined)
	}
	for key, c := range map[string]provider.ChargeResult{"order-n": ch, "order-d": declined} {
		got := onlyCharge(t, b.lookup(t, provider.LookupRequest{Key: key, From: t0, WithRefunds: true}), c.ProviderID)
		if !got.RefundsKnown || !got.Refunded.Equal(eur("0.00")) || got.Refunded.Currency() != money.EUR {
			t.Fatalf("%s: %+v, want 0.00 EUR refunded and known", key, got)
		}
	}
	if n := b.requests.calls(refundListEndpoint); n != 2 {
		t.Fatalf("%d refund lists, want 2", n)
	}
}

// More refunds than a page: the adapter follows the list to its end.
func TestLookupWithRefundsPaginates(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	ch := b.charge(t, "order-p")
	const n = 101 // one more than a page
	for i := range n {
		b.refund(t, ch.ProviderID, fmt.Sprintf("order-p-refund-%d", i), eur("0.10"))
	}
	b.requests.Take()
	got := onlyCharge(t, b.lookup(t, provider.LookupRequest{Key: "order-p", From: t0, WithRefunds: true}), ch.ProviderID)
	if !got.RefundsKnown || !got.Refunded.Equal(eur("10.10")) {
		t.Fatalf("%+v, want 10.10 EUR refunded", got)
	}
	if lists := b.requests.calls(refundListEndpoint); lists != 2 {
		t.Fatalf("%d refund list pages, want 2", lists)
	}
}

// A failing refund list fails the lookup (a read: safe to retry).
func TestLookupWithRefundsFailure(t *testing.T) {
	t.Parallel()
	b := setupLookup(t, 0, 0)
	b.charge(t, "order-f")
	b.srv.Inject(stripetest.Fault{Kind: stripetest.FailBefore, Path: "/v1/refunds"})
	_, err := b.p.Lookup(context.Background(), provider.LookupRequest{Key: "order-f", From: t0, WithRefunds: true})
	if ue := errAs[*provider.UnknownOutcomeError](t, err); ue.Status != 500 || !idempotency.SafeToRetry(err) {
		t.Fatalf("%+v", ue)
	}
}
