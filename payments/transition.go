package payments

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

// An intent changes state by transitions: each one is built by one named
// constructor below (succeeded, pending, requiresAction, failedAtProvider,
// declined, refused) from what proves it, and committed by one function,
// [Client.commit], in the transaction that records it. What a provider's
// answer (or a lookup's proof, or an intent a webhook already settled)
// proves is decided by pure functions (decideCharge, decideRefund,
// decideProof, decideSettled), table-tested without a database.
//
// An answer that proves nothing (the outcome is unknown, the request was
// not sent, the provider is still processing the key) is no transition:
// the intent stays open and the key is released.

// effect is the money a transition moves besides the intent's status.
type effect uint8

const (
	// moveNothing: no money moved.
	moveNothing effect = iota
	// postCharge: the charge's ledger entry.
	postCharge
	// postRefund: the refund's ledger entry (its charge is verified
	// again).
	postRefund
	// releaseReservation: a refund that moved no money gives its
	// reservation on the charge back.
	releaseReservation
	// reverseRefund: a refund the provider failed after it succeeded:
	// the reversal of its ledger entry, and its reservation on the charge
	// given back.
	reverseRefund
)

// subject is the intent a transition applies to.
type subject struct {
	scope, key string
	kind       IntentKind
	provider   string
	amount     money.Money
	// chargeKey is a refund's charge (payonce's key).
	chargeKey string
}

func subjectOf(in Examined) subject {
	return subject{scope: in.Scope, key: in.Key, kind: in.Kind, provider: in.Provider, amount: in.Amount, chargeKey: in.ChargeKey}
}

// transition is one change of an intent: its new status, the idempotency
// record's (completed, or failed for a permanent refusal) with the answer
// every retry of the key gets, and the money it moves.
type transition struct {
	status      IntentStatus
	record      idempotency.Status
	providerID  string
	declineCode string
	answer      stored
	effect      effect
	// supersede: the key's idempotency record is replaced by this
	// answer whatever it says (see [Client.supersede]): the provider
	// overturned the outcome it recorded.
	supersede bool
}

// outcome is what a TxFunc is told of the transition.
func (t transition) outcome() Outcome {
	if t.answer.Result != nil {
		return *t.answer.Result
	}
	return Outcome{Status: t.status, ProviderID: t.providerID}
}

// result is a completed record's answer for status.
func result(s subject, status IntentStatus, providerID string, eff effect) transition {
	out := Outcome{Status: status, Provider: s.provider, ProviderID: providerID,
		Amount: s.amount.AmountString(), Currency: string(s.amount.Currency())}
	return transition{status: status, record: idempotency.StatusCompleted, providerID: providerID,
		answer: stored{Result: &out}, effect: eff}
}

// succeeded: the provider charged (or refunded); the money moved.
func succeeded(s subject, providerID string) transition {
	if s.kind == KindRefund {
		return result(s, IntentSucceeded, providerID, postRefund)
	}
	return result(s, IntentSucceeded, providerID, postCharge)
}

// pending: the provider accepted; its final answer comes later (a webhook,
// the reconciler). The record serves this answer.
func pending(s subject, providerID string) transition {
	return result(s, IntentPending, providerID, moveNothing)
}

// requiresAction: the provider waits for the customer (3-D Secure).
func requiresAction(s subject, providerID string) transition {
	return result(s, IntentRequiresAction, providerID, moveNothing)
}

// failedAtProvider: the provider answered with a failed object (a failed
// refund, a charge whose status is failed): nothing moved.
func failedAtProvider(s subject, providerID string) transition {
	return result(s, IntentFailed, providerID, released(s))
}

// declined: a definite refusal by the provider or the issuer, final for
// the key.
func declined(s subject, d *provider.DeclineError) transition {
	return transition{status: IntentDeclined, record: idempotency.StatusFailed, declineCode: d.DeclineCode,
		answer: stored{Decline: d}, effect: released(s)}
}

