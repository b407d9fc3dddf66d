package paypal_test

import (
	"errors"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// lagged is a fake whose Transaction Search lags the transactions by PayPal's documented
// maximum, 3 hours.
func lagged(t *testing.T) bundle {
	return setup(t, &paypaltest.Config{SearchLag: paypal.SearchLag})
}

// Past the create's 6-hour window, without an order id, Lookup searches Transaction Search for
// the ProviderKey: it finds the charge, reads its order, and the answer is consistent once the
// searched period ended more than the 3-hour lag ago.
func TestLookupPastTheWindowFindsTheCharge(t *testing.T) {
	t.Parallel()
	b := lagged(t)
	req := chargeReq("search-found", paypaltest.PaymentMethodVisa)
	ch := must(b.p.Charge(ctxT(t), req))(t)
	must(b.p.Refund(ctxT(t), refundReq("search-found-r", ch.ProviderID, eur("5.00"))))(t)

	b.clock.Advance(7 * time.Hour)
	creates := b.sent.count("POST", "/v2/checkout/orders")
	lr := provider.LookupRequest{Key: req.Key, ProviderKey: req.ProviderKey, From: t0.Add(-10 * time.Minute), To: t0.Add(5 * time.Minute), WithRefunds: true}
	got := must(b.p.Lookup(ctxT(t), lr))(t)
	if len(got.Charges) != 1 || !got.Consistent {
		t.Fatalf("%+v, want the charge, consistent", got)
	}
	c := got.Charges[0]
	if c.ProviderID != ch.ProviderID || c.Status != provider.ChargeSucceeded || !c.Amount.Equal(req.Amount) ||
		!c.RefundsKnown || !c.Refunded.Equal(eur("5.00")) {
		t.Fatalf("charge %+v, want order %s succeeded with 5.00 EUR refunded", c, ch.ProviderID)
	}
	// Nothing was re-sent: a replay of the create's request id would have charged again.
	if n := b.sent.count("POST", "/v2/checkout/orders"); n != creates {
		t.Fatalf("Lookup sent a create past the window: %v", b.sent.all())
	}
	wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1, Captures: 1})

	// The reconciler's and payments' requests go through the same path (provider.ErrCannotTell
	// is never the answer when the period is bounded).
	proof, err := payments.LookupBeyondWindow(ctxT(t), b.p, payments.Examined{Key: req.Key, Kind: payments.KindCharge,
		Provider: "paypal", ProviderKey: req.ProviderKey, Amount: req.Amount, SentAt: t0}, 6*time.Hour)
	if err != nil || proof.Status != payments.IntentSucceeded || proof.ProviderID != ch.ProviderID {
		t.Fatalf("LookupBeyondWindow: %+v %v", proof, err)
	}
}

// A key PayPal never charged: an empty search is proof of absence only once the period ended
// more than 3 hours (plus a clock margin) ago.
func TestLookupPastTheWindowAbsent(t *testing.T) {
	t.Parallel()
	b := lagged(t)
	must(b.p.Charge(ctxT(t), chargeReq("search-other", paypaltest.PaymentMethodVisa)))(t) // noise
	absent := provider.DeriveKey("search-absent", provider.StepCharge, 0, paypal.MaxProviderKeyLen)
	lr := provider.LookupRequest{Key: "search-absent", ProviderKey: absent, From: t0.Add(-10 * time.Minute), To: t0.Add(-5 * time.Minute)}

	b.clock.Advance(6 * time.Hour) // past the window, the period ended 6h05 ago: consistent
	if got := must(b.p.Lookup(ctxT(t), lr))(t); len(got.Charges) != 0 || !got.Consistent {
		t.Fatalf("after the lag: %+v, want none, consistent", got)
	}
	lr.To = b.clock.Now().Add(-paypal.SearchLag) // a period that ended exactly the lag ago
	if got := must(b.p.Lookup(ctxT(t), lr))(t); len(got.Charges) != 0 || got.Consistent {
		t.Fatalf("inside the lag: %+v, want none, not consistent", got)
	}
	b.clock.Advance(10 * time.Minute)
	if got := must(b.p.Lookup(ctxT(t), lr))(t); len(got.Charges) != 0 || !got.Consistent {
		t.Fatalf("after the lag and the margin: %+v, want none, consistent", got)
	}
	wantCounts(t, b, absent, paypaltest.Counts{})
}

// A charge PayPal made late in the window (a retry whose first attempt never reached PayPal)
// is not yet in Transaction Search when the window has passed: the empty answer is not
// consistent, and once indexed it is found.
func TestLookupPastTheWindowBeforeTheLag(t *testing.T) {
	t.Parallel()
	b := lagged(t)
	req := chargeReq("search-late", paypaltest.PaymentMethodVisa)
	b.clock.Advance(5*time.Hour + 50*time.Minute)
	ch := must(b.p.Charge(ctxT(t), req))(t)

	b.clock.Advance(20 * time.Minute) // past From + 6h
	lr := provider.LookupRequest{Key: req.Key, ProviderKey: req.ProviderKey, From: t0, To: b.clock.Now().Add(5 * time.Minute)}
	got := must(b.p.Lookup(ctxT(t), lr))(t)
	if len(got.Charges) != 0 || got.Consistent {
		t.Fatalf("before the lag: %+v, want none and not consistent (not proof of absence)", got)
	}
	proof, err := payments.LookupBeyondWindow(ctxT(t), b.p, payments.Examined{Key: req.Key, Kind: payments.KindCharge,
		Provider: "paypal", ProviderKey: req.ProviderKey, Amount: req.Amount, SentAt: t0}, 6*time.Hour)
	if err != nil || proof.Status != payments.IntentNeedsReview {
		t.Fatalf("LookupBeyondWindow before the lag: %+v %v, want review, never failed", proof, err)
	}

	b.clock.Advance(paypal.SearchLag + 15*time.Minute)
	got = must(b.p.Lookup(ctxT(t), lr))(t)
	if len(got.Charges) != 1 || got.Charges[0].ProviderID != ch.ProviderID || !got.Consistent {
		t.Fatalf("after the lag: %+v", got)
	}
}

