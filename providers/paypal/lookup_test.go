package paypal_test

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

func TestLookup(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("lookup", paypaltest.PaymentMethodVisa)
	ch := must(b.p.Charge(ctxT(t), req))(t)
	window := provider.LookupRequest{Key: req.Key, ProviderKey: req.ProviderKey, From: t0.Add(-time.Minute), To: t0.Add(time.Minute)}

	byID := window
	byID.ProviderID = ch.ProviderID
	for _, lr := range []provider.LookupRequest{byID, window} {
		got := must(b.p.Lookup(ctxT(t), lr))(t)
		if !got.Consistent || len(got.Charges) != 1 || got.Charges[0].ProviderID != ch.ProviderID ||
			got.Charges[0].Status != provider.ChargeSucceeded || !got.Charges[0].Amount.Equal(req.Amount) {
			t.Fatalf("lookup %+v: %+v", lr, got)
		}
	}
	wantCaptured(t, b, req.ProviderKey)

	// An unknown order id, and a key PayPal never saw: no charges. The second leaves a probe
	// order that moves no money.
	none := must(b.p.Lookup(ctxT(t), provider.LookupRequest{ProviderID: "ORDUNKNOWN"}))(t)
	if len(none.Charges) != 0 || !none.Consistent {
		t.Fatalf("%+v", none)
	}
	absent := window
	absent.ProviderKey += "_absent"
	for range 2 {
		none = must(b.p.Lookup(ctxT(t), absent))(t)
		if len(none.Charges) != 0 {
			t.Fatalf("%+v", none)
		}
	}
	wantCounts(t, b, absent.ProviderKey, paypaltest.Counts{Orders: 1})
	if got := b.srv.Totals()["EUR"]; got.Captured != 2000 {
		t.Fatalf("totals %+v", got)
	}
	// A charge still to come for that key cannot capture the probe.
	late := req
	late.Key, late.ProviderKey = absent.Key, absent.ProviderKey
	_, err := b.p.Charge(ctxT(t), late)
	errAs[*provider.KeyMismatchError](t, err)
	wantCounts(t, b, absent.ProviderKey, paypaltest.Counts{Orders: 1})

	// Without a bound, no lookup can tell: an error the reconciler flags for review, never an
	// outage to look at again.
	for _, lr := range []provider.LookupRequest{
		{Key: req.Key, ProviderKey: req.ProviderKey, To: window.To},
		{Key: req.Key, ProviderKey: req.ProviderKey, From: window.From},
	} {
		_, err := b.p.Lookup(ctxT(t), lr)
		var ct *paypal.CannotTellError
		if !errors.As(err, &ct) || !errors.Is(err, provider.ErrCannotTell) || payments.OutcomeUnknown(err) || idempotency.SafeToRetry(err) {
			t.Fatalf("%+v: %v", lr, err)
		}
	}
	creates := b.sent.count("POST", "/v2/checkout/orders")
	// Past the create's window it searches instead of replaying (a replay would create).
	past := window
	past.From = t0.Add(-6 * time.Hour)
	got := must(b.p.Lookup(ctxT(t), past))(t)
	if len(got.Charges) != 1 || got.Charges[0].ProviderID != ch.ProviderID || got.Consistent {
		t.Fatalf("past the window: %+v, want the charge, not consistent (the period ends now)", got)
	}
	if n := b.sent.count("POST", "/v2/checkout/orders"); n != creates || b.sent.count("GET", "/v1/reporting/transactions") == 0 {
		t.Fatalf("past the window: %v", b.sent.all())
	}
}

func TestLookupStates(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	declined := chargeReq("lk-declined", paypaltest.PaymentMethodDeclined)
	d, _ := b.p.Charge(ctxT(t), declined)
	action := chargeReq("lk-3ds", paypaltest.PaymentMethodAuthenticationRequired)
	a := must(b.p.Charge(ctxT(t), action))(t)
	for _, tc := range []struct {
		id   string
		want provider.ChargeStatus
	}{{d.ProviderID, provider.ChargeFailed}, {a.ProviderID, provider.ChargeRequiresAction}} {
		got := must(b.p.Lookup(ctxT(t), provider.LookupRequest{ProviderID: tc.id}))(t)
		if len(got.Charges) != 1 || got.Charges[0].Status != tc.want {
			t.Fatalf("%s: %+v", tc.id, got)
		}
	}
	// An approved order that was never captured is no charge.
	req, order := approvedOrder(t, b, "lk-uncaptured")
	orderID := order.ProviderID
	got := must(b.p.Lookup(ctxT(t), provider.LookupRequest{ProviderID: orderID, ProviderKey: req.ProviderKey}))(t)
	if len(got.Charges) != 0 {
		t.Fatalf("%+v", got)
	}
	_, err := b.p.Lookup(ctxT(t), provider.LookupRequest{ProviderID: orderID, ProviderKey: "other"})
	errAs[*provider.KeyMismatchError](t, err)
}