// refused: the request itself was refused, or the attempt is proven to
// have left nothing; final for the key.
func refused(s subject, inv *provider.InvalidRequestError, declineCode string) transition {
	return transition{status: IntentFailed, record: idempotency.StatusFailed, declineCode: declineCode,
		answer: stored{Invalid: inv}, effect: released(s)}
}

// released is what a refund that moved no money gives back.
func released(s subject) effect {
	if s.kind == KindRefund {
		return releaseReservation
	}
	return moveNothing
}

// answer is what a provider's answer to a call says of its object,
// whatever the call.
type answer int

const (
	answerPending answer = iota
	answerSucceeded
	answerFailed
	answerRequiresAction
)

// decideCharge is what a provider's answer to a charge proves. An error
// that proves nothing (unknown outcome, not sent, in progress, a key
// mismatch, refused credentials) comes back as it is: the intent stays
// open. resumed says the call re-sent the references of an attempt sent
// before (an open intent): a refusal then proves nothing unless the
// provider replayed it (see decide).
func decideCharge(s subject, resumed bool, res provider.ChargeResult, err error) (transition, error) {
	return decide(s, resumed, res.ProviderID, chargeAnswer(res.Status), err)
}

func chargeAnswer(st provider.ChargeStatus) answer {
	switch st {
	case provider.ChargeSucceeded:
		return answerSucceeded
	case provider.ChargeRequiresAction:
		return answerRequiresAction
	case provider.ChargeFailed:
		return answerFailed
	}
	return answerPending
}

func refundAnswer(st provider.RefundStatus) answer {
	switch st {
	case provider.RefundSucceeded:
		return answerSucceeded
	case provider.RefundFailed:
		return answerFailed
	}
	return answerPending
}

// decideRefund is what a provider's answer to a refund proves (see
// decideCharge).
func decideRefund(s subject, resumed bool, res provider.RefundResult, err error) (transition, error) {
	return decide(s, resumed, res.ProviderID, refundAnswer(res.Status), err)
}

// ProofOfCharge is what a charge found at the provider by a lookup
// proves, classified as the synchronous path classifies the provider's
// answer: a succeeded charge, a failed one (recorded DECLINED, as its
// failure notification would be), or one waiting for the customer.
// ok is false while the charge is still pending there: no proof yet.
func ProofOfCharge(ch provider.ChargeResult) (p Proof, ok bool) {
	switch chargeAnswer(ch.Status) {
	case answerSucceeded:
		return Proof{Status: IntentSucceeded, ProviderID: ch.ProviderID, Reason: "the provider reports the charge succeeded"}, true
	case answerFailed:
		return Proof{Status: IntentDeclined, ProviderID: ch.ProviderID, DeclineCode: "declined",
			Reason: "the provider reports the charge failed"}, true
	case answerRequiresAction:
		return Proof{Status: IntentRequiresAction, ProviderID: ch.ProviderID, Reason: "the provider waits for the customer's action"}, true
	}
	return Proof{}, false
}

// ProofOfRefund is what a refund found at the provider by a lookup
// proves (see ProofOfCharge): ok is false while it is pending there.
func ProofOfRefund(rf provider.RefundResult) (p Proof, ok bool) {
	switch refundAnswer(rf.Status) {
	case answerSucceeded:
		return Proof{Status: IntentSucceeded, ProviderID: rf.ProviderID, Reason: "the provider reports the refund succeeded"}, true
	case answerFailed:
		return Proof{Status: IntentFailed, ProviderID: rf.ProviderID, Reason: "the provider reports the refund failed"}, true
	}
	return Proof{}, false
}

