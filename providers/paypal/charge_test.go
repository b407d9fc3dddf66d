package paypal_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

func TestProvider(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if b.p.Name() != "paypal" || b.p.DedupWindow() != 45*24*time.Hour || provider.MaxReferenceLen(b.p) != 127 {
		t.Fatalf("Name %q DedupWindow %v MaxReferenceLen %d", b.p.Name(), b.p.DedupWindow(), provider.MaxReferenceLen(b.p))
	}
	if id := paypal.RequestID("k_charge_0", paypal.StepCreate); id != paypal.RequestID("k_charge_0", paypal.StepCreate) ||
		id == paypal.RequestID("k_charge_0", paypal.StepCapture) || len(id) != 36 {
		t.Fatalf("request ids are not deterministic per step: %s", id)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	ok := paypal.Config{ClientID: "id", Secret: "s"}
	for _, tc := range []struct {
		field  string
		modify func(c *paypal.Config)
	}{
		{"ClientID", func(c *paypal.Config) { c.ClientID = "" }},
		{"Secret", func(c *paypal.Config) { c.Secret = "" }},
		{"BaseURL", func(c *paypal.Config) { c.BaseURL = "api-m.paypal.com" }},
		{"OrderRetention", func(c *paypal.Config) { c.OrderRetention = time.Hour }},
		{"RefundRetention", func(c *paypal.Config) { c.RefundRetention = 24 * time.Hour }},
	} {
		c := ok
		tc.modify(&c)
		_, err := paypal.New(&c)
		ce := errAs[*paypal.ConfigError](t, err)
		if ce.Field != tc.field || !strings.Contains(err.Error(), "Config."+tc.field) {
			t.Fatalf("%s: got %v", tc.field, err)
		}
	}
	if _, err := paypal.New(nil); err == nil {
		t.Fatal("nil config accepted")
	}
	long := ok
	long.OrderRetention = 72 * time.Hour
	p := must(paypal.New(&long))(t)
	if p.DedupWindow() != 45*24*time.Hour || p.StepDedupWindow(provider.StepCharge) != 72*time.Hour {
		t.Fatalf("DedupWindow %v, charge step %v", p.DedupWindow(), p.StepDedupWindow(provider.StepCharge))
	}
}

// The charge's create and capture are Orders v2 calls, whose request ids PayPal keeps 6 hours;
// a refund of a capture is a Payments v2 call, kept 45 days. payments decides from these whether
// a retry may still re-send a step's request ids.
func TestStepDedupWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var w provider.StepWindower = b.p
	if got := w.StepDedupWindow(provider.StepCharge); got != 6*time.Hour {
		t.Fatalf("charge step window %v, want 6h", got)
	}
	if got := w.StepDedupWindow(provider.StepRefund); got != 45*24*time.Hour {
		t.Fatalf("refund step window %v, want 45 days", got)
	}
	if got := w.StepDedupWindow("other"); got != 0 {
		t.Fatalf("unknown step window %v, want 0 (DedupWindow)", got)
	}
	if got := provider.DedupWindowOf(b.p, provider.StepCharge); got != 6*time.Hour {
		t.Fatalf("DedupWindowOf charge %v", got)
	}
	if got := provider.DedupWindowOf(b.p, provider.StepRefund); got != b.p.DedupWindow() || got != 45*24*time.Hour {
		t.Fatalf("DedupWindowOf refund %v, DedupWindow %v", got, b.p.DedupWindow())
	}
	if paypal.OrderRetention != 6*time.Hour || paypal.RefundRetention != 45*24*time.Hour {
		t.Fatalf("documented retentions %v %v", paypal.OrderRetention, paypal.RefundRetention)
	}
}

