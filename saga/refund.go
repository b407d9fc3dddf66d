package saga

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
)

// DefaultSettleWithin is [RefundConfig].SettleWithin's default: how long
// after its step was done a charge may stay open (PENDING, UNKNOWN,
// REQUIRES_ACTION) before its saga stops in NEEDS_REVIEW. 24 hours is the
// longest a customer is given to finish a payment's action by default:
// Stripe's Checkout Sessions expire 24 hours after their creation unless
// told otherwise (https://docs.stripe.com/payments/checkout/managing-limited-inventory),
// and the reconciler leaves a charge waiting for the customer alone that
// long too (reconcile.Config.ActionGrace, 24h) before it asks the
// provider. A charge still open after it will not settle by itself soon;
// a person looks (and so does the reconciler, which flags it for review).
// Payment methods that settle in days (bank debits) need a longer bound.
const DefaultSettleWithin = 24 * time.Hour

// DefaultRecheckEvery is [RefundConfig].RecheckEvery's default: a waiting
// saga is looked at again once a minute, recovery's default schedule
// (Config.RecoverSpec).
const DefaultRecheckEvery = time.Minute

// Reasons a charge's compensation gives, at the start of its note (nothing
// to undo) or of the saga's NEEDS_REVIEW reason: stable, so that operators
// can find them (docs/runbook.md, section 6).
const (
	// ReasonChargeNotSettled: the charge was still open past
	// RefundConfig.SettleWithin; it was not refunded.
	ReasonChargeNotSettled = "charge not settled in time"
	// ReasonChargeInReview: the charge itself is NEEDS_REVIEW at payments;
	// it was not refunded.
	ReasonChargeInReview = "charge under review"
	// ReasonChargeMissing: no charge was recorded under the charge step's
	// sub-key; nothing was refunded.
	ReasonChargeMissing = "charge not found"
	// ReasonChargeNotRefundable: payments refused to refund a charge it
	// records as succeeded.
	ReasonChargeNotRefundable = "charge not refundable"
	// ReasonChargeNeverSettled (a note, not a review): the charge was
	// declined or failed; no money moved, so there was nothing to refund.
	ReasonChargeNeverSettled = "charge never settled"
)

// RefundConfig configures [RefundCharge]. The zero value (or nil) means
// defaults.
type RefundConfig struct {
	// ChargeStep is the step whose action charged, with its own sub-key as
	// the charge's key (payments.ChargeParams.Key = [Call.Key]). Default:
	// the step being compensated.
	ChargeStep string
	// SettleWithin bounds the wait for an open charge, from the moment its
	// step was done ([Call.DoneAgo]). Default [DefaultSettleWithin].
	SettleWithin time.Duration
	// RecheckEvery is how long a waiting saga sleeps before its charge is
	// read again ([Wait]); never past SettleWithin. Default
	// [DefaultRecheckEvery].
	RecheckEvery time.Duration
}

// RefundCharge returns the compensation of a step that charged through
// pay: it refunds the charge once it is known to have succeeded, and
// never refunds one that did not. A charge can end its step while still
// open, since payments.Client.Charge answers PENDING or REQUIRES_ACTION
// without an error and the step is then DONE; by the time a later step
// fails, it may have been declined (a webhook, the reconciler), or still
// be open. The compensation reads the charge's intent (Client.Intent) on
// each run and:
//
//   - SUCCEEDED: refunds the whole charge with the compensation's own key
//     ([Call.Key]), through payments.Client.Refund (whose errors are
//     classified as usual: a refund refused for good stops the saga in
//     NEEDS_REVIEW). A refund the provider accepted but settles later
//     (PENDING) counts as done: payments tracks it to its end;
//   - DECLINED or FAILED: no money moved; nothing to undo
//     ([NothingToUndo], with [ReasonChargeNeverSettled] in the step's
//     note), and the rollback goes on;
//   - PENDING, UNKNOWN or REQUIRES_ACTION: waits ([Wait]): the saga is
//     rescheduled every RecheckEvery, not retried in a loop, until the
//     charge settles or SettleWithin has passed since its step was done;
//     then the saga stops in NEEDS_REVIEW ([ReasonChargeNotSettled]);
//   - NEEDS_REVIEW: the saga stops in NEEDS_REVIEW too
//     ([ReasonChargeInReview]): a person settles the charge (payonce
//     resolve) and, if it succeeded, refunds it.
//
// Every reason names what to do; none holds a key. It returns a
// *ConfigError naming a bad field of cfg, or a nil pay.
func RefundCharge(pay *payments.Client, cfg *RefundConfig) (CompensateFunc, error) {
	if pay == nil {
		return nil, &ConfigError{"RefundCharge: pay", "nil: pass the payments.Client the charge step charges with"}
	}
	var c RefundConfig
	if cfg != nil {
		c = *cfg
	}
	if c.ChargeStep != "" {
		if err := idempotency.ValidateAction(c.ChargeStep); err != nil {
			return nil, &ConfigError{"RefundConfig.ChargeStep", reasonOf(err)}
		}
	}
	for _, f := range []struct {
		d    *time.Duration
		v    time.Duration
		name string
	}{{&c.SettleWithin, DefaultSettleWithin, "SettleWithin"}, {&c.RecheckEvery, DefaultRecheckEvery, "RecheckEvery"}} {
		if *f.d < 0 {
			return nil, &ConfigError{"RefundConfig." + f.name, fmt.Sprintf("must be positive, got %s", *f.d)}
		}
		if *f.d == 0 {
			*f.d = f.v
		}
	}
	r := &refunder{pay: pay, cfg: c}
	return r.compensate, nil
}

