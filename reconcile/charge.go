package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/internal/crashpoint"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
)

// examine decides on one claimed intent from what its provider holds for
// the attempt's references. Refunds are examined by examineRefund.
func (r *Reconciler) examine(ctx context.Context, rep *Report, it item) error {
	prov := r.client.Provider(it.Provider)
	if prov == nil {
		return r.review(ctx, rep, it, Item{Kind: KindPendingUnknownAtProvider, ProviderState: "provider not configured"},
			"the intent's provider "+it.Provider+" is not configured")
	}
	// The key is held from before the lookup until its proof is applied:
	// no retry can send the attempt meanwhile, and the proof is applied
	// only to the attempt and send count looked up (payments.ErrChanged
	// otherwise).
	op := r.client.Operator()
	held, err := op.Hold(ctx, it.Examined)
	switch {
	case errors.Is(err, payments.ErrNotOpen):
		return op.ReleaseClaim(ctx, it.Scope, it.Key)
	case errors.Is(err, idempotency.ErrInProgress):
		return r.reschedule(ctx, rep, it, Item{Kind: KindPendingUnknownAtProvider, ProviderState: "not asked",
			Detail: "a call holds the key; looked again later"}, recheckWaiting)
	case err != nil:
		return err
	}
	defer op.Release(ctx, held)
	it.Examined = held
	crashpoint.Reach(ctx, crashpoint.ReconcileHeld, it.Key)
	if it.Kind == "REFUND" {
		return r.examineRefund(ctx, rep, it)
	}
	lctx, span := r.startProvider(ctx, "lookup", it)
	// Over the creation windows of the attempt's sends (first and last,
	// read under the hold), with the database's and the provider's clocks
	// compared where the provider can read its own.
	res, err := r.client.LookupAttempt(lctx, prov, it.Examined)
	endProvider(span, len(res.Charges), err)
	if err != nil {
		return r.lookupFailed(ctx, rep, it, err, "lookup", "attempt "+strconv.Itoa(it.Attempt))
	}
	mine := res.Charges
	base := Item{LocalState: string(it.Status)}
	switch {
	case len(mine) > 1:
		ids := idsOf(mine, chargeIDStatus)
		base.Kind, base.ProviderState = KindDuplicateAtProvider, ids
		return r.review(ctx, rep, it, base, fmt.Sprintf("%d charges at %s for one attempt: %s", len(mine), it.Provider, ids))
	case len(mine) == 1:
		ch := mine[0]
		base.ProviderState = string(ch.Status) + " " + ch.ProviderID
		if ch.Amount.Currency() != "" && !ch.Amount.Equal(it.Amount) {
			base.Kind = KindAmountDiffers
			base.ProviderState += " " + ch.Amount.AmountString() + " " + string(ch.Amount.Currency())
			return r.review(ctx, rep, it, base, "the provider charged "+ch.Amount.AmountString()+", the intent is "+it.Amount.AmountString())
		}
		proof, ok := payments.ProofOfCharge(ch)
		switch {
		case !ok: // pending at the provider: still open there
			base.Kind = KindPendingUnknownAtProvider
			return r.inconclusive(ctx, rep, it, base, "still "+string(ch.Status)+" at the provider")
		case proof.Status != payments.IntentRequiresAction:
			return r.settle(ctx, rep, it, base, proof)
		case it.Status != payments.IntentRequiresAction:
			// Record what the provider waits for; ActionGrace later, the
			// intent is looked at again.
			base.Kind, base.Action = KindPendingUnknownAtProvider, ActionCompleted
			return r.resolve(ctx, rep, it, base, proof)
		default:
			base.Kind = KindPendingUnknownAtProvider
			return r.inconclusive(ctx, rep, it, base, "still waiting for the customer at the provider")
		}
	case res.Consistent:
		base.Kind, base.ProviderState = KindPendingMissingAtProvider, "none (consistent lookup)"
		return r.nothingCharged(ctx, rep, it, base)
	default:
		base.Kind, base.ProviderState = KindPendingUnknownAtProvider, "none yet (eventually consistent)"
		if v, ok := prov.(provider.Voider); ok && it.age >= r.cfg.VoidAfter {
			return r.void(ctx, rep, it, v, base)
		}
		return r.inconclusive(ctx, rep, it, base, noAnswer)
	}
}

const noAnswer = "no conclusive answer from the provider"

