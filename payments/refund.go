package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

// RefundParams describes one refund of a charge.
type RefundParams struct {
	Scope string
	// Key is the client's idempotency key for this refund (its own, not
	// the charge's).
	Key string
	// ChargeKey is the client's key of the charge to refund.
	ChargeKey string
	// Amount is what to refund: all or part of the charge, in its currency.
	Amount money.Money
}

const chargeForRefundSQL = `SELECT provider, provider_id, status, amount::text, currency
  FROM payment_intents WHERE idempotency_key = $1 AND user_id = $2 AND kind = 'CHARGE'`

// insertRefundSQL records the refund intent; reserveRefundSQL reserves its
// amount on the charge in the same transaction. chk_refunds_within_charge
// refuses a reservation beyond the charge, whatever runs concurrently.
const insertRefundSQL = `INSERT INTO payment_intents
    (idempotency_key, user_id, kind, provider, provider_key, amount, currency, recipient, payment_method, charge_key,
     client_key, attempt_sent_at, attempt_sends, attempt_last_sent_at)
VALUES ($1, $2, 'REFUND', $3, $4, $5, $6, '', '', $7, $8, now(), 1, now())
ON CONFLICT (idempotency_key, user_id) DO NOTHING
RETURNING provider_key`

const reserveRefundSQL = `UPDATE payment_intents SET refund_reserved = refund_reserved + $3::numeric, updated_at = now()
 WHERE idempotency_key = $1 AND user_id = $2`

const unreserveRefundSQL = `UPDATE payment_intents SET refund_reserved = refund_reserved - $3::numeric, updated_at = now()
 WHERE idempotency_key = $1 AND user_id = $2`

// Refund refunds p.Amount of a succeeded charge once for (p.Scope, p.Key).
// Its amount is reserved on the charge before the provider is called, so
// concurrent refunds can never exceed the charge (the database refuses).
//
// Errors: as [Client.Charge], plus *provider.InvalidRequestError with Code
// "refund_exceeds_charge" (errors.Is provider.ErrRefundExceedsCharge) and
// idempotency.ErrNotFound when the charge does not exist or has not
// succeeded.
func (c *Client) Refund(ctx context.Context, p RefundParams) (Outcome, error) {
	return c.RefundTx(ctx, p, nil)
}

// RefundTx is [Client.Refund] with fn run inside the transaction that
// records the refund's outcome (see [TxFunc]).
func (c *Client) RefundTx(ctx context.Context, p RefundParams, fn TxFunc) (out Outcome, err error) {
	chargeKey, err := ChargeKey(p.Scope, p.ChargeKey)
	if err != nil {
		return Outcome{}, err
	}
	key, err := RefundKey(p.Scope, p.Key)
	if err != nil {
		return Outcome{}, err
	}
	if !p.Amount.IsPositive() {
		return Outcome{}, &ConfigError{"Amount", fmt.Sprintf("a refund must be positive, got %s", p.Amount)}
	}
	var provName, status, amount, currency string
	var chargeID *string
	err = c.pool.QueryRow(ctx, chargeForRefundSQL, chargeKey, p.Scope).Scan(&provName, &chargeID, &status, &amount, &currency)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (status != string(IntentSucceeded) || chargeID == nil)) {
		return Outcome{}, fmt.Errorf("payments: no succeeded charge with this ChargeKey (%s) in this scope: %w", idempotency.ShortHash(p.ChargeKey), idempotency.ErrNotFound)
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("payments: read charge: %w", err)
	}
	if string(p.Amount.Currency()) != currency {
		return Outcome{}, &ConfigError{"Amount", fmt.Sprintf("the charge is in %s, not %s", currency, p.Amount.Currency())}
	}
	prov := c.providers[provName]
	if prov == nil {
		return Outcome{}, &ConfigError{"Provider", fmt.Sprintf("the charge's provider %q is not configured", provName)}
	}
	if v, ok := prov.(provider.RefundValidator); ok {
		if err := v.ValidateRefund(provider.RefundRequest{Key: key, ProviderKey: provider.DeriveKey(key, provider.StepRefund, 0, provider.MaxReferenceLen(prov)),
			ChargeID: *chargeID, Amount: p.Amount}); err != nil {
			return Outcome{}, err
		}
	}
	fp, err := refundFingerprint(chargeKey, p.Amount)
	if err != nil {
		return Outcome{}, err
	}
	req := idempotency.Request{Scope: p.Scope, Key: key, Fingerprint: fp}
	ctx, span := c.startCall(ctx, "payments.refund", provName, req)
	defer func() { endCall(span, out, err) }()
	cl := &call{fn: fn}
	res, err := c.exec.DoRecording(ctx, req, func(ctx context.Context, lease idempotency.Lease) (idempotency.Recording, error) {
		c.hooks.call(pointAfterClaim, c.hooks.afterClaim, ctx, req.Key)
		cl.lease = lease
		return c.refund(ctx, cl, prov, req, chargeKey, *chargeID, p.Key, p.Amount)
	})
	c.hooks.call(pointAfterCommit, c.hooks.afterCommit, ctx, req.Key)
	return c.outcome(res, err, provName, cl)
}