// A create with a payment source is single-step at PayPal: the create captures, the adapter
// reads the capture from its answer and never calls capture; a retry with the same references
// inside the 6-hour window is a 200 replay of the same, captured order.
func TestChargeSucceedsAndReplays(t *testing.T) {
	t.Parallel()
	b, s := setupWithSink(t, nil)
	ctx := ctxT(t)
	req := chargeReq("order-1", paypaltest.PaymentMethodVisa)

	res := must(b.p.Charge(ctx, req))(t)
	if !strings.HasPrefix(res.ProviderID, "ORDFAKE") || res.Status != provider.ChargeSucceeded || !res.Amount.Equal(req.Amount) || res.Replayed {
		t.Fatalf("first charge: %+v", res)
	}
	wantCaptured(t, b, req.ProviderKey)
	wantCaptureCalls(t, b, 0)
	if got := b.sent.all(); len(got) != 1 || got[0] != "POST /v2/checkout/orders" {
		t.Fatalf("requests %v, want the create alone", got)
	}

	b.clock.Advance(6*time.Hour - time.Minute) // still inside PayPal's window
	again := must(b.p.Charge(ctx, req))(t)
	if again.ProviderID != res.ProviderID || again.Status != provider.ChargeSucceeded || !again.Replayed {
		t.Fatalf("replay: %+v, first %+v", again, res)
	}
	resumed := must(b.p.Charge(ctx, withProviderID(req, res.ProviderID)))(t)
	if resumed.ProviderID != res.ProviderID || !resumed.Replayed || resumed.Status != provider.ChargeSucceeded {
		t.Fatalf("resume from the order id: %+v", resumed)
	}
	wantCaptured(t, b, req.ProviderKey)
	wantCaptureCalls(t, b, 0)
	if c := b.srv.CountsByRequestID(paypal.RequestID(req.ProviderKey, paypal.StepCreate)); c != (paypaltest.Counts{Orders: 1, Captures: 1}) {
		t.Fatalf("create request id: %+v, want the order and its capture", c)
	}
	if c := b.srv.CountsByRequestID(paypal.RequestID(req.ProviderKey, paypal.StepCapture)); c != (paypaltest.Counts{}) {
		t.Fatalf("capture request id: %+v, want nothing", c)
	}
	if got := b.srv.Totals()["EUR"]; got != (paypaltest.Total{Captured: 2000, Net: 2000}) {
		t.Fatalf("totals %+v", got)
	}
	if n := b.srv.MismatchedReplays(); n != 0 {
		t.Fatalf("%d mismatched replays", n)
	}
	if err := b.srv.WaitDeliveries(ctx); err != nil {
		t.Fatal(err)
	}
	if evs := b.srv.Events(); len(evs) != 1 || evs[0].Type != "PAYMENT.CAPTURE.COMPLETED" || len(s.all()) != 1 {
		t.Fatalf("events %+v, %d deliveries", evs, len(s.all()))
	}
}

// PayPal forgets a create's request id after 6 hours: the same request id is then a NEW
// request, and with a payment source a second order, charged again. The fake is faithful; it is
// payments that must not re-send past the charge step's window (StepDedupWindow), and Lookup
// that finds both orders.
func TestRequestIDForgottenAfterSixHoursChargesAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-6h", paypaltest.PaymentMethodVisa)
	first := must(b.p.Charge(ctxT(t), req))(t)

	b.clock.Advance(6*time.Hour + time.Second)
	second := must(b.p.Charge(ctxT(t), req))(t)
	if second.ProviderID == first.ProviderID || second.Replayed || second.Status != provider.ChargeSucceeded {
		t.Fatalf("after 6h: %+v, first %+v: want a second, new order", second, first)
	}
	wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 2, Captures: 2})
	if got := b.srv.Totals()["EUR"].Captured; got != 4000 {
		t.Fatalf("captured %d, want both charges", got)
	}
	if c := b.srv.CountsByRequestID(paypal.RequestID(req.ProviderKey, paypal.StepCreate)); c != (paypaltest.Counts{Orders: 2, Captures: 2}) {
		t.Fatalf("create request id: %+v", c)
	}

	// Past the window, Lookup searches Transaction Search for the ProviderKey: both orders.
	b.clock.Advance(4 * time.Hour)
	found := must(b.p.Lookup(ctxT(t), provider.LookupRequest{Key: req.Key, ProviderKey: req.ProviderKey,
		From: t0.Add(-10 * time.Minute), To: t0.Add(6*time.Hour + time.Minute)}))(t)
	if len(found.Charges) != 2 || !found.Consistent {
		t.Fatalf("lookup: %+v, want both orders", found)
	}
	ids := map[string]bool{found.Charges[0].ProviderID: true, found.Charges[1].ProviderID: true}
	if !ids[first.ProviderID] || !ids[second.ProviderID] {
		t.Fatalf("lookup found %v, want %s and %s", ids, first.ProviderID, second.ProviderID)
	}
}

func withProviderID(r provider.ChargeRequest, id string) provider.ChargeRequest {
	r.ProviderID = id
	return r
}

func TestChargeJPYHasNoDecimals(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-jpy", paypaltest.PaymentMethodVisa)
	req.Amount = jpy(t, "1500")
	res := must(b.p.Charge(ctxT(t), req))(t)
	if !res.Amount.Equal(req.Amount) || b.srv.Totals()["JPY"].Captured != 1500 {
		t.Fatalf("%+v %+v", res, b.srv.Totals())
	}
}

