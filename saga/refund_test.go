package saga_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/fakes"
	"github.com/payonce/payonce/saga"
)

// The compensation of a charge (saga.RefundCharge) against payments on
// Adyen's fake, whose webhooks reach payments' receiver: a charge step is
// done while its charge is still open (Charge answers REQUIRES_ACTION or
// PENDING without an error), and a later step fails. The charge may then
// have been declined (no refund, rolled back), succeed later (refunded
// once), or stay open past the bound (NEEDS_REVIEW with the reason).

// paidSaga is the definition of these tests: charge (remote, the
// documented pattern: done on any outcome Charge answers without an
// error), then ship (local), which fails as ship says.
const paidSaga = "paid"

// Ship step behaviours.
const (
	shipWaits = iota // transient: the carrier has not answered yet
	shipFails        // permanent: the carrier refuses the address
)

// chargeAmount is what every saga here charges.
const chargeAmount = "25.00"

type paidInput struct {
	Method string `json:"method"`
}

// payRig is one test's world: a migrated schema, Adyen's fake, payments,
// and an orchestrator with the paid saga.
type payRig struct {
	pool  *pgxpool.Pool
	pay   *payments.Client
	adyen *adyentest.Server
	orch  *saga.Orchestrator
	ship  atomic.Int32
}

type rigOptions struct {
	// capture is the merchant account's capture mode (default automatic).
	capture adyentest.CaptureMode
	// noWebhooks: the fake delivers nothing (the webhooks never come).
	noWebhooks bool
}