// nothingCharged decides on an attempt a consistent lookup found nothing
// for: failed with that proof, or, with Config.Redrive NewAttempt, reopened under the
// next attempt number.
func (r *Reconciler) nothingCharged(ctx context.Context, rep *Report, it item, base Item) error {
	if it.SentAt.IsZero() {
		// A reopened attempt nobody retried yet: reopening it again would
		// only advance the attempt number on every run. It waits for the
		// client's retry; once its checks run out, nothing was charged by
		// any attempt and it fails with that proof.
		if it.checks+1 >= r.cfg.MaxChecks {
			base.Action = ActionFailedWithProof
			return r.resolve(ctx, rep, it, base, payments.Proof{Status: payments.IntentFailed,
				Reason: fmt.Sprintf("no charge at the provider for any attempt; attempt %d was reopened and never sent (no retry after %d checks)",
					it.Attempt, it.checks+1)})
		}
		return r.reschedule(ctx, rep, it, base, recheckInconclusive)
	}
	if r.cfg.Redrive == NewAttempt {
		base.Action = ActionNewAttempt
		return r.resolve(ctx, rep, it, base, payments.Proof{Status: payments.IntentFailed, NextAttempt: true,
			Reason: "a consistent lookup found no charge for attempt " + strconv.Itoa(it.Attempt)})
	}
	base.Action = ActionFailedWithProof
	return r.resolve(ctx, rep, it, base, payments.Proof{Status: payments.IntentFailed,
		Reason: "a consistent lookup found no charge for this attempt"})
}

// void decides on an attempt that an eventually consistent lookup still
// finds nothing for, past Config.VoidAfter, at a provider that can void
// it: the void is requested once, and its notification settles the intent
// (provider.EventCancelled).
func (r *Reconciler) void(ctx context.Context, rep *Report, it item, v provider.Voider, base Item) error {
	sent, err := r.voidSent(ctx, it)
	if err != nil {
		return err
	}
	if !sent {
		vctx, span := r.startProvider(ctx, "void", it)
		err := v.Void(vctx, provider.VoidRequest{Key: it.Key, ProviderKey: it.ProviderKey, ProviderID: it.ProviderID})
		endProvider(span, -1, err)
		if err != nil {
			return r.reschedule(ctx, rep, it, Item{Kind: KindProviderUnavailable, ProviderState: "void failed", Detail: err.Error()}, recheckOutage)
		}
		base.Action, base.Detail = ActionVoidSent, "void of "+voidTarget(it)+"; its notification settles the intent"
		return r.reschedule(ctx, rep, it, base, recheckWaiting)
	}
	// A void that did not cancel anything is no proof of absence: a
	// captured payment cannot be cancelled by reference, a refused one
	// cannot be cancelled at all. A human reads the provider's reason.
	evs, err := r.client.Operator().StoredEvents(ctx, it.Provider, it.ProviderKey)
	if err != nil {
		return err
	}
	// The payment such a refusal hints at announces itself by its
	// AUTHORISATION (Adyen retries deliveries), which the next lookups
	// find: the intent waits for it, and goes to review only once its
	// checks run out.
	for _, ev := range evs {
		if ev.Kind == provider.EventCancelFailed {
			base.ProviderState = "void refused: " + ev.DeclineCode
			if ev.ChargeID != "" {
				base.ProviderState += " (payment " + ev.ChargeID + ")"
			}
			if it.checks+1 >= r.cfg.MaxChecks {
				base.Kind = KindVoidRefused
				return r.review(ctx, rep, it, base, fmt.Sprintf("the provider refused to void the attempt (%s: %s) and no "+
					"notification of the payment came after %d checks: the payment may exist and be captured; check it at the provider",
					ev.Type, ev.DeclineCode, it.checks+1))
			}
			base.Detail = "the void was refused (" + ev.DeclineCode + "): waiting for the payment's notification"
			return r.reschedule(ctx, rep, it, base, recheckInconclusive)
		}
	}
	return r.inconclusive(ctx, rep, it, base, noAnswer)
}

// voidTarget says what a void addresses: the known provider object
// (reversed whatever its state), else the attempt's reference (a
// technical cancel).
func voidTarget(it item) string {
	if it.ProviderID != "" {
		return "payment " + it.ProviderID + " (cancel or refund)"
	}
	// The reference is derived from the idempotency key: a report names
	// it by its short hash only.
	return "the attempt's reference #" + idempotency.ShortHash(it.ProviderKey) + " (technical cancel)"
}

// voidSent reports whether a void of the intent was requested already (a
// report row says so).
func (r *Reconciler) voidSent(ctx context.Context, it item) (bool, error) {
	var n int
	err := r.pool.QueryRow(ctx, voidSentSQL, it.Scope, it.Key, ActionVoidSent).Scan(&n)
	return n > 0, err
}

func chargeIDStatus(ch provider.ChargeResult) (id, status string) {
	return ch.ProviderID, string(ch.Status)
}
