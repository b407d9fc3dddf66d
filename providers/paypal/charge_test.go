package paypal_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

func TestProvider(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if b.p.Name() != "paypal" || b.p.DedupWindow() != 45*24*time.Hour || payments.MaxReferenceLen(b.p) != 127 {
		t.Fatalf("Name %q DedupWindow %v MaxReferenceLen %d", b.p.Name(), b.p.DedupWindow(), payments.MaxReferenceLen(b.p))
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
		{"CaptureRetention", func(c *paypal.Config) { c.CaptureRetention = 24 * time.Hour }},
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
	if p.DedupWindow() != 45*24*time.Hour {
		t.Fatalf("DedupWindow %v", p.DedupWindow())
	}
}

func TestChargeSucceedsAndReplays(t *testing.T) {
	t.Parallel()
	b, s := setupWithSink(t, nil)
	ctx := ctxT(t)
	req := chargeReq("order-1", paypaltest.PaymentMethodVisa)

	res := must(b.p.Charge(ctx, req))(t)
	if !strings.HasPrefix(res.ProviderID, "ORDFAKE") || res.Status != payments.ChargeSucceeded || !res.Amount.Equal(req.Amount) || res.Replayed {
		t.Fatalf("first charge: %+v", res)
	}
	again := must(b.p.Charge(ctx, req))(t)
	if again.ProviderID != res.ProviderID || again.Status != payments.ChargeSucceeded || !again.Replayed {
		t.Fatalf("replay: %+v, first %+v", again, res)
	}
	resumed := must(b.p.Charge(ctx, withProviderID(req, res.ProviderID)))(t)
	if resumed.ProviderID != res.ProviderID || !resumed.Replayed {
		t.Fatalf("resume from the order id: %+v", resumed)
	}
	wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1, Captures: 1})
	if c := b.srv.CountsByRequestID(paypal.RequestID(req.ProviderKey, paypal.StepCreate)); c.Orders != 1 {
		t.Fatalf("create request id: %+v", c)
	}
	if c := b.srv.CountsByRequestID(paypal.RequestID(req.ProviderKey, paypal.StepCapture)); c.Captures != 1 {
		t.Fatalf("capture request id: %+v", c)
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

func withProviderID(r payments.ChargeRequest, id string) payments.ChargeRequest {
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
				de := errAs[*payments.DeclineError](t, err)
				if de.DeclineCode != tc.code || de.Code != "DECLINED" || payments.SafeToRetry(err) {
					t.Fatalf("attempt %d: %+v", i, de)
				}
				if res.Status != payments.ChargeFailed || res.ProviderID == "" || res.Replayed != (i == 1) {
					t.Fatalf("attempt %d: %+v", i, res)
				}
			}
			wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1, Captures: 1})
			if got := b.srv.Totals()["EUR"]; got.Captured != 0 {
				t.Fatalf("a declined capture moved money: %+v", got)
			}
		})
	}
}

func TestChargeRequiresAction(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-3ds", paypaltest.PaymentMethodAuthenticationRequired)
	res := must(b.p.Charge(ctxT(t), req))(t)
	if res.Status != payments.ChargeRequiresAction || res.ProviderID == "" {
		t.Fatalf("%+v", res)
	}
	wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1})
	if err := b.srv.CompletePayerAction(res.ProviderID); err != nil {
		t.Fatal(err)
	}
	done := must(b.p.Charge(ctxT(t), withProviderID(req, res.ProviderID)))(t)
	if done.Status != payments.ChargeSucceeded || done.ProviderID != res.ProviderID {
		t.Fatalf("after the payer acted: %+v", done)
	}
	wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1, Captures: 1})
}

func TestLostCreateResponse(t *testing.T) {
	t.Parallel()
	for _, kind := range []paypaltest.FaultKind{paypaltest.ResetAfter, paypaltest.FailAfter} {
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			req := chargeReq("lost-create", paypaltest.PaymentMethodVisa)
			b.srv.Inject(paypaltest.Fault{Kind: kind, Method: "POST", Path: "/v2/checkout/orders"})
			_, err := b.p.Charge(ctxT(t), req)
			if !payments.OutcomeUnknown(err) || !payments.SafeToRetry(err) {
				t.Fatalf("err = %v, want unknown outcome", err)
			}
			wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1})
			res := must(b.p.Charge(ctxT(t), req))(t)
			if res.Status != payments.ChargeSucceeded {
				t.Fatalf("%+v", res)
			}
			wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1, Captures: 1})
		})
	}
}