// A captured order with two completed partial refunds and one that failed later: Lookup
// WithRefunds reports the completed sum, by order id and after a create replay (one more GET of
// the order); without WithRefunds nothing is known and no extra request is sent.
func TestLookupWithRefunds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("lookup-refunds", paypaltest.PaymentMethodVisa)
	ch := must(b.p.Charge(ctxT(t), req))(t)
	must(b.p.Refund(ctxT(t), refundReq("lr-1", ch.ProviderID, eur("5.00"))))(t)
	must(b.p.Refund(ctxT(t), refundReq("lr-2", ch.ProviderID, eur("3.00"))))(t)
	failed := must(b.p.Refund(ctxT(t), refundReq("lr-3", ch.ProviderID, eur("2.50"))))(t)
	if err := b.srv.FailRefund(failed.ProviderID); err != nil {
		t.Fatal(err)
	}
	if got := b.srv.Totals()["EUR"]; got.Refunded != 800 {
		t.Fatalf("the fake's totals %+v, want 8.00 refunded", got)
	}
	p, rc := countedProvider(t, b)
	window := provider.LookupRequest{Key: req.Key, ProviderKey: req.ProviderKey, From: t0.Add(-time.Minute), To: t0.Add(time.Minute)}
	byID := window
	byID.ProviderID = ch.ProviderID

	const (
		getOrder    = "GET /v2/checkout/orders/"
		createOrder = "POST /v2/checkout/orders"
	)
	for _, tc := range []struct {
		name  string
		req   provider.LookupRequest
		with  bool
		calls map[string]int
	}{
		{"by order id", byID, true, map[string]int{getOrder + ch.ProviderID: 1}},
		{"by order id, without refunds", byID, false, map[string]int{getOrder + ch.ProviderID: 1}},
		{"by replay", window, true, map[string]int{createOrder: 1, getOrder + ch.ProviderID: 1}},
		{"by replay, without refunds", window, false, map[string]int{createOrder: 1}},
	} {
		lr := tc.req
		lr.WithRefunds = tc.with
		got := must(p.Lookup(ctxT(t), lr))(t)
		if len(got.Charges) != 1 || got.Charges[0].ProviderID != ch.ProviderID || got.Charges[0].Status != provider.ChargeSucceeded {
			t.Fatalf("%s: %+v", tc.name, got)
		}
		c := got.Charges[0]
		switch {
		case tc.with && (!c.RefundsKnown || !c.Refunded.Equal(eur("8.00"))):
			t.Fatalf("%s: %+v, want 8.00 EUR refunded, known", tc.name, c)
		case !tc.with && (c.RefundsKnown || c.Refunded != (money.Money{})):
			t.Fatalf("%s: %+v, want nothing known", tc.name, c)
		}
		if calls := rc.take(); len(calls) != len(tc.calls) || !maps.Equal(calls, tc.calls) {
			t.Fatalf("%s: requests %v, want %v", tc.name, calls, tc.calls)
		}
	}
	wantCaptured(t, b, req.ProviderKey)
}

// No refunds, a declined capture and an order waiting for the payer: zero Money of the
// charge's currency, known.
func TestLookupWithRefundsNone(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ok := charged(t, b, "lrn-ok")
	declined, _ := b.p.Charge(ctxT(t), chargeReq("lrn-declined", paypaltest.PaymentMethodDeclined))
	action := must(b.p.Charge(ctxT(t), chargeReq("lrn-3ds", paypaltest.PaymentMethodAuthenticationRequired)))(t)
	for _, id := range []string{ok.ProviderID, declined.ProviderID, action.ProviderID} {
		got := must(b.p.Lookup(ctxT(t), provider.LookupRequest{ProviderID: id, WithRefunds: true}))(t)
		if len(got.Charges) != 1 || !got.Charges[0].RefundsKnown || !got.Charges[0].Refunded.Equal(eur("0.00")) {
			t.Fatalf("%s: %+v, want 0.00 EUR refunded, known", id, got)
		}
	}
}

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
	wantCaptured(t, b, req.ProviderKey)

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
	charged(t, b, "search-other") // noise
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