func newPayRig(t *testing.T, o rigOptions) *payRig {
	t.Helper()
	r := &payRig{pool: pgtest.Pool(t)}
	var handler atomic.Pointer[http.Handler]
	inbox := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		(*handler.Load()).ServeHTTP(w, req)
	}))
	t.Cleanup(inbox.Close)
	hook := inbox.URL
	if o.noWebhooks {
		hook = ""
	}
	if o.capture == "" {
		o.capture = adyentest.CaptureAutomatic
	}
	r.adyen = adyentest.NewServer(&adyentest.Config{APIKey: fakes.AdyenAPIKey, MerchantAccount: fakes.AdyenMerchantAccount,
		WebhookURL: hook, CaptureMode: o.capture})
	t.Cleanup(r.adyen.Close)
	prov, err := adyen.New(&adyen.Config{APIKey: fakes.AdyenAPIKey, MerchantAccount: fakes.AdyenMerchantAccount,
		BaseURL: r.adyen.URL(), ReturnURL: "https://shop.example/return", HMACKeys: []string{fakes.AdyenHMACKey},
		CaptureMode: adyen.CaptureMode(o.capture),
		HTTPClient:  &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.pay, err = payments.New(r.pool, []provider.Provider{prov}, nil); err != nil {
		t.Fatal(err)
	}
	h, err := r.pay.WebhookHandler("adyen", nil)
	if err != nil {
		t.Fatal(err)
	}
	handler.Store(&h)
	if r.orch, err = saga.New(r.pool, &saga.Config{LockTimeout: 2 * time.Second, CompensationBackoff: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	refund, err := saga.RefundCharge(r.pay, nil)
	if err != nil {
		t.Fatal(err)
	}
	amount, err := money.Parse(chargeAmount, money.EUR)
	if err != nil {
		t.Fatal(err)
	}
	err = r.orch.Register(saga.Definition{Name: paidSaga, Steps: []saga.Step{
		{Name: "charge", Kind: saga.Remote,
			Action: func(ctx context.Context, c *saga.Call) (any, error) {
				var in paidInput
				if err := c.DecodeInput(&in); err != nil {
					return nil, saga.Fail(err)
				}
				return r.pay.Charge(ctx, payments.ChargeParams{Scope: c.Scope, Key: c.Key, Provider: "adyen",
					Amount: amount, Recipient: "acct_shop", PaymentMethod: in.Method})
			},
			Compensate: refund},
		{Name: "ship", Kind: saga.Local,
			Action: func(ctx context.Context, c *saga.Call) (any, error) {
				if r.ship.Load() == shipWaits {
					return nil, errors.New("carrier: no answer yet")
				}
				return nil, saga.Fail(errors.New("carrier: address undeliverable"))
			}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *payRig) params(key, method string) saga.RunParams {
	return saga.RunParams{Saga: paidSaga, Scope: scope, Key: key, Input: paidInput{Method: method}}
}

func (r *payRig) state(t *testing.T, key string) saga.Saga {
	t.Helper()
	s, err := r.orch.State(ctx, scope, key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// charge is the intent of the saga key's charge step.
func (r *payRig) charge(t *testing.T, key string) payments.Intent {
	t.Helper()
	in, err := r.pay.Intent(ctx, scope, saga.SubKey(key, "charge"))
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// refunds counts the refund intents of the scope: the refunds payments
// asked the provider for.
func (r *payRig) refunds(t *testing.T) int {
	t.Helper()
	var n int
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM payment_intents WHERE user_id = $1 AND kind = 'REFUND'`, scope).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// delivered waits until the fake has delivered every webhook it emitted
// (payments answers each one after its commit).
func (r *payRig) delivered(t *testing.T) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := r.adyen.WaitDeliveries(wctx); err != nil {
		t.Fatal(err)
	}
}

// recoverUntilFinal runs recovery until the saga of key is final, at most
// n times: a saga that never ends fails the test instead of hanging it.
func (r *payRig) recoverUntilFinal(t *testing.T, key string, n int) (saga.Saga, int) {
	t.Helper()
	for run := 1; run <= n; run++ {
		if _, err := r.orch.Recover(ctx); err != nil {
			t.Fatalf("recovery run %d: %v", run, err)
		}
		if s := r.state(t, key); s.Status.Final() {
			return s, run
		}
	}
	s := r.state(t, key)
	t.Fatalf("saga %s still %s after %d recovery runs: step %s: %s", key, s.Status, n, s.Steps[s.CurrentStep].Name, s.Steps[s.CurrentStep].Error)
	return s, n
}

// A charge done while waiting for the customer (3-D Secure), then
// declined; then the next step fails for good: the rollback refunds
// nothing, ends ROLLED_BACK, and the charge step says why. Before
// RefundCharge, the refund got "no succeeded charge" (transient) on every
// run: the saga never ended.
func TestRefundChargeDeclinedAfterItsStepNeedsNoRefund(t *testing.T) {
	t.Parallel()
	r := newPayRig(t, rigOptions{})
	const key = "order-declined"
	r.ship.Store(shipWaits)
	_, err := r.orch.Run(ctx, r.params(key, adyentest.PaymentMethodAuthenticationRequired))
	var pending *saga.PendingError
	if !errors.As(err, &pending) || pending.Step != "ship" {
		t.Fatalf("first run: %v, want pending at ship", err)
	}
	in := r.charge(t, key)
	if in.Status != payments.IntentRequiresAction {
		t.Fatalf("charge %s, want REQUIRES_ACTION", in.Status)
	}
	if s := r.state(t, key); s.Steps[0].Status != saga.StepDone {
		t.Fatalf("charge step %s, want DONE on REQUIRES_ACTION", s.Steps[0].Status)
	}

	// The shopper fails 3-D Secure: Adyen's AUTHORISATION success=false
	// reaches payments.
	if err := r.adyen.CompleteRedirect(in.ProviderID, false); err != nil {
		t.Fatal(err)
	}
	r.delivered(t)
	if in := r.charge(t, key); in.Status != payments.IntentDeclined && in.Status != payments.IntentFailed {
		t.Fatalf("charge %s after the refusal, want DECLINED or FAILED", in.Status)
	}

	r.ship.Store(shipFails)
	s, runs := r.recoverUntilFinal(t, key, 5)
	if s.Status != saga.StatusRolledBack || s.FailedStep != "ship" || runs != 1 {
		t.Fatalf("saga %s failed at %q after %d runs, want ROLLED_BACK at ship after 1", s.Status, s.FailedStep, runs)
	}
	ch := s.Steps[0]
	if ch.Status != saga.StepCompensated || !strings.HasPrefix(ch.Note, saga.ReasonChargeNeverSettled) || ch.CompensatedAt.IsZero() {
		t.Fatalf("charge step %s, note %q", ch.Status, ch.Note)
	}
	if n := r.refunds(t); n != 0 {
		t.Fatalf("%d refunds of a declined charge", n)
	}
	if _, err := r.pay.RefundIntent(ctx, scope, saga.CompensationKey(key, "charge")); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("refund intent: %v, want none", err)
	}
	res, err := r.orch.Run(ctx, r.params(key, adyentest.PaymentMethodAuthenticationRequired))
	if !errors.Is(err, saga.ErrRolledBack) || !res.Replayed || res.Steps[0].Note != ch.Note {
		t.Fatalf("retry: %+v %v, want the rollback replayed with the note", res, err)
	}
}

// A step fails while the charge still waits for the customer: the
// compensation waits, rescheduled rather than retried (one attempt, and
// recovery leaves the saga alone until it is due); the charge then
// succeeds, and the next run refunds it, once.
func TestRefundChargeWaitsThenRefundsOnce(t *testing.T) {
	t.Parallel()
	r := newPayRig(t, rigOptions{})
	const key = "order-late"
	r.ship.Store(shipFails)
	p := r.params(key, adyentest.PaymentMethodAuthenticationRequired)
	_, err := r.orch.Run(ctx, p)
	var pending *saga.PendingError
	if !errors.As(err, &pending) || !pending.Compensating || pending.Step != "charge" ||
		pending.RetryAfter <= 0 || pending.RetryAfter > saga.DefaultRecheckEvery {
		t.Fatalf("first run: %v, want the charge's compensation waiting, again within %s", err, saga.DefaultRecheckEvery)
	}
	s := r.state(t, key)
	ch := s.Steps[0]
	if s.Status != saga.StatusCompensating || s.WakeAt.IsZero() || ch.Status != saga.StepCompensating || ch.CompensationAttempts != 1 {
		t.Fatalf("saga %s wake %v, charge step %s after %d compensation attempts: want one attempt, rescheduled",
			s.Status, s.WakeAt, ch.Status, ch.CompensationAttempts)
	}
	if res, err := r.orch.Recover(ctx); err != nil || res != (saga.RecoverResult{}) {
		t.Fatalf("recovery before the wake: %+v %v, want nothing found", res, err)
	}
	if n := r.refunds(t); n != 0 {
		t.Fatalf("%d refunds of a charge still open", n)
	}

	// The shopper completes 3-D Secure: the charge succeeds (automatic
	// capture) and payments books it from the webhook.
	if err := r.adyen.CompleteRedirect(r.charge(t, key).ProviderID, true); err != nil {
		t.Fatal(err)
	}
	r.delivered(t)
	if in := r.charge(t, key); in.Status != payments.IntentSucceeded {
		t.Fatalf("charge %s, want SUCCEEDED", in.Status)
	}

	// The client's retry drives it at once, wake or not.
	res, err := r.orch.Run(ctx, p)
	if !errors.Is(err, saga.ErrRolledBack) || res.Status != saga.StatusRolledBack || res.Steps[0].Status != saga.StepCompensated || res.Steps[0].Note != "" {
		t.Fatalf("retry after the charge succeeded: %+v %v", res, err)
	}
	r.delivered(t)
	if in, err := r.pay.RefundIntent(ctx, scope, saga.CompensationKey(key, "charge")); err != nil || in.Status != payments.IntentSucceeded {
		t.Fatalf("refund: %+v %v", in, err)
	}
	again, err := r.orch.Run(ctx, p)
	if !errors.Is(err, saga.ErrRolledBack) || !again.Replayed {
		t.Fatalf("second retry: %+v %v", again, err)
	}
	if res, err := r.orch.Recover(ctx); err != nil || res != (saga.RecoverResult{}) {
		t.Fatalf("recovery after the rollback: %+v %v", res, err)
	}
	r.delivered(t)
	tot := r.adyen.Totals()["EUR"]
	if n := r.refunds(t); n != 1 || tot.Captured != 2500 || tot.Refunded != 2500 || tot.Net != 0 {
		t.Fatalf("%d refunds, Adyen captured %d refunded %d: want one refund of the whole charge", n, tot.Captured, tot.Refunded)
	}
}

// A charge that stays open: PENDING (a manual capture whose CAPTURE
// notification never comes), or put in review. Past the bound, or at once
// for a charge in review, the saga stops NEEDS_REVIEW with the reason,
// and nothing is refunded.
func TestRefundChargeUnsettledGoesToReview(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, key string
		// settle is what happens after the first run; want the reason's start.
		settle func(t *testing.T, r *payRig, key string)
		want   string
	}{
		{"pending past the bound", "order-pending", func(t *testing.T, r *payRig, key string) {
			// A day and an hour pass: the charge step was done that long
			// ago, and the wait is over.
			if _, err := r.pool.Exec(ctx, `UPDATE saga_steps SET finished_at = finished_at - interval '25 hours'
				WHERE scope = $1 AND saga_key = $2 AND name = 'charge'`, scope, key); err != nil {
				t.Fatal(err)
			}
		}, saga.ReasonChargeNotSettled + ": the charge of step charge is still PENDING 25h0m"},
		{"charge in review", "order-review", func(t *testing.T, r *payRig, key string) {
			// As the reconciler leaves a charge it could not settle.
			k, err := idempotency.ComposeKey(scope, "charge", saga.SubKey(key, "charge"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.pool.Exec(ctx, `UPDATE payment_intents SET status = 'NEEDS_REVIEW', review_reason = 'no conclusive answer'
				WHERE user_id = $1 AND idempotency_key = $2`, scope, k); err != nil {
				t.Fatal(err)
			}
		}, saga.ReasonChargeInReview + ": the charge of step charge is NEEDS_REVIEW"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newPayRig(t, rigOptions{capture: adyentest.CaptureManual, noWebhooks: true})
			r.ship.Store(shipFails)
			p := r.params(tc.key, adyentest.PaymentMethodVisa)
			if _, err := r.orch.Run(ctx, p); !errors.Is(err, saga.ErrPending) {
				t.Fatalf("first run: %v, want pending", err)
			}
			if in := r.charge(t, tc.key); in.Status != payments.IntentPending {
				t.Fatalf("charge %s, want PENDING (captured manually, no notification)", in.Status)
			}
			tc.settle(t, r, tc.key)
			if _, err := r.pool.Exec(ctx, `UPDATE sagas SET wake_at = now() WHERE scope = $1 AND saga_key = $2`, scope, tc.key); err != nil {
				t.Fatal(err)
			}
			s, _ := r.recoverUntilFinal(t, tc.key, 5)
			want := "compensation of step charge failed: " + tc.want
			if s.Status != saga.StatusNeedsReview || !strings.HasPrefix(s.Reason, want) || s.Steps[0].Status != saga.StepNeedsReview {
				t.Fatalf("saga %s, reason %q, charge step %s: want NEEDS_REVIEW, reason %q...", s.Status, s.Reason, s.Steps[0].Status, want)
			}
			if strings.Contains(s.Reason, saga.SubKey(tc.key, "charge")) {
				t.Fatalf("the reason holds the charge's key: %q", s.Reason)
			}
			if n := r.refunds(t); n != 0 {
				t.Fatalf("%d refunds of an unsettled charge", n)
			}
			res, err := r.orch.Run(ctx, p)
			var review *saga.NeedsReviewError
			if !errors.As(err, &review) || review.Reason != s.Reason || !res.Replayed {
				t.Fatalf("client retry: %+v %v", res, err)
			}
		})
	}
}

// RefundCharge's configuration errors name the field.
func TestRefundChargeConfig(t *testing.T) {
	t.Parallel()
	if _, err := saga.RefundCharge(nil, nil); !errors.Is(err, idempotency.ErrInvalid) || !strings.Contains(err.Error(), "pay") {
		t.Fatalf("nil client: %v", err)
	}
	// Nothing is sent: a provider that points nowhere will do.
	prov, err := adyen.New(&adyen.Config{APIKey: fakes.AdyenAPIKey, MerchantAccount: fakes.AdyenMerchantAccount,
		BaseURL: "http://127.0.0.1:9", ReturnURL: "https://shop.example/return", HMACKeys: []string{fakes.AdyenHMACKey}})
	if err != nil {
		t.Fatal(err)
	}
	pay, err := payments.New(pgtest.Pool(t), []provider.Provider{prov}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg   saga.RefundConfig
		field string
	}{
		{saga.RefundConfig{SettleWithin: -time.Second}, "RefundConfig.SettleWithin"},
		{saga.RefundConfig{RecheckEvery: -time.Second}, "RefundConfig.RecheckEvery"},
		{saga.RefundConfig{ChargeStep: "charge_1"}, "RefundConfig.ChargeStep"},
	} {
		var ce *saga.ConfigError
		if _, err := saga.RefundCharge(pay, &tc.cfg); !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%+v: %v, want a ConfigError naming %s", tc.cfg, err, tc.field)
		}
	}
}
