package paypal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/testkit"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// refundRefused sends r and returns its refusal, failing t unless it is an
// *provider.InvalidRequestError.
func refundRefused(t *testing.T, b bundle, r provider.RefundRequest) *provider.InvalidRequestError {
	t.Helper()
	_, err := b.p.Refund(ctxT(t), r)
	return errAs[*provider.InvalidRequestError](t, err)
}

func TestRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ch := charged(t, b, "refunded")

	r1 := refundReq("refund-1", ch.ProviderID, eur("5.00"))
	res := must(b.p.Refund(ctxT(t), r1))(t)
	if res.Status != provider.RefundSucceeded || !res.Amount.Equal(eur("5.00")) || res.Replayed || !strings.HasPrefix(res.ProviderID, "REFFAKE") {
		t.Fatalf("%+v", res)
	}
	again := must(b.p.Refund(ctxT(t), r1))(t)
	if again.ProviderID != res.ProviderID || !again.Replayed {
		t.Fatalf("replay %+v", again)
	}
	wantCounts(t, b, r1.ProviderKey, paypaltest.Counts{Refunds: 1})

	// Lost response: the retry replays, one refund exists.
	r2 := refundReq("refund-2", ch.ProviderID, eur("15.00"))
	b.srv.Inject(paypaltest.Fault{Kind: paypaltest.ResetAfter, Path: "/v2/payments/captures/*/refund"})
	_, err := b.p.Refund(ctxT(t), r2)
	if !payments.OutcomeUnknown(err) {
		t.Fatalf("lost refund: %v", err)
	}
	// The capture is fully refunded now; the replay still answers.
	if res := must(b.p.Refund(ctxT(t), r2))(t); !res.Replayed || res.Status != provider.RefundSucceeded {
		t.Fatalf("%+v", res)
	}
	wantCounts(t, b, r2.ProviderKey, paypaltest.Counts{Refunds: 1})

	_, err = b.p.Refund(ctxT(t), refundReq("refund-3", ch.ProviderID, eur("0.01")))
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Code != "CAPTURE_FULLY_REFUNDED" || idempotency.SafeToRetry(err) {
		t.Fatalf("%+v", ie)
	}
	if got := b.srv.Totals()["EUR"]; got != (paypaltest.Total{Captured: 2000, Refunded: 2000}) {
		t.Fatalf("totals %+v", got)
	}
}

func TestOverRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ch := charged(t, b, "over")
	must(b.p.Refund(ctxT(t), refundReq("over-1", ch.ProviderID, eur("15.00"))))(t)
	r := refundReq("over-2", ch.ProviderID, eur("5.01"))
	if ie := refundRefused(t, b, r); ie.Code != "REFUND_AMOUNT_EXCEEDED" {
		t.Fatalf("%+v", ie)
	}
	wantCounts(t, b, r.ProviderKey, paypaltest.Counts{})
	if got := b.srv.Totals()["EUR"]; got.Refunded != 1500 || got.Net != 500 {
		t.Fatalf("totals %+v", got)
	}
	if ie := refundRefused(t, b, refundReq("over-3", ch.ProviderID, money.MustParse("1.00", money.USD))); ie.Param != "Amount" {
		t.Fatalf("%+v", ie)
	}
}

func TestRefundOfUncapturedOrUnknownOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ch := must(b.p.Charge(ctxT(t), chargeReq("3ds", paypaltest.PaymentMethodAuthenticationRequired)))(t)
	if ie := refundRefused(t, b, refundReq("r", ch.ProviderID, eur("1.00"))); ie.Param != "ChargeID" {
		t.Fatalf("%+v", ie)
	}
	if ie := refundRefused(t, b, refundReq("r", "ORDUNKNOWN", eur("1.00"))); ie.Code != "INVALID_RESOURCE_ID" {
		t.Fatalf("%+v", ie)
	}
}

// FailRefund refuses what it cannot fail, and gives the amount back to the capture.
func TestFakeFailRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ch := charged(t, b, "fr")
	re := must(b.p.Refund(ctxT(t), refundReq("fr-1", ch.ProviderID, eur("20.00"))))(t)
	if err := b.srv.FailRefund(re.ProviderID); err != nil {
		t.Fatal(err)
	}
	if err := b.srv.FailRefund(re.ProviderID); err == nil {
		t.Fatal("failing a failed refund: no error")
	}
	if err := b.srv.FailRefund("REFUNKNOWN"); err == nil {
		t.Fatal("failing an unknown refund: no error")
	}
	// The whole capture is refundable again.
	if res := must(b.p.Refund(ctxT(t), refundReq("fr-2", ch.ProviderID, eur("20.00"))))(t); res.Status != provider.RefundSucceeded {
		t.Fatalf("%+v", res)
	}
	if got := b.srv.Totals()["EUR"]; got != (paypaltest.Total{Captured: 2000, Refunded: 2000}) {
		t.Fatalf("totals %+v", got)
	}
}