// Transaction Search carries invoice_id too: an order whose invoice_id is the reference is
// found as well.
func TestLookupPastTheWindowByInvoiceID(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	pk := provider.DeriveKey("search-invoice", provider.StepCharge, 0, paypal.MaxProviderKeyLen)
	res, err := b.p.Client().CreateOrder(ctxT(t), "rid-invoice", paypal.OrderRequest{Intent: "CAPTURE",
		PurchaseUnits: []paypal.PurchaseUnit{{CustomID: "someone-else", InvoiceID: pk, Amount: &paypal.Amount{CurrencyCode: "EUR", Value: "3.00"}}},
		PaymentSource: &paypal.PaymentSource{Card: &paypal.CardSource{VaultID: paypaltest.PaymentMethodVisa}}})
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(10 * time.Hour)
	got := must(b.p.Lookup(ctxT(t), provider.LookupRequest{Key: "search-invoice", ProviderKey: pk, From: t0, To: t0.Add(time.Minute)}))(t)
	if len(got.Charges) != 1 || got.Charges[0].ProviderID != res.Order.ID || !got.Charges[0].Amount.Equal(eur("3.00")) || !got.Consistent {
		t.Fatalf("%+v, want order %s", got, res.Order.ID)
	}
}

// A long period is searched in 31-day requests, every page.
func TestLookupPastTheWindowLongPeriod(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	paypal.SetSearchPageSize(b.p, 2)
	for i := range 3 { // noise, over two pages
		must(b.p.Charge(ctxT(t), chargeReq("noise-"+string(rune('a'+i)), paypaltest.PaymentMethodVisa)))(t)
	}
	b.clock.Advance(40 * 24 * time.Hour)
	req := chargeReq("search-long", paypaltest.PaymentMethodVisa)
	ch := must(b.p.Charge(ctxT(t), req))(t)
	b.clock.Advance(2 * 24 * time.Hour)
	got := must(b.p.Lookup(ctxT(t), provider.LookupRequest{Key: req.Key, ProviderKey: req.ProviderKey, From: t0, To: t0.Add(41 * 24 * time.Hour)}))(t)
	if len(got.Charges) != 1 || got.Charges[0].ProviderID != ch.ProviderID || !got.Consistent {
		t.Fatalf("%+v", got)
	}
	if n := b.sent.count("GET", "/v1/reporting/transactions"); n < 2 {
		t.Fatalf("%d searches for a 41-day period, want at least 2", n)
	}
}

// Without bounds, or for a period Transaction Search no longer covers, no lookup can tell: an
// error matching provider.ErrCannotTell (the reconciler flags the intent for review), not an
// outage to retry forever.
func TestLookupCannotTell(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	pk := provider.DeriveKey("cannot-tell", provider.StepCharge, 0, paypal.MaxProviderKeyLen)
	b.clock.Advance(4 * 365 * 24 * time.Hour)
	for name, lr := range map[string]provider.LookupRequest{
		"no From":       {Key: "cannot-tell", ProviderKey: pk, To: t0},
		"no To":         {Key: "cannot-tell", ProviderKey: pk, From: t0},
		"neither":       {Key: "cannot-tell", ProviderKey: pk},
		"over 3 years":  {Key: "cannot-tell", ProviderKey: pk, From: t0, To: t0.Add(time.Hour)},
		"payments-like": {Key: "cannot-tell", ProviderKey: pk, From: t0.Add(-10 * time.Minute), To: t0.Add(time.Minute)},
	} {
		_, err := b.p.Lookup(ctxT(t), lr)
		var ct *paypal.CannotTellError
		if !errors.As(err, &ct) || !errors.Is(err, provider.ErrCannotTell) || idempotency.SafeToRetry(err) || ct.Reason == "" {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if got := b.sent.all(); len(got) != 0 {
		t.Fatalf("sent %v", got)
	}
	proof, err := payments.LookupBeyondWindow(ctxT(t), b.p, payments.Examined{Key: "cannot-tell", Kind: payments.KindCharge,
		Provider: "paypal", ProviderKey: pk, Amount: money.MustParse("1.00", money.EUR), SentAt: t0}, 6*time.Hour)
	if err != nil || proof.Status != payments.IntentNeedsReview {
		t.Fatalf("LookupBeyondWindow: %+v %v, want review", proof, err)
	}
	if _, err := b.p.Lookup(ctxT(t), provider.LookupRequest{Key: "k", ProviderKey: pk, From: t0, To: t0.Add(-time.Second)}); err == nil {
		t.Fatal("To before From accepted")
	} else if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != "To" {
		t.Fatalf("%+v", ie)
	}
}
