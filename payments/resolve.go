package payments

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/internal/crashpoint"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

// Examined is an intent as the reconciler reads it (see [Operator.Resolve]).
type Examined struct {
	Scope string
	// Key is payonce's key of the action ("<scope>_charge_<client key>").
	Key string
	// Kind is KindCharge or KindRefund.
	Kind                     IntentKind
	Provider                 string
	ProviderKey, ProviderID  string
	Attempt                  int
	Status                   IntentStatus
	Amount                   money.Money
	Recipient, PaymentMethod string
	// ChargeKey and ChargeID name a refund's charge (payonce's key and the
	// provider's id).
	ChargeKey, ChargeID  string
	CreatedAt, UpdatedAt time.Time
	// SentAt is when the attempt's references were first sent (the
	// database's clock); zero when the attempt was reopened and not sent
	// since.
	SentAt time.Time
	// Sends counts the sends of the attempt's references when the intent
	// was read, and LastSentAt is the last one's time (zero: never sent).
	// A proof is applied only while the intent's attempt and send counter
	// are still these: see [Operator.Resolve].
	Sends      int
	LastSentAt time.Time

	// hold is the key's lease taken by [Operator.Hold], shared by copies.
	hold *hold
}

// hold is the key's lease an examination holds from before its lookup
// until its proof is applied or it lets go.
type hold struct {
	lease idempotency.Lease
	// leased is false when the key's record was complete (a PENDING or
	// REQUIRES_ACTION answer is replayed): no call can send the attempt
	// then, and no lease is needed.
	leased bool
	done   bool
}

// ErrChanged is returned by [Operator.Resolve] when the intent's attempt
// was sent again (or reopened) after the intent was examined: the proof
// may be stale (a retry's send can have charged after the lookup began).
// Nothing was done; look again.
var ErrChanged = sentinel("payments: intent changed since it was examined; look again", false)

// Hold claims the key of the open intent in before its lookup, so that no
// call can send the intent's attempt again while the lookup runs and its
// proof is applied: a retry meanwhile is answered "in progress". It
// returns the intent as read again under that lease (its attempt and send
// counter current), to look up and then settle with [Operator.Resolve];
// [Operator.Release] lets go of a hold that settled nothing.
//
// Errors: *idempotency.InProgressError (a call holds the key right now:
// look again later), ErrNotOpen (settled meanwhile: nothing to do),
// *ConfigError.
func (o *Operator) Hold(ctx context.Context, in Examined) (Examined, error) {
	c := o.c
	if c.providers[in.Provider] == nil {
		return in, &ConfigError{"Provider", fmt.Sprintf("the intent's provider %q is not configured", in.Provider)}
	}
	h := &hold{}
	claim, err := c.claimIntent(ctx, in)
	if err != nil {
		return in, err
	}
	switch claim.State {
	case idempotency.ClaimAcquired, idempotency.ClaimReclaimed:
		h.lease, h.leased = claim.Lease, true
	case idempotency.ClaimReplay:
	case idempotency.ClaimInProgress:
		return in, &idempotency.InProgressError{RetryAfter: claim.RetryAfter}
	default:
		return in, fmt.Errorf("payments: hold: claim state %v", claim.State)
	}
	fresh := in
	fresh.hold = h
	var status string
	var sentAt, lastSentAt *time.Time
	err = c.pool.QueryRow(ctx, heldIntentSQL, in.Key, in.Scope).Scan(&status, &fresh.Attempt, &fresh.ProviderKey, &fresh.ProviderID,
		&sentAt, &fresh.Sends, &lastSentAt, &fresh.UpdatedAt)
	if err == nil && !openStatus[status] {
		err = ErrNotOpen
	}
	if err != nil {
		o.Release(ctx, fresh)
		return in, err
	}
	fresh.Status = IntentStatus(status)
	fresh.SentAt, fresh.LastSentAt = time.Time{}, time.Time{}
	if sentAt != nil {
		fresh.SentAt = *sentAt
	}
	if lastSentAt != nil {
		fresh.LastSentAt = *lastSentAt
	}
	return fresh, nil
}