type refunder struct {
	pay *payments.Client
	cfg RefundConfig
}

func (r *refunder) compensate(ctx context.Context, c *Call) error {
	step := r.cfg.ChargeStep
	if step == "" {
		step = c.Step
	}
	in, err := r.pay.Intent(ctx, c.Scope, SubKey(c.SagaKey, step))
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		return Fail(fmt.Errorf("%s: no charge was recorded under the sub-key of step %s, so nothing was refunded; "+
			"its action must charge with Call.Key as payments.ChargeParams.Key (or set RefundConfig.ChargeStep to the step that charges)",
			ReasonChargeMissing, step))
	case errors.Is(err, idempotency.ErrInvalid):
		return Fail(fmt.Errorf("%s: the charge of step %s cannot be read: %w", ReasonChargeMissing, step, err))
	case err != nil:
		return fmt.Errorf("saga: read the charge of step %s: %w", step, err)
	}
	switch in.Status {
	case payments.IntentSucceeded:
		return r.refund(ctx, c, step, in)
	case payments.IntentDeclined, payments.IntentFailed:
		return NothingToUndo(fmt.Sprintf("%s: the charge of step %s is %s at %s: no money moved, no refund",
			ReasonChargeNeverSettled, step, in.Status, in.Provider))
	case payments.IntentNeedsReview:
		return Fail(fmt.Errorf("%s: the charge of step %s is NEEDS_REVIEW at payments, so it was not refunded; "+
			"settle it (payonce resolve), then refund it if it succeeded", ReasonChargeInReview, step))
	}
	return r.wait(c, step, in.Status)
}

// wait reschedules the saga while the charge is open, up to SettleWithin
// after its step was done.
func (r *refunder) wait(c *Call, step string, status payments.IntentStatus) error {
	age, ok := c.DoneAgo(step)
	if !ok {
		return Fail(fmt.Errorf("saga: RefundConfig.ChargeStep: step %s is not a done step of this saga, "+
			"so its charge (%s) was not refunded; name the step that charges", step, status))
	}
	if age >= r.cfg.SettleWithin {
		return Fail(fmt.Errorf("%s: the charge of step %s is still %s %s after the step was done "+
			"(RefundConfig.SettleWithin %s), so it was not refunded; settle it at the provider, then refund it if it succeeded",
			ReasonChargeNotSettled, step, status, age.Round(time.Second), r.cfg.SettleWithin))
	}
	return Wait(fmt.Errorf("the charge of step %s is %s: its refund waits for it to settle (up to %s more)",
		step, status, (r.cfg.SettleWithin-age).Round(time.Second)), min(r.cfg.RecheckEvery, r.cfg.SettleWithin-age))
}

// refund refunds the whole succeeded charge in with the compensation's
// key.
func (r *refunder) refund(ctx context.Context, c *Call, step string, in payments.Intent) error {
	cur, err := money.ParseCurrency(in.Currency)
	if err != nil {
		return Fail(fmt.Errorf("%s: the charge of step %s has currency %q: %w", ReasonChargeNotRefundable, step, in.Currency, err))
	}
	amount, err := money.Parse(in.Amount, cur)
	if err != nil {
		return Fail(fmt.Errorf("%s: the charge of step %s has amount %q: %w", ReasonChargeNotRefundable, step, in.Amount, err))
	}
	_, err = r.pay.Refund(ctx, payments.RefundParams{Scope: c.Scope, Key: c.Key, ChargeKey: SubKey(c.SagaKey, step), Amount: amount})
	if errors.Is(err, idempotency.ErrNotFound) {
		// Read as succeeded, refused as "no succeeded charge": it changed
		// in between (the next run reads it again), or payments holds no
		// provider id for it, which no retry mends. Its text names the
		// key: not kept.
		again, rerr := r.pay.Intent(ctx, c.Scope, SubKey(c.SagaKey, step))
		if rerr == nil && again.Status != payments.IntentSucceeded {
			return Wait(fmt.Errorf("the charge of step %s changed to %s while being refunded", step, again.Status), 0)
		}
		return Fail(fmt.Errorf("%s: payments refuses to refund the charge of step %s, which it records as SUCCEEDED "+
			"(no provider id?); refund it by hand", ReasonChargeNotRefundable, step))
	}
	return err
}
