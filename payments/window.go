package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/payonce/payonce/idempotency"
)

// Kinds of intent (payment_intents.kind).
const (
	KindCharge = "CHARGE"
	KindRefund = "REFUND"
)

// DefaultWindowMargin is the default of Config.WindowMargin.
const DefaultWindowMargin = time.Hour

// beyondWindow reports whether the references of prior's attempt may no
// longer be re-sent: the provider deduplicates them only for its window
// (Stripe prunes keys after 24 hours and treats a reused one as a new
// request; PayPal keeps an order's request ids 6 hours). The age is the
// database's, from when the attempt was first sent; the margin covers the
// skew between the database's clock and the provider's.
func (c *Client) beyondWindow(prov Provider, step string, prior priorIntent) bool {
	return prior.now.Sub(prior.sentAt) >= DedupWindowOf(prov, step)-c.windowMargin
}

// settleBeyondWindow resolves an open intent whose references are past
// the provider's window without sending anything: it looks the attempt up
// and applies what that proves, under the caller's lease. Without proof
// the intent goes to NEEDS_REVIEW and the caller gets a
// *NeedsReviewError; a failed lookup (an outage) leaves everything as it
// was and answers an *UnknownOutcomeError (retry later).
func (c *Client) settleBeyondWindow(ctx context.Context, lease idempotency.Lease, prov Provider, in Examined, fn TxFunc) (idempotency.Response, error) {
	step := StepCharge
	if in.Kind == KindRefund {
		step = StepRefund
	}
	window := DedupWindowOf(prov, step)
	proof, err := LookupBeyondWindow(ctx, prov, in, window)
	if err != nil {
		return idempotency.Response{}, &UnknownOutcomeError{Provider: prov.Name(),
			Err: fmt.Errorf("past the provider's deduplication window (%s) the attempt is looked up, not re-sent: %w", window, err)}
	}
	c.log.Warn("payments: a retry came past the provider's deduplication window; looked up instead of re-sent",
		"key", idempotency.ShortHash(in.Key), "provider", in.Provider, "window", window, "proof", proof.Status)
	return c.applyUnderLease(ctx, lease, in, proof, fn)
}

// LookupBeyondWindow asks prov what the attempt of the open intent in did,
// for an attempt whose references are past the provider's deduplication
// window (they must never be sent again: the provider would take them for
// a new request). It returns the proof to apply: the provider's charge
// (or refund) when a lookup finds exactly one, IntentFailed when a
// consistent lookup finds none, and IntentNeedsReview, with the reason,
// when the provider cannot tell or its answer is not proof (several
// objects, another amount, an eventually consistent "none"). An error is
// an outage or a charge still pending at the provider: look again later.
func LookupBeyondWindow(ctx context.Context, prov Provider, in Examined, window time.Duration) (Proof, error) {
	past := fmt.Sprintf("past %s's deduplication window (%s) for attempt %d", in.Provider, window, in.Attempt)
	review := func(why string) (Proof, error) {
		return Proof{Status: IntentNeedsReview, Reason: past + ": " + why}, nil
	}
	from := in.SentAt
	if from.IsZero() {
		from = in.CreatedAt
	}
	if in.Kind == KindRefund {
		rl, ok := prov.(RefundLooker)
		if !ok {
			return review("the provider has no refund lookup; only its notification can tell")
		}
		res, err := rl.LookupRefund(ctx, RefundLookupRequest{Key: in.Key, ProviderKey: in.ProviderKey,
			ProviderID: in.ProviderID, ChargeID: in.ChargeID})
		switch {
		case errors.Is(err, ErrCannotTell):
			return review(err.Error())
		case err != nil:
			return Proof{}, err
		}
		switch {
		case len(res.Refunds) > 1:
			return review(fmt.Sprintf("%d refunds at the provider for one attempt", len(res.Refunds)))
		case len(res.Refunds) == 1:
			rf := res.Refunds[0]
			switch {
			case rf.Amount.Currency() != "" && !rf.Amount.Equal(in.Amount):
				return review("the provider refunded " + rf.Amount.String() + ", the intent is " + in.Amount.String())
			case rf.Status == RefundSucceeded:
				return Proof{Status: IntentSucceeded, ProviderID: rf.ProviderID, Reason: past + ": the provider reports the refund succeeded"}, nil
			case rf.Status == RefundFailed:
				return Proof{Status: IntentFailed, ProviderID: rf.ProviderID, Reason: past + ": the provider reports the refund failed"}, nil
			}
			return Proof{}, errors.New("the refund is still pending at the provider")
		case res.Consistent:
			return Proof{Status: IntentFailed, Reason: past + ": a consistent lookup found no refund for this attempt"}, nil
		}
		return review("the provider's lookup found no refund, and it is not proof of absence")
	}
	res, err := prov.Lookup(ctx, LookupRequest{Key: in.Key, ProviderKey: in.ProviderKey, ProviderID: in.ProviderID,
		From: from.Add(-10 * time.Minute), To: time.Now().Add(5 * time.Minute)})
	switch {
	case errors.Is(err, ErrCannotTell):
		return review(err.Error())
	case err != nil:
		return Proof{}, err
	}
	switch {
	case len(res.Charges) > 1:
		return review(fmt.Sprintf("%d charges at the provider for one attempt", len(res.Charges)))
	case len(res.Charges) == 1:
		ch := res.Charges[0]
		switch {
		case ch.Amount.Currency() != "" && !ch.Amount.Equal(in.Amount):
			return review("the provider charged " + ch.Amount.String() + ", the intent is " + in.Amount.String())
		case ch.Status == ChargeSucceeded:
			return Proof{Status: IntentSucceeded, ProviderID: ch.ProviderID, Reason: past + ": the provider reports the charge succeeded"}, nil
		case ch.Status == ChargeFailed:
			return Proof{Status: IntentDeclined, ProviderID: ch.ProviderID, DeclineCode: "declined",
				Reason: past + ": the provider reports the charge failed"}, nil
		case ch.Status == ChargeRequiresAction:
			return Proof{Status: IntentRequiresAction, ProviderID: ch.ProviderID, Reason: past + ": the provider waits for the customer"}, nil
		}
		return Proof{}, errors.New("the charge is still pending at the provider")
	case res.Consistent:
		return Proof{Status: IntentFailed, Reason: past + ": a consistent lookup found no charge for this attempt"}, nil
	}
	return review("the provider's lookup found no charge, and it is not proof of absence")
}

// isForeignKeyUse reports the unique violation of a client key another
// scope already used (uq_payment_intents_client_key).
func isForeignKeyUse(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation && pgErr.ConstraintName == "uq_payment_intents_client_key"
}

// foreignKey is the answer to a client key that belongs to another scope:
// the claim is taken back (nothing stays recorded) and the caller gets
// idempotency.ErrForeignKey, which HTTP services answer 404.
func foreignKey(action string) error {
	return idempotency.Abandon(fmt.Errorf("payments: this %s key belongs to another scope: %w", action, idempotency.ErrForeignKey))
}
