package payments

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/payments/provider"
)

// A provider can overturn a state payonce recorded as final: a Stripe
// PaymentIntent declined, then confirmed again with another card (its
// decline returned it to requires_payment_method: "the payment can be
// retried", https://docs.stripe.com/payments/paymentintents/lifecycle); a
// PayPal order captured after INSTRUMENT_DECLINED once the payer chose
// another funding source
// (https://developer.paypal.com/docs/checkout/standard/customize/handle-funding-failures/);
// a refund that succeeded and failed afterwards (Stripe's failed refunds,
// refund status failed with failure_reason, https://docs.stripe.com/refunds;
// Adyen's REFUND_FAILED and REFUNDED_REVERSED,
// https://docs.adyen.com/api-explorer/Webhooks/1/post/REFUND_FAILED).
// Money moved (or came back) after the record said otherwise, so the
// webhook that says so books it, in the transaction that stores the event:
// a named transition (succeededAfterDecline, refundFailedAfterSuccess) with
// its ledger entry, and the key's idempotency record superseded so that a
// retry of the key gets the outcome that is true now. The event keeps its
// outcome (EventSucceededAfterDecline, EventRefundFailedAfterSuccess), the
// reconciler reports it. What cannot be booked safely goes to review
// (EventNeedsReview).

// overturned are the event outcomes that changed a final intent.
var overturned = map[string]bool{EventSucceededAfterDecline: true, EventRefundFailedAfterSuccess: true, EventNeedsReview: true}

// decideSuccessAfterDecline is what a success event proves for a DECLINED
// charge intent, once otherObject found no other object named: booked when
// the intent names its declined object (the success is that object's);
// review when it names none, since nothing then says that the object that
// succeeded is this intent's rather than another attempt's; a conflict
// (reported, nothing changes) when the event names no object at all.
func decideSuccessAfterDecline(s subject, in intentRow, ev provider.WebhookEvent) (outcome, detail string, t *transition) {
	named := ev.ProviderID
	if ev.Kind == provider.EventCaptureSucceeded && ev.ChargeID != "" {
		named = ev.ChargeID
	}
	switch {
	case named == "":
		return EventConflict, "the provider reports success, without naming an object, for this intent recorded " + in.status, nil
	case in.providerID == nil || *in.providerID == "":
		return EventNeedsReview, fmt.Sprintf("the provider reports %s succeeded for this intent, recorded DECLINED without naming "+
			"the declined object: nothing proves the success is the declined attempt's; look %s up at %s and settle",
			named, named, s.provider), nil
	}
	tr := succeededAfterDecline(s, *in.providerID)
	return EventSucceededAfterDecline, fmt.Sprintf("the provider reports %s succeeded after it declined (%s): charge booked, "+
		"the key's record answers the success", named, in.status), &tr
}

// decideRefundFailedAfterSuccess is what a refund failure proves for a
// SUCCEEDED refund intent: its own refund failed (reversed), unless the
// event names another refund than the intent's (a conflict: nothing of
// this intent changed).
func decideRefundFailedAfterSuccess(s subject, in intentRow, ev provider.WebhookEvent) (outcome, detail string, t *transition) {
	if in.providerID != nil && *in.providerID != "" && ev.ProviderID != "" && ev.ProviderID != *in.providerID {
		return EventConflict, fmt.Sprintf("the provider reports refund %s failed; this intent's refund is %s", ev.ProviderID, *in.providerID), nil
	}
	reason := ev.DeclineCode
	if reason == "" {
		reason = "refund_failed"
	}
	id := ev.ProviderID
	if in.providerID != nil && *in.providerID != "" {
		id = *in.providerID
	}
	tr := refundFailedAfterSuccess(s, id, reason)
	return EventRefundFailedAfterSuccess, fmt.Sprintf("the provider reports the refund failed after it succeeded (%s): "+
		"refund reversed, its amount refundable again under a new key", reason), &tr
}

// supersede replaces the key's idempotency record with t's answer, inside
// the transaction that commits t (pgstore's SupersedeTx): whatever it
// answered (a decline, a refund's success), and whoever held it (a call
// still running loses its lease: its own outcome rolls back and its caller
// gets an unknown outcome, which a retry resolves to this answer). No
// record, or an expired one, is left alone: a request with the key is
// then a new one, and finds the intent final.
func (c *Client) supersede(ctx context.Context, tx pgx.Tx, s subject, t transition) error {
	done, err := c.completion(t)
	if err != nil {
		return err
	}
	_, err = c.store.SupersedeTx(ctx, tx, s.scope, s.key, done)
	return err
}

// flagReviewSQL sends a final intent a provider overturned to review.
const flagReviewSQL = `UPDATE payment_intents SET status = 'NEEDS_REVIEW', review_reason = $3, updated_at = now()
 WHERE idempotency_key = $1 AND user_id = $2`

// flagReview sends the intent to review with reason. Its key's record is
// left as it is until a human decides ([Operator.ResolveReview]).
func (c *Client) flagReview(ctx context.Context, tx pgx.Tx, s subject, reason string) error {
	_, err := tx.Exec(ctx, flagReviewSQL, s.key, s.scope, reason)
	return err
}

// reverseRefund posts the reversal of a refund's entry (under the refund's
// key, step refund_reversal: a repeated posting is a replay), gives its
// reservation on the charge back, and has the reconciler check the
// charge's refunded total again.
func (c *Client) reverseRefund(ctx context.Context, tx pgx.Tx, s subject) error {
	entry, err := ledger.RefundReversalEntry(s.key, s.provider, s.amount)
	if err != nil {
		return err
	}
	if _, err := c.ledger.PostTx(ctx, tx, entry); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, unreserveRefundSQL, s.chargeKey, s.scope, s.amount.AmountString()); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE payment_intents SET verified_at = NULL, updated_at = now()
		WHERE idempotency_key = $1 AND user_id = $2`, s.chargeKey, s.scope)
	return err
}