func TestChargeDeclined(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ pm, code string }{
		{paypaltest.PaymentMethodDeclined, paypaltest.ResponseCodeGenericDecline},
		{paypaltest.PaymentMethodInsufficientFunds, paypaltest.ResponseCodeInsufficientFunds},
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			req := chargeReq("declined-"+tc.code, tc.pm)
			for i := range 2 {
				res, err := b.p.Charge(ctxT(t), req)
				de := errAs[*provider.DeclineError](t, err)
				if de.DeclineCode != tc.code || de.Code != "DECLINED" || idempotency.SafeToRetry(err) {
					t.Fatalf("attempt %d: %+v", i, de)
				}
				if res.Status != provider.ChargeFailed || res.ProviderID == "" || res.Replayed != (i == 1) {
					t.Fatalf("attempt %d: %+v", i, res)
				}
			}
			wantCaptured(t, b, req.ProviderKey)
			if got := b.srv.Totals()["EUR"]; got.Captured != 0 {
				t.Fatalf("a declined capture moved money: %+v", got)
			}
			wantCaptureCalls(t, b, 0)
		})
	}
}

// A card that needs 3-D Secure: nothing is captured at create; once the payer acted, the
// order is APPROVED and the retry naming it captures it explicitly, once.
func TestChargeRequiresAction(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-3ds", paypaltest.PaymentMethodAuthenticationRequired)
	res := must(b.p.Charge(ctxT(t), req))(t)
	if res.Status != provider.ChargeRequiresAction || res.ProviderID == "" {
		t.Fatalf("%+v", res)
	}
	wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1})
	if err := b.srv.CompletePayerAction(res.ProviderID); err != nil {
		t.Fatal(err)
	}
	done := must(b.p.Charge(ctxT(t), withProviderID(req, res.ProviderID)))(t)
	if done.Status != provider.ChargeSucceeded || done.ProviderID != res.ProviderID {
		t.Fatalf("after the payer acted: %+v", done)
	}
	again := must(b.p.Charge(ctxT(t), withProviderID(req, res.ProviderID)))(t)
	if again.Status != provider.ChargeSucceeded || !again.Replayed {
		t.Fatalf("again: %+v", again)
	}
	wantCaptured(t, b, req.ProviderKey)
	wantCaptureCalls(t, b, 1)
}

// approvedOrder charges key with a card that needs 3-D Secure and completes the payer's action:
// the order is APPROVED, waiting for the capture the retry naming it sends. It returns the
// request and the order.
func approvedOrder(t *testing.T, b bundle, key string) (provider.ChargeRequest, provider.ChargeResult) {
	t.Helper()
	req := chargeReq(key, paypaltest.PaymentMethodAuthenticationRequired)
	order := must(b.p.Charge(ctxT(t), req))(t)
	if err := b.srv.CompletePayerAction(order.ProviderID); err != nil {
		t.Fatal(err)
	}
	return req, order
}

// The answer of the create (which captures at once), or of the explicit capture of a 3-D Secure
// order, is lost after PayPal captured: the outcome is unknown, and the retry with the same
// request (without the order id) replays the create, which shows the order captured (200).
func TestLostResponse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		step, path string
		approved   bool // the order waits for the explicit capture, which the fault hits
	}{
		{"create", "/v2/checkout/orders", false},
		{"capture", "/v2/checkout/orders/*/capture", true},
	} {
		for _, kind := range []paypaltest.FaultKind{paypaltest.ResetAfter, paypaltest.FailAfter} {
			t.Run(tc.step+"/"+kind.String(), func(t *testing.T) {
				t.Parallel()
				b := setup(t, nil)
				req := chargeReq("lost-"+tc.step, paypaltest.PaymentMethodVisa)
				first, orderID := req, ""
				if tc.approved {
					var order provider.ChargeResult
					req, order = approvedOrder(t, b, "lost-"+tc.step)
					first, orderID = withProviderID(req, order.ProviderID), order.ProviderID
				}
				b.srv.Inject(paypaltest.Fault{Kind: kind, Method: "POST", Path: tc.path})
				_, err := b.p.Charge(ctxT(t), first)
				ue := errAs[*provider.UnknownOutcomeError](t, err)
				if !payments.OutcomeUnknown(err) || !idempotency.SafeToRetry(err) || (kind == paypaltest.FailAfter) != (ue.Status == 500) {
					t.Fatalf("err = %+v, want an unknown outcome", ue)
				}
				wantCaptured(t, b, req.ProviderKey)
				res := must(b.p.Charge(ctxT(t), req))(t)
				if res.Status != provider.ChargeSucceeded || !res.Replayed || (orderID != "" && res.ProviderID != orderID) {
					t.Fatalf("%+v", res)
				}
				wantCaptured(t, b, req.ProviderKey)
				if got := b.srv.Totals()["EUR"].Captured; got != 2000 {
					t.Fatalf("captured %d", got)
				}
			})
		}
	}
}