// lookupOf is the RefundLookupRequest the reconciler sends for r, without a refund id.
var lookupOf = testkit.LookupOf

// onlyRefund fails t unless got is consistent and holds exactly one refund, id, in status st
// for amount.
var onlyRefund = testkit.OnlyRefund

// A refund whose response was lost is found in the order by its custom_id, and read by its id;
// another refund of the same order is not returned, and a refund never sent is none,
// consistently. A lookup sends reads only.
func TestLookupRefundAfterLostResponse(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ch := charged(t, b, "lrf")
	other := must(b.p.Refund(ctxT(t), refundReq("lrf-other", ch.ProviderID, eur("3.00"))))(t)

	lost := refundReq("lrf-lost", ch.ProviderID, eur("5.00"))
	b.srv.Inject(paypaltest.Fault{Kind: paypaltest.ResetAfter, Method: "POST", Path: "/v2/payments/captures/*/refund"})
	if _, err := b.p.Refund(ctxT(t), lost); !payments.OutcomeUnknown(err) {
		t.Fatalf("lost refund: %v, want an unknown outcome", err)
	}
	wantCounts(t, b, lost.ProviderKey, paypaltest.Counts{Refunds: 1})

	p, rc := countedProvider(t, b)
	got := must(p.LookupRefund(ctxT(t), lookupOf(lost)))(t)
	if len(got.Refunds) != 1 || got.Refunds[0].ProviderID == other.ProviderID {
		t.Fatalf("lookup %+v, want only the lost refund (not %s)", got, other.ProviderID)
	}
	id := got.Refunds[0].ProviderID
	onlyRefund(t, got, id, provider.RefundSucceeded, eur("5.00"))
	if reqs := rc.take(); !maps.Equal(reqs, map[string]int{"GET /v2/checkout/orders/" + ch.ProviderID: 1}) {
		t.Fatalf("requests %v, want one read of the order", reqs)
	}
	// The retry the reconciler might have sent instead names the same refund.
	if re := must(b.p.Refund(ctxT(t), lost))(t); re.ProviderID != id || !re.Replayed {
		t.Fatalf("retry %+v, want a replay of %s", re, id)
	}

	byID := lookupOf(lost)
	byID.ProviderID = id
	onlyRefund(t, must(p.LookupRefund(ctxT(t), byID))(t), id, provider.RefundSucceeded, eur("5.00"))
	if reqs := rc.take(); !maps.Equal(reqs, map[string]int{"GET /v2/payments/refunds/" + id: 1}) {
		t.Fatalf("requests %v, want one read of the refund", reqs)
	}

	onlyRefund(t, must(p.LookupRefund(ctxT(t), lookupOf(refundReq("lrf-other", ch.ProviderID, eur("3.00")))))(t),
		other.ProviderID, provider.RefundSucceeded, eur("3.00"))

	never := refundReq("lrf-never", ch.ProviderID, eur("1.00"))
	none := must(p.LookupRefund(ctxT(t), lookupOf(never)))(t)
	if !none.Consistent || none.Refunds == nil || len(none.Refunds) != 0 {
		t.Fatalf("never sent: %+v, want no refunds, consistent", none)
	}
	wantCounts(t, b, never.ProviderKey, paypaltest.Counts{})
	// An order without a capture has no refunds.
	var orderID string
	uncaptured := chargeReq("lrf-uncaptured", paypaltest.PaymentMethodVisa)
	uncaptured.Progress = func(_ context.Context, id string) error { orderID = id; return errors.New("stop") }
	_, _ = b.p.Charge(ctxT(t), uncaptured)
	if none := must(p.LookupRefund(ctxT(t), lookupOf(refundReq("lrf-uncaptured-refund", orderID, eur("1.00")))))(t); !none.Consistent || len(none.Refunds) != 0 {
		t.Fatalf("uncaptured order: %+v", none)
	}
	for _, pk := range []string{lost.ProviderKey, refundReq("lrf-other", "", eur("3.00")).ProviderKey} {
		wantCounts(t, b, pk, paypaltest.Counts{Refunds: 1})
	}
}

// A refund that failed after it completed is found failed, in the order and by its id.
func TestLookupRefundFailed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ch := charged(t, b, "lrf-failed")
	req := refundReq("lrf-failed-refund", ch.ProviderID, eur("7.00"))
	re := must(b.p.Refund(ctxT(t), req))(t)
	onlyRefund(t, must(b.p.LookupRefund(ctxT(t), lookupOf(req)))(t), re.ProviderID, provider.RefundSucceeded, eur("7.00"))

	if err := b.srv.FailRefund(re.ProviderID); err != nil {
		t.Fatal(err)
	}
	onlyRefund(t, must(b.p.LookupRefund(ctxT(t), lookupOf(req)))(t), re.ProviderID, provider.RefundFailed, eur("7.00"))
	byID := lookupOf(req)
	byID.ProviderID, byID.ChargeID = re.ProviderID, ""
	onlyRefund(t, must(b.p.LookupRefund(ctxT(t), byID))(t), re.ProviderID, provider.RefundFailed, eur("7.00"))
}