// heldIntentSQL reads an intent again once its key is held.
const heldIntentSQL = `SELECT status, attempt, provider_key, coalesce(provider_id, ''), attempt_sent_at, attempt_sends,
       attempt_last_sent_at, updated_at
  FROM payment_intents WHERE idempotency_key = $1 AND user_id = $2`

// Release lets go of the key held for in by [Operator.Hold], when its
// proof was not applied (an outage, an inconclusive lookup). It is a
// no-op for an intent not held or already settled through the hold.
func (o *Operator) Release(ctx context.Context, in Examined) {
	h := in.hold
	if h == nil || h.done {
		return
	}
	h.done = true
	if h.leased {
		_ = o.c.store.Release(context.WithoutCancel(ctx), h.lease)
	}
}

// Proof is what the provider showed about an intent's outcome.
type Proof struct {
	// Status is IntentSucceeded, IntentDeclined, IntentFailed (the attempt
	// provably left no payment: voided, or never created per a consistent
	// lookup), IntentRequiresAction (the provider waits for the customer)
	// or IntentNeedsReview (no proof either way).
	Status      IntentStatus
	ProviderID  string
	DeclineCode string
	// Reason says what proves it, or why a human must look.
	Reason string
	// NextAttempt, with IntentFailed, reopens the intent under the next
	// attempt number instead of failing it: the next retry of the key
	// calls the provider with new derived references (the old ones are
	// proven void and must never be reused).
	NextAttempt bool
}

// ErrNotOpen is returned by [Operator.Resolve] when the intent was settled
// meanwhile (by a webhook, a retry or another reconciler): nothing done.
var ErrNotOpen = sentinel("payments: intent no longer open", false)

// Resolve applies proof to an open intent: under the key's lease (the one
// [Operator.Hold] took for in, else it claims the key now: a live call
// holding it gives idempotency.ErrInProgress, look again later), in ONE
// transaction it sets the intent's outcome, posts to the ledger where
// money moved, completes the idempotency record with the response a
// replay will serve (a retry then gets the outcome, never a new charge),
// and runs audit in the same transaction.
//
// The decision is a compare-and-set on what was examined: the intent must
// still be open, on in.Attempt, with in.Sends sends. An intent settled
// meanwhile gives ErrNotOpen; one whose attempt was sent again or
// reopened since gives ErrChanged (the proof may predate that send). Both
// change nothing. A lost lease gives idempotency.ErrLeaseLost.
func (o *Operator) Resolve(ctx context.Context, in Examined, p Proof, audit func(ctx context.Context, tx pgx.Tx) error) error {
	return o.c.resolve(ctx, in, p, settleOpen, audit)
}

// ErrNotUnderReview is returned by [Client.ResolveReview] for an intent
// that is not NEEDS_REVIEW: nothing done.
var ErrNotUnderReview = sentinel("payments: intent not under review", false)