// decide is the transition that a call's answer a about provider object
// id, or its error, proves.
//
// A refusal of the request (*InvalidRequestError) is final for a first
// attempt: nothing was sent before it. For a resumed attempt it is proof
// only when the provider replayed it as its answer to the attempt's
// references (Replayed): anything else (a resource missing, a validation
// the first send passed, a conflict) speaks of this send alone while an
// earlier one may have charged, so the intent stays open and the caller
// gets a *RefusedRetryError. A decline stays final either way: each
// provider declines only by executing the attempt, and answers its
// references once (Stripe executes a key once and replays its answer,
// card_error included; Adyen replays the response to an Idempotency-Key;
// PayPal answers a request id with the latest state of what it made), so
// a decline is the attempt's own. Refused credentials
// (*CredentialsError) are never a transition: the provider looked at
// nothing.
func decide(s subject, resumed bool, id string, a answer, err error) (transition, error) {
	var decline *provider.DeclineError
	var invalid *provider.InvalidRequestError
	switch {
	case err == nil:
		switch a {
		case answerSucceeded:
			return succeeded(s, id), nil
		case answerRequiresAction:
			return requiresAction(s, id), nil
		case answerFailed:
			return failedAtProvider(s, id), nil
		}
		return pending(s, id), nil
	case errors.Is(err, provider.ErrCredentials):
		return transition{}, err
	case errors.As(err, &decline):
		t := declined(s, decline)
		t.providerID = id // the declined object: a later success of it is this intent's
		return t, nil
	case errors.As(err, &invalid):
		if resumed && !invalid.Replayed {
			return transition{}, &RefusedRetryError{Provider: s.provider, Refusal: invalid}
		}
		return refused(s, invalid, ""), nil
	}
	return transition{}, err
}

// decideSettled is the answer a retry records for an intent a webhook or
// the reconciler settled while no call held its key. A settled success
// posts again idempotently (the ledger replays the existing entry); a
// settled failure released its reservation already.
func decideSettled(s subject, status IntentStatus, providerID, declineCode string) transition {
	switch status {
	case IntentSucceeded:
		return succeeded(s, providerID)
	case IntentDeclined:
		t := declined(s, &provider.DeclineError{Provider: s.provider, Code: "declined", DeclineCode: declineCode,
			Message: "declined, as the provider notified"})
		t.effect = moveNothing
		return t
	}
	t := refused(s, &provider.InvalidRequestError{Provider: s.provider, Code: "payment_failed",
		Message: "failed or voided at the provider: " + declineCode}, declineCode)
	t.effect = moveNothing
	return t
}

// decideProof is the transition a reconciler's (or an operator's) proof
// makes: p.Status IntentSucceeded, IntentRequiresAction, IntentDeclined or
// IntentFailed (NEEDS_REVIEW and a new attempt are not transitions of the
// outcome: see [Client.apply]).
func decideProof(s subject, p Proof) transition {
	switch p.Status {
	case IntentSucceeded:
		return succeeded(s, p.ProviderID)
	case IntentRequiresAction:
		return requiresAction(s, p.ProviderID)
	case IntentDeclined:
		t := declined(s, &provider.DeclineError{Provider: s.provider, Code: "declined", DeclineCode: p.DeclineCode, Message: p.Reason})
		t.providerID = p.ProviderID
		return t
	}
	t := refused(s, &provider.InvalidRequestError{Provider: s.provider, Code: "payment_void", Message: "no payment at the provider: " + p.Reason}, p.DeclineCode)
	t.providerID = p.ProviderID
	return t
}

// commit applies t to its intent inside tx: the intent's status (a final
// one is never moved back to an open one), the money it moved, and the
// caller's fn. The idempotency record is the caller's (see record).
func (c *Client) commit(ctx context.Context, tx pgx.Tx, s subject, t transition, fn TxFunc) error {
	if _, err := tx.Exec(ctx, settleIntentSQL, s.key, s.scope, string(t.status), t.providerID, t.declineCode); err != nil {
		return err
	}
	var err error
	switch t.effect {
	case postCharge:
		err = c.postCharge(ctx, tx, s.key, s.provider, s.amount)
	case postRefund:
		err = c.postRefund(ctx, tx, s.key, s.scope, s.chargeKey, s.provider, s.amount)
	case releaseReservation:
		_, err = tx.Exec(ctx, unreserveRefundSQL, s.chargeKey, s.scope, s.amount.AmountString())
	case reverseRefund:
		err = c.reverseRefund(ctx, tx, s)
	}
	if err != nil {
		return err
	}
	if fn != nil {
		return fn(ctx, tx, t.outcome())
	}
	return nil
}