func TestLostCaptureResponse(t *testing.T) {
	t.Parallel()
	for _, kind := range []paypaltest.FaultKind{paypaltest.ResetAfter, paypaltest.FailAfter} {
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			req := chargeReq("lost-capture", paypaltest.PaymentMethodVisa)
			b.srv.Inject(paypaltest.Fault{Kind: kind, Method: "POST", Path: "/v2/checkout/orders/*/capture"})
			_, err := b.p.Charge(ctxT(t), req)
			if ue := errAs[*payments.UnknownOutcomeError](t, err); !payments.SafeToRetry(err) || (kind == paypaltest.FailAfter) != (ue.Status == 500) {
				t.Fatalf("err = %+v", ue)
			}
			wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1, Captures: 1})
			res := must(b.p.Charge(ctxT(t), req))(t)
			if res.Status != payments.ChargeSucceeded || !res.Replayed {
				t.Fatalf("%+v", res)
			}
			wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1, Captures: 1})
			if got := b.srv.Totals()["EUR"].Captured; got != 2000 {
				t.Fatalf("captured %d", got)
			}
		})
	}
}

// A capture that PayPal refuses as ORDER_ALREADY_CAPTURED (another capture request id got there
// first, or the capture's request id was forgotten) is resolved by reading the order.
func TestAlreadyCapturedReadsTheOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("already-captured", paypaltest.PaymentMethodVisa)
	req.Progress = func(ctx context.Context, orderID string) error {
		_, err := b.p.Client().CaptureOrder(ctx, orderID, "someone-else")
		return err
	}
	res := must(b.p.Charge(ctxT(t), req))(t)
	if res.Status != payments.ChargeSucceeded || !res.Replayed {
		t.Fatalf("%+v", res)
	}
	wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1, Captures: 1})
}

func TestProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("progress", paypaltest.PaymentMethodVisa)
	var recorded []string
	req.Progress = func(ctx context.Context, orderID string) error {
		if c := b.srv.CountsByCustomID(req.ProviderKey); c != (paypaltest.Counts{Orders: 1}) {
			t.Errorf("Progress called with %+v at the fake, want the order alone", c)
		}
		recorded = append(recorded, orderID)
		return nil
	}
	res := must(b.p.Charge(ctxT(t), req))(t)
	if len(recorded) != 1 || recorded[0] != res.ProviderID {
		t.Fatalf("Progress saw %v, result %+v", recorded, res)
	}
}

func TestProgressErrorStopsBeforeCapture(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("progress-fails", paypaltest.PaymentMethodVisa)
	var orderID string
	req.Progress = func(ctx context.Context, id string) error {
		orderID = id
		return errors.New("database down")
	}
	res, err := b.p.Charge(ctxT(t), req)
	if !payments.OutcomeUnknown(err) || !payments.SafeToRetry(err) || !strings.Contains(err.Error(), "database down") || res.ProviderID != orderID {
		t.Fatalf("err = %v, res %+v", err, res)
	}
	wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1})

	// The retry, after the create's 6-hour request id window, resumes from the recorded order.
	b.clock.Advance(7 * time.Hour)
	req.Progress = nil
	res = must(b.p.Charge(ctxT(t), withProviderID(req, orderID)))(t)
	if res.Status != payments.ChargeSucceeded || res.ProviderID != orderID {
		t.Fatalf("%+v", res)
	}
	wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1, Captures: 1})

	// Without the order id, the same retry would have made a second order: Lookup refuses to
	// draw conclusions there.
	_, err = b.p.Lookup(ctxT(t), payments.LookupRequest{Key: req.Key, ProviderKey: req.ProviderKey, From: t0, To: t0.Add(time.Minute)})
	if !errors.Is(err, paypal.ErrOrderWindowPassed) || !payments.OutcomeUnknown(err) {
		t.Fatalf("lookup after the window: %v", err)
	}
	wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1, Captures: 1})
}

func TestSameProviderKeyOtherAmountIsAMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("mismatch", paypaltest.PaymentMethodVisa)
	must(b.p.Charge(ctxT(t), req))(t)
	req.Amount = eur("21.00")
	_, err := b.p.Charge(ctxT(t), req)
	errAs[*payments.KeyMismatchError](t, err)
	wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1, Captures: 1})
}

func TestInFlightCapture(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("inflight-capture", paypaltest.PaymentMethodVisa)
	b.srv.Inject(paypaltest.Fault{Kind: paypaltest.Latency, Delay: 400 * time.Millisecond, Path: "/v2/checkout/orders/*/capture"})
	var wg sync.WaitGroup
	wg.Add(1)
	var first error
	go func() {
		defer wg.Done()
		_, first = b.p.Charge(ctxT(t), req)
	}()
	deadline := time.Now().Add(2 * time.Second)
	for b.srv.CountsByCustomID(req.ProviderKey).Orders == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	_, err := b.p.Charge(ctxT(t), req)
	wg.Wait()
	if !errors.Is(err, payments.ErrInProgress) || first != nil {
		t.Fatalf("duplicate: %v, first: %v", err, first)
	}
	wantCounts(t, b, req.ProviderKey, paypaltest.Counts{Orders: 1, Captures: 1})
}