func (c *Client) refund(ctx context.Context, cl *call, prov provider.Provider, req idempotency.Request, chargeKey, chargeID, clientKey string, amount money.Money) (idempotency.Recording, error) {
	pkey := provider.DeriveKey(req.Key, provider.StepRefund, 0, provider.MaxReferenceLen(prov))
	subj := subject{scope: req.Scope, key: req.Key, kind: KindRefund, provider: prov.Name(), amount: amount, chargeKey: chargeKey}
	var prior priorIntent
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, insertRefundSQL, req.Key, req.Scope, prov.Name(), pkey, amount.AmountString(), string(amount.Currency()),
			chargeKey, clientKey).Scan(&pkey)
		if errors.Is(err, pgx.ErrNoRows) {
			// Recorded (and reserved) by an earlier attempt: reuse its key.
			err = prior.scan(tx.QueryRow(ctx, resumeIntentSQL, req.Key, req.Scope))
			pkey = prior.providerKey
			return err
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, reserveRefundSQL, chargeKey, req.Scope, amount.AmountString())
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.CheckViolation {
		inv := &provider.InvalidRequestError{Provider: "payonce", Code: "refund_exceeds_charge", Param: "amount",
			Message: "the refunds of this charge would exceed what it captured"}
		// The intent and its reservation rolled back: only the record
		// keeps the refusal.
		t := refused(subj, inv, "")
		t.effect = moveNothing
		return c.record(ctx, cl, subj, t)
	}
	if isForeignKeyUse(err) {
		return idempotency.Recording{}, foreignKey("refund")
	}
	if err != nil {
		return idempotency.Recording{}, fmt.Errorf("payments: record refund intent: %w", err)
	}
	if prior.final() {
		return c.record(ctx, cl, subj, decideSettled(subj, IntentStatus(prior.status), prior.providerID, prior.declineCode))
	}
	if prior.status == string(IntentNeedsReview) {
		return idempotency.Recording{}, &UnderReviewError{Reason: prior.reviewReason}
	}
	if prior.open() && c.beyondWindow(prov, provider.StepRefund, prior) {
		in := Examined{Scope: req.Scope, Key: req.Key, Kind: KindRefund, Provider: prov.Name(), ProviderKey: pkey,
			ProviderID: prior.providerID, Attempt: prior.attempt, Status: IntentStatus(prior.status), Amount: amount,
			ChargeKey: chargeKey, ChargeID: chargeID, SentAt: prior.sentAt, Sends: prior.sends, LastSentAt: prior.lastSentAt}
		return c.settleBeyondWindow(ctx, cl, prov, in)
	}
	c.hooks.call(pointAfterIntent, c.hooks.afterIntent, ctx, req.Key)
	// A holder whose lease may have ended (heartbeats unconfirmed past
	// its local deadline, or paused beyond it) sends nothing: another
	// holder may own the key by now. The intent stays open with the same
	// provider key; a retry re-drives it.
	if err := idempotency.CheckLease(ctx); err != nil {
		return idempotency.Recording{}, err
	}
	started := time.Now()
	pctx, pspan := c.startProvider(ctx, provider.StepRefund, prov.Name(), pkey)
	rres, rerr := prov.Refund(pctx, provider.RefundRequest{Key: req.Key, ProviderKey: pkey, ChargeID: chargeID, Amount: amount})
	endProvider(pspan, rres.ProviderID, rres.RequestID, string(rres.Status), rres.Replayed, rerr)
	c.hooks.call(pointAfterProvider, c.hooks.afterProvider, ctx, req.Key)
	c.metrics.observe(ctx, "refund", prov.Name(), string(rres.Status), rerr, time.Since(started))
	// A resumed attempt is settled by a refusal only when the provider
	// replayed it (see decide).
	t, err := decideRefund(subj, prior.open(), rres, rerr)
	if err != nil {
		// Unknown, refused credentials, a refusal of a resumed attempt:
		// the reservation stays until the outcome is known.
		if errors.Is(err, provider.ErrCredentials) {
			c.log.Error("payments: provider refused our credentials; the refund stays open", "key", idempotency.ShortHash(req.Key),
				"provider", prov.Name(), "err", err)
		}
		return idempotency.Recording{}, c.markUnknown(ctx, subj, err)
	}
	return c.record(ctx, cl, subj, t)
}