// completion is the idempotency record's completion for t.
func (c *Client) completion(t transition) (idempotency.Completion, error) {
	body, err := encodeStored(t.answer)
	if err != nil {
		return idempotency.Completion{}, err
	}
	return idempotency.Completion{Status: t.record, Response: idempotency.Response{Code: 200, Body: body},
		Retention: c.exec.Config().Retention}, nil
}

// call is one Charge or Refund holding its key's lease.
type call struct {
	lease idempotency.Lease
	// fn is the caller's part of the recording transaction.
	fn TxFunc
	// recorded is the transition this call committed: its answer is
	// returned as it is (only replays are decoded).
	recorded *transition
}

// record commits t and completes the key's record under the call's lease
// in one transaction, and returns the recording for the executor. A
// failure to record leaves the intent open and the key released: a retry
// replays the provider's answer through the same provider key.
func (c *Client) record(ctx context.Context, cl *call, s subject, t transition) (idempotency.Recording, error) {
	var done idempotency.Completion
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		// A success is never overwritten by a stale refusal: a webhook may
		// have booked the charge (or refund) while this call still held
		// the key with an earlier decline or failure of the same attempt.
		// The call then records the success, as a retry would. (A stale
		// "pending" leaves the intent SUCCEEDED through settleIntentSQL
		// and is served as it was answered.)
		var status, providerID string
		if err := tx.QueryRow(ctx, lockIntentSQL, s.key, s.scope).Scan(&status, &providerID); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if status == string(IntentSucceeded) && (t.status == IntentDeclined || t.status == IntentFailed) {
			t = decideSettled(s, IntentSucceeded, providerID, "")
		}
		var err error
		if done, err = c.completion(t); err != nil {
			return err
		}
		if err := c.commit(ctx, tx, s, t, cl.fn); err != nil {
			return err
		}
		return c.store.CompleteTx(ctx, tx, cl.lease, done)
	})
	if err != nil {
		return idempotency.Recording{}, &provider.UnknownOutcomeError{Provider: "payonce", Err: fmt.Errorf("recording the outcome: %w", err)}
	}
	cl.recorded = &t
	return idempotency.Recording{Status: done.Status, Response: done.Response}, nil
}

// lockIntentSQL locks an intent and reads its status and provider object
// (none for an intent whose insert rolled back: a refused refund).
const lockIntentSQL = `SELECT status, coalesce(provider_id, '') FROM payment_intents
 WHERE idempotency_key = $1 AND user_id = $2 FOR UPDATE`

// markUnknown records that the provider's answer proved nothing: the
// intent stays open (UNKNOWN) with the same provider key, and cause is
// what the caller gets.
func (c *Client) markUnknown(ctx context.Context, s subject, cause error) error {
	if _, err := c.pool.Exec(ctx, settleIntentSQL, s.key, s.scope, string(IntentUnknown), "", ""); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// succeededAfterDecline: the provider reports that the intent's own
// object, recorded DECLINED, succeeded afterwards (a Stripe PaymentIntent
// confirmed again after its decline returned it to requires_payment_method,
// a PayPal order captured after INSTRUMENT_DECLINED): the money moved. The
// charge is posted (its entry's key is the intent's, so a repeated posting
// is a replay) and the key's record, which answered the decline, answers
// the success from then on.
func succeededAfterDecline(s subject, providerID string) transition {
	t := succeeded(s, providerID)
	t.supersede = true
	return t
}

// refundFailedAfterSuccess: the provider reports that the refund intent's
// own refund, recorded SUCCEEDED, failed afterwards (Stripe's failed
// refunds, Adyen's REFUND_FAILED): the money is back at the provider. The
// refund's entry is reversed by an entry of its own, its reservation on the
// charge is released (the amount can be refunded again, under a new key),
// the intent is FAILED with the provider's reason, and the key's record
// answers the failure from then on: a retry of the key never refunds again.
func refundFailedAfterSuccess(s subject, providerID, reason string) transition {
	t := result(s, IntentFailed, providerID, reverseRefund)
	t.declineCode = reason
	t.supersede = true
	return t
}
