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
	return must(b.p.Refund(context.Background(), refundReq(key, chargeID, amount)))(t)
}

// lookupRefunded looks lr up WithRefunds and fails t unless it finds only the charge id, its
// refunds known to sum to refunded, after lists requests for refund lists; it returns what the
// lookup found.
func (b lookupBundle) lookupRefunded(t *testing.T, lr provider.LookupRequest, id string, refunded money.Money, lists int) provider.LookupResult {
	t.Helper()
	lr.WithRefunds = true
	res := b.lookup(t, lr)
	if got := onlyCharge(t, res, id); !got.RefundsKnown || !got.Refunded.Equal(refunded) || got.Refunded.Currency() != refunded.Currency() {
		t.Fatalf("lookup %+v: %+v, want %s refunded and known", lr, got, refunded)
	}
	if n := b.requests.calls(refundListEndpoint); n != lists {
		t.Fatalf("lookup %+v: %d refund lists, want %d", lr, n, lists)
	}
	return res
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

	if got := b.lookupRefunded(t, window, ch.ProviderID, eur("8.00"), 1).Charges[0]; !got.Amount.Equal(eur("20.00")) {
		t.Fatalf("with refunds: %+v, want the charge's 20.00 EUR", got)
	}
	// The fake agrees: 10.50 was refunded, 2.50 of it failed.
	if c := b.srv.CountsByMetadata(paystripe.MetadataKey, "order-r-refund-3"); c.Refunds != 1 {
		t.Fatalf("the failed refund is not at the fake: %+v", c)
	}

	got := onlyCharge(t, b.lookup(t, window), ch.ProviderID)
	if got.RefundsKnown || got.Refunded != (money.Money{}) {
		t.Fatalf("without WithRefunds: %+v, want nothing known", got)
	}
	if n := b.requests.calls(refundListEndpoint); n != 0 {
		t.Fatalf("%d refund lists without WithRefunds, want 0", n)
	}

	// Search finds the charge as well, and its refunds are the same.
	if res := b.lookupRefunded(t, provider.LookupRequest{Key: "order-r"}, ch.ProviderID, eur("8.00"), 1); res.Consistent {
		t.Fatalf("search with refunds: %+v, want not consistent", res)
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
		b.lookupRefunded(t, provider.LookupRequest{Key: key, From: t0}, c.ProviderID, eur("0.00"), 1)
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
	b.lookupRefunded(t, provider.LookupRequest{Key: "order-p", From: t0}, ch.ProviderID, eur("10.10"), 2) // two pages
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