// ResolveReview settles an intent flagged NEEDS_REVIEW with a human's
// decision (from the provider's own records): IntentSucceeded with the
// charge kept (its ProviderID), IntentDeclined or IntentFailed. As
// [Operator.Resolve]: one transaction with the ledger entry where money
// moved, the key's idempotency record answering the decision, and audit.
// The record is completed under the key's lease when it was in progress,
// or superseded when it was finished (a REQUIRES_ACTION or PENDING answer
// the reconciler gave up on, an outcome a provider overturned): either
// way every later retry of the key gets the decision, never the answer
// first recorded. key is payonce's key ("<scope>_charge_<client key>" or
// "..._refund_..."). Errors: idempotency.ErrNotFound, ErrNotUnderReview,
// *ConfigError for a proof that is not a decision, and audit's error
// (nothing changed then).
func (o *Operator) ResolveReview(ctx context.Context, scope, key string, p Proof, audit func(ctx context.Context, tx pgx.Tx) error) error {
	c := o.c
	switch {
	case p.NextAttempt:
		return &ConfigError{"Proof.NextAttempt", "a review ends the intent; a new purchase takes a new key"}
	case p.Status != IntentSucceeded && p.Status != IntentDeclined && p.Status != IntentFailed:
		return &ConfigError{"Proof.Status", fmt.Sprintf("%q: a review ends SUCCEEDED, DECLINED or FAILED", p.Status)}
	case p.Status == IntentSucceeded && p.ProviderID == "":
		return &ConfigError{"Proof.ProviderID", "the provider's id of the charge (or refund) kept is required"}
	}
	var in Examined
	var status, amount, currency string
	err := c.pool.QueryRow(ctx, `SELECT kind, provider, provider_key, coalesce(provider_id, ''), attempt, status, amount::text, currency,
		recipient, payment_method, coalesce(charge_key, ''), created_at, updated_at
		FROM payment_intents WHERE idempotency_key = $1 AND user_id = $2`, key, scope).
		Scan(&in.Kind, &in.Provider, &in.ProviderKey, &in.ProviderID, &in.Attempt, &status, &amount, &currency,
			&in.Recipient, &in.PaymentMethod, &in.ChargeKey, &in.CreatedAt, &in.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("payments: no intent %s in scope %s: %w", idempotency.ShortHash(key), scope, idempotency.ErrNotFound)
	}
	if err != nil {
		return err
	}
	if status != string(IntentNeedsReview) {
		return fmt.Errorf("payments: the intent is %s: %w", status, ErrNotUnderReview)
	}
	in.Amount, err = money.Parse(amount, money.Currency(currency))
	if err != nil {
		return err
	}
	in.Scope, in.Key, in.Status = scope, key, IntentStatus(status)
	if err := c.checkReviewProof(in, p); err != nil {
		return err
	}
	crashpoint.Reach(ctx, crashpoint.OperatorBeforeApply, key)
	return c.resolve(ctx, in, p, settleReview, audit)
}

// settleMode says which intents a proof may settle.
type settleMode uint8

const (
	// settleOpen: an open intent (the reconciler, a retry); one settled
	// meanwhile gives ErrNotOpen.
	settleOpen settleMode = iota
	// settleReview: an intent under review (a human's decision); any
	// other gives ErrNotUnderReview.
	settleReview
)

func (c *Client) resolve(ctx context.Context, in Examined, p Proof, mode settleMode, audit func(ctx context.Context, tx pgx.Tx) error) error {
	if c.providers[in.Provider] == nil {
		return &ConfigError{"Provider", fmt.Sprintf("the intent's provider %q is not configured", in.Provider)}
	}
	if err := checkProof(p); err != nil {
		return err
	}
	if h := in.hold; h != nil {
		if h.done {
			return &ConfigError{"Examined", "its hold was released or used: hold it again"}
		}
		var lease *idempotency.Lease
		if h.leased {
			lease = &h.lease
		}
		t, _, err := c.apply(ctx, in, p, mode, lease, nil, audit)
		h.done = true
		if lease != nil && t == nil {
			_ = c.store.Release(context.WithoutCancel(ctx), *lease)
		}
		return err
	}
	claim, err := c.claimIntent(ctx, in)
	if err != nil {
		return err
	}
	var lease *idempotency.Lease
	switch claim.State {
	case idempotency.ClaimAcquired, idempotency.ClaimReclaimed:
		lease = &claim.Lease
	case idempotency.ClaimReplay:
		// The record is complete (a PENDING or REQUIRES_ACTION answer was
		// served, or an outcome a provider overturned): the intent still
		// settles; a review's decision supersedes the record (see apply),
		// otherwise replays keep serving it.
	case idempotency.ClaimInProgress:
		return &idempotency.InProgressError{RetryAfter: claim.RetryAfter}
	default:
		return fmt.Errorf("payments: resolve: claim state %v", claim.State)
	}
	t, _, err := c.apply(ctx, in, p, mode, lease, nil, audit)
	if lease != nil && t == nil {
		_ = c.store.Release(context.WithoutCancel(ctx), *lease)
	}
	return err
}