// stripRefundCustomIDs removes custom_id from the refunds of the orders PayPal answers, as a
// representation that leaves it out would.
type stripRefundCustomIDs struct{ base http.RoundTripper }

func (s stripRefundCustomIDs) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(r)
	if err != nil || r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/v2/checkout/orders/") {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var o map[string]any
	if json.Unmarshal(body, &o) == nil {
		pus, _ := o["purchase_units"].([]any)
		for _, pu := range pus {
			pay, _ := pu.(map[string]any)["payments"].(map[string]any)
			refunds, _ := pay["refunds"].([]any)
			for _, re := range refunds {
				delete(re.(map[string]any), "custom_id")
			}
		}
		body, _ = json.Marshal(o)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// When the order lists its refunds without custom_id, each is read by its id to tell.
func TestLookupRefundReadsRefundsWithoutCustomID(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ch := charged(t, b, "lrf-strip")
	mine := must(b.p.Refund(ctxT(t), refundReq("lrf-strip-mine", ch.ProviderID, eur("4.00"))))(t)
	must(b.p.Refund(ctxT(t), refundReq("lrf-strip-other", ch.ProviderID, eur("6.00"))))(t)

	rc := sentRequests{&testkit.Recorder{Next: stripRefundCustomIDs{base: &http.Transport{DisableKeepAlives: true}}}}
	p := newProvider(t, b.srv, b.clock, rc)
	got := must(p.LookupRefund(ctxT(t), lookupOf(refundReq("lrf-strip-mine", ch.ProviderID, eur("4.00")))))(t)
	onlyRefund(t, got, mine.ProviderID, provider.RefundSucceeded, eur("4.00"))
	reqs := rc.take()
	refundReads := 0
	for k, n := range reqs {
		if strings.HasPrefix(k, "GET /v2/payments/refunds/") {
			refundReads += n
		}
	}
	if reqs["GET /v2/checkout/orders/"+ch.ProviderID] != 1 || refundReads != 2 {
		t.Fatalf("requests %v, want the order and both refunds read", reqs)
	}
}

// Bad requests are refused before sending, naming the field; a refund id recorded for another
// ProviderKey is a mismatch; an unknown refund or order is refused; a failing read is a
// retryable unknown outcome.
func TestLookupRefundRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ch := charged(t, b, "lrf-x")
	req := refundReq("lrf-x-refund", ch.ProviderID, eur("2.00"))
	re := must(b.p.Refund(ctxT(t), req))(t)
	p, rc := countedProvider(t, b)

	for _, tc := range []struct {
		name, param string
		req         provider.RefundLookupRequest
	}{
		{"no ProviderKey", "ProviderKey", provider.RefundLookupRequest{Key: req.Key, ChargeID: ch.ProviderID}},
		{"ProviderKey too long", "ProviderKey", provider.RefundLookupRequest{ProviderKey: strings.Repeat("k", 128), ChargeID: ch.ProviderID}},
		{"no ChargeID", "ChargeID", provider.RefundLookupRequest{ProviderKey: req.ProviderKey}},
		{"bad ChargeID", "ChargeID", provider.RefundLookupRequest{ProviderKey: req.ProviderKey, ChargeID: "../x"}},
		{"bad ProviderID", "ProviderID", provider.RefundLookupRequest{ProviderKey: req.ProviderKey, ProviderID: "a b"}},
	} {
		_, err := p.LookupRefund(ctxT(t), tc.req)
		if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != tc.param {
			t.Fatalf("%s: %+v, want Param %s", tc.name, ie, tc.param)
		}
	}
	if reqs := rc.take(); len(reqs) != 0 {
		t.Fatalf("requests %v for refused lookups, want none", reqs)
	}

	_, err := p.LookupRefund(ctxT(t), provider.RefundLookupRequest{ProviderKey: "another", ProviderID: re.ProviderID})
	errAs[*provider.KeyMismatchError](t, err)
	for _, lr := range []provider.RefundLookupRequest{
		{ProviderKey: req.ProviderKey, ProviderID: "REFUNKNOWN"},
		{ProviderKey: req.ProviderKey, ChargeID: "ORDUNKNOWN"},
	} {
		_, err = p.LookupRefund(ctxT(t), lr)
		if errAs[*provider.InvalidRequestError](t, err); idempotency.SafeToRetry(err) {
			t.Fatalf("%+v: %v is retryable", lr, err)
		}
	}

	b.srv.Inject(paypaltest.Fault{Kind: paypaltest.FailBefore, Method: "GET", Path: "/v2/checkout/orders/*"})
	_, err = p.LookupRefund(ctxT(t), lookupOf(req))
	if ue := errAs[*provider.UnknownOutcomeError](t, err); ue.Status != 500 || !idempotency.SafeToRetry(err) {
		t.Fatalf("%+v", ue)
	}
}