// A capture that PayPal refuses as ORDER_ALREADY_CAPTURED (another capture request id got there
// first) is resolved by reading the order.
func TestAlreadyCapturedReadsTheOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req, order := approvedOrder(t, b, "already-captured")
	// The retry's create replays the APPROVED order; someone captures it before the adapter.
	req.Progress = func(ctx context.Context, orderID string) error {
		_, err := b.p.Client().CaptureOrder(ctx, orderID, "someone-else")
		return err
	}
	res := must(b.p.Charge(ctxT(t), req))(t)
	if res.Status != provider.ChargeSucceeded || !res.Replayed || res.ProviderID != order.ProviderID {
		t.Fatalf("%+v", res)
	}
	wantCaptured(t, b, req.ProviderKey)
}

// Progress receives the order id as soon as the create answered; the create already captured.
func TestProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("progress", paypaltest.PaymentMethodVisa)
	var recorded []string
	req.Progress = func(ctx context.Context, orderID string) error {
		if c := b.srv.CountsByCustomID(req.ProviderKey); c != (paypaltest.Counts{Orders: 1, Captures: 1}) {
			t.Errorf("Progress called with %+v at the fake, want the order captured at create", c)
		}
		recorded = append(recorded, orderID)
		return nil
	}
	res := must(b.p.Charge(ctxT(t), req))(t)
	if len(recorded) != 1 || recorded[0] != res.ProviderID {
		t.Fatalf("Progress saw %v, result %+v", recorded, res)
	}
}

// A failed Progress leaves the outcome unknown to the caller (the money may have moved); the
// retry after the create's window resumes from the recorded order, which a read shows captured.
func TestProgressErrorIsUnknownAndResumes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("progress-fails", paypaltest.PaymentMethodVisa)
	var orderID string
	req.Progress = func(ctx context.Context, id string) error {
		orderID = id
		return errors.New("database down")
	}
	res, err := b.p.Charge(ctxT(t), req)
	if !payments.OutcomeUnknown(err) || !idempotency.SafeToRetry(err) || !strings.Contains(err.Error(), "database down") || res.ProviderID != orderID {
		t.Fatalf("err = %v, res %+v", err, res)
	}
	wantCaptured(t, b, req.ProviderKey)

	// The retry, after the create's 6-hour request id window, resumes from the recorded order.
	b.clock.Advance(7 * time.Hour)
	req.Progress = nil
	res = must(b.p.Charge(ctxT(t), withProviderID(req, orderID)))(t)
	if res.Status != provider.ChargeSucceeded || res.ProviderID != orderID || !res.Replayed {
		t.Fatalf("%+v", res)
	}
	wantCaptured(t, b, req.ProviderKey)
	if n := b.sent.count("POST", "/v2/checkout/orders"); n != 1 {
		t.Fatalf("%d creates, want 1", n)
	}
}

func TestSameProviderKeyOtherAmountIsAMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("mismatch", paypaltest.PaymentMethodVisa)
	must(b.p.Charge(ctxT(t), req))(t)
	req.Amount = eur("21.00")
	_, err := b.p.Charge(ctxT(t), req)
	errAs[*provider.KeyMismatchError](t, err)
	wantCaptured(t, b, req.ProviderKey)
}

// A duplicate while the first create still executes is refused (409): one order, one capture.
func TestInFlightCreate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("inflight-create", paypaltest.PaymentMethodVisa)
	b.srv.Inject(paypaltest.Fault{Kind: paypaltest.Latency, Delay: time.Hour, Method: "POST", Path: "/v2/checkout/orders"})
	var wg sync.WaitGroup
	wg.Add(1)
	var first error
	ctx := ctxT(t)
	go func() {
		defer wg.Done()
		_, first = b.p.Charge(ctx, req)
	}()
	if err := b.srv.WaitHeld(ctxT(t), 1); err != nil { // the first create holds the request id
		t.Fatal(err)
	}
	_, err := b.p.Charge(ctxT(t), req)
	b.srv.EndLatency()
	wg.Wait()
	if !errors.Is(err, provider.ErrInProgress) || first != nil {
		t.Fatalf("duplicate: %v, first: %v", err, first)
	}
	wantCaptured(t, b, req.ProviderKey)
}