// outcome turns Do's answer into an Outcome or the permanent error: this
// call's own transition as it is, a replay decoded from the record.
func (c *Client) outcome(res idempotency.Result, err error, provider string, cl *call) (Outcome, error) {
	if t := cl.recorded; t != nil && !res.Replayed {
		switch {
		case t.answer.Decline != nil:
			return Outcome{Status: IntentDeclined, Provider: provider}, t.answer.Decline
		case t.answer.Invalid != nil:
			return Outcome{Status: IntentFailed, Provider: provider}, t.answer.Invalid
		}
		return t.outcome(), nil
	}
	var fe *idempotency.FailedError
	switch {
	case err == nil:
		var s stored
		if jerr := json.Unmarshal(res.Response.Body, &s); jerr != nil || s.Result == nil {
			return Outcome{}, fmt.Errorf("payments: stored outcome unreadable: %v", jerr)
		}
		out := *s.Result
		out.Replayed = res.Replayed
		return out, nil
	case errors.As(err, &fe):
		var s stored
		if jerr := json.Unmarshal(fe.Response.Body, &s); jerr != nil {
			return Outcome{}, fmt.Errorf("payments: stored failure unreadable: %v", jerr)
		}
		switch {
		case s.Decline != nil:
			return Outcome{Status: IntentDeclined, Provider: provider, Replayed: fe.Replayed}, s.Decline
		case s.Invalid != nil:
			return Outcome{Status: IntentFailed, Provider: provider, Replayed: fe.Replayed}, s.Invalid
		}
	}
	return Outcome{}, err
}

// postRefund records a succeeded refund in the ledger, and has the
// reconciler check the charge's refunded total against the provider's
// again.
func (c *Client) postRefund(ctx context.Context, tx pgx.Tx, key, scope, chargeKey, provider string, amount money.Money) error {
	entry, err := ledger.RefundEntry(key, provider, amount)
	if err != nil {
		return err
	}
	if _, err = c.ledger.PostTx(ctx, tx, entry); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE payment_intents SET verified_at = NULL, updated_at = now()
		WHERE idempotency_key = $1 AND user_id = $2`, chargeKey, scope)
	return err
}