// claimIntent claims the key of the intent in with the fingerprint its
// charge or refund recorded.
func (c *Client) claimIntent(ctx context.Context, in Examined) (idempotency.Claim, error) {
	fp, err := c.intentFingerprint(ctx, in)
	if err != nil {
		return idempotency.Claim{}, err
	}
	cfg := c.exec.Config()
	return c.store.Claim(ctx, idempotency.ClaimParams{Scope: in.Scope, Key: in.Key, Fingerprint: fp,
		LockTimeout: cfg.LockTimeout, Retention: cfg.Retention})
}

// checkReviewProof refuses a human's proof that cannot be right before
// anything changes: a blank reason or decline code, or a kept id that is
// blank, padded, holds spaces or control characters, or has not the shape
// the intent's provider documents for the intent's kind
// ([provider.IDChecker]).
func (c *Client) checkReviewProof(in Examined, p Proof) error {
	switch {
	case strings.TrimSpace(p.Reason) == "":
		return &ConfigError{"Proof.Reason", "blank: say what proves the decision (it goes in the intent)"}
	case p.Status == IntentDeclined && strings.TrimSpace(p.DeclineCode) == "":
		return &ConfigError{"Proof.DeclineCode", "blank: give the provider's decline code"}
	case p.Status != IntentSucceeded:
		return nil
	}
	id := p.ProviderID
	if len(id) > 255 || strings.IndexFunc(id, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 {
		return &ConfigError{"Proof.ProviderID", fmt.Sprintf("%q is not a provider's id: at most 255 printable ASCII characters without spaces, as the provider shows it", id)}
	}
	step := provider.StepCharge
	if in.Kind == KindRefund {
		step = provider.StepRefund
	}
	if ch, ok := c.providers[in.Provider].(provider.IDChecker); ok {
		if err := ch.CheckID(step, id); err != nil {
			reason := err.Error()
			if ir := (*provider.InvalidRequestError)(nil); errors.As(err, &ir) {
				reason = ir.Message
			}
			return &ConfigError{"Proof.ProviderID", reason + "; take the id from " + in.Provider + "'s records of this intent"}
		}
	}
	return nil
}

func checkProof(p Proof) error {
	switch p.Status {
	case IntentSucceeded, IntentDeclined, IntentFailed, IntentNeedsReview, IntentRequiresAction:
		return nil
	}
	return &ConfigError{"Proof.Status", fmt.Sprintf("%q is not an outcome", p.Status)}
}

// applyUnderLease applies proof to an open intent from inside the call
// that holds the key's lease (a retry past the provider's window): the
// record completes with the intent, or, for NEEDS_REVIEW, the caller gets
// an *UnderReviewError and the lease is released by the executor.
func (c *Client) applyUnderLease(ctx context.Context, cl *call, in Examined, p Proof) (idempotency.Recording, error) {
	if err := checkProof(p); err != nil {
		return idempotency.Recording{}, err
	}
	t, done, err := c.apply(ctx, in, p, settleOpen, &cl.lease, cl.fn, nil)
	switch {
	case errors.Is(err, ErrNotOpen):
		// Settled meanwhile (a webhook under no lease): record that state.
		prior := priorIntent{}
		if rerr := prior.scan(c.pool.QueryRow(ctx, resumeIntentSQL, in.Key, in.Scope)); rerr != nil {
			return idempotency.Recording{}, rerr
		}
		if prior.status == string(IntentNeedsReview) {
			return idempotency.Recording{}, &UnderReviewError{Reason: prior.reviewReason}
		}
		return c.record(ctx, cl, subjectOf(in), decideSettled(subjectOf(in), IntentStatus(prior.status), prior.providerID, prior.declineCode))
	case err != nil:
		return idempotency.Recording{}, err
	case t != nil:
		cl.recorded = t
		return idempotency.Recording{Status: done.Status, Response: done.Response}, nil
	}
	return idempotency.Recording{}, &UnderReviewError{Reason: p.Reason}
}

// apply applies proof in ONE transaction: the intent locked and checked
// still open (or under review), its outcome, the ledger where money moved,
// a refund's reservation released where none did, fn and audit, and the
// idempotency record completed under lease (when given) with the response
// a replay serves; a review's decision without a lease supersedes the
// finished record instead. It returns the transition committed with the
// record (nil when no record was written: no lease outside a review, a
// flag for review, a new attempt).
func (c *Client) apply(ctx context.Context, in Examined, p Proof, mode settleMode, lease *idempotency.Lease, fn TxFunc,
	audit func(ctx context.Context, tx pgx.Tx) error) (committed *transition, done idempotency.Completion, err error) {
	prov := c.providers[in.Provider]
	step := provider.StepCharge
	if in.Kind == KindRefund {
		step = provider.StepRefund
	}
	if audit == nil {
		audit = func(context.Context, pgx.Tx) error { return nil }
	}
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		committed = nil
		var status string
		var attempt, sends int
		err := tx.QueryRow(ctx, `SELECT status, attempt, attempt_sends FROM payment_intents WHERE idempotency_key = $1 AND user_id = $2 FOR UPDATE`,
			in.Key, in.Scope).Scan(&status, &attempt, &sends)
		if err != nil {
			return err
		}
		switch {
		case mode == settleReview && status != string(IntentNeedsReview):
			return ErrNotUnderReview
		case mode == settleOpen && !openStatus[status]:
			return ErrNotOpen
		case mode == settleOpen && (attempt != in.Attempt || sends != in.Sends):
			// Sent again (or reopened) since it was examined: the proof
			// may predate a send that charged.
			return ErrChanged
		}
		switch {
		case p.Status == IntentFailed && p.NextAttempt:
			// The new attempt's window starts when it is first sent
			// (attempt_sent_at NULL until then).
			next := attempt + 1
			_, err := tx.Exec(ctx, `UPDATE payment_intents SET attempt = $3, provider_key = $4, provider_id = NULL,
				status = 'PENDING', attempt_sent_at = NULL, updated_at = now() WHERE idempotency_key = $1 AND user_id = $2`,
				in.Key, in.Scope, next, provider.DeriveKey(in.Key, step, next, provider.MaxReferenceLen(prov)))
			if err != nil {
				return err
			}
			return audit(ctx, tx)
		case p.Status == IntentNeedsReview:
			_, err := tx.Exec(ctx, `UPDATE payment_intents SET status = 'NEEDS_REVIEW', review_reason = $3, updated_at = now()
				WHERE idempotency_key = $1 AND user_id = $2`, in.Key, in.Scope, p.Reason)
			if err != nil {
				return err
			}
			return audit(ctx, tx)
		}
		t := decideProof(subjectOf(in), p)
		if err := c.commit(ctx, tx, subjectOf(in), t, fn); err != nil {
			return err
		}
		if err := audit(ctx, tx); err != nil {
			return err
		}
		if lease == nil && mode == settleReview {
			// The key's record is finished (the claim replayed it): it
			// answers what it said before the review (a REQUIRES_ACTION,
			// a PENDING, an outcome the provider overturned). From this
			// commit on it answers the decision.
			if err := c.supersede(ctx, tx, subjectOf(in), t); err != nil {
				return err
			}
			committed = &t
			return nil
		}
		if lease == nil {
			return nil
		}
		if done, err = c.completion(t); err != nil {
			return err
		}
		if err := c.store.CompleteTx(ctx, tx, *lease, done); err != nil {
			return err
		}
		committed = &t
		return nil
	})
	if err != nil {
		committed = nil
	}
	return committed, done, err
}
