package payments

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
)

// IntentKind is what an intent is for (payment_intents.kind).
type IntentKind string

// Kinds of intent.
const (
	KindCharge IntentKind = "CHARGE"
	KindRefund IntentKind = "REFUND"
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
func (c *Client) settleBeyondWindow(ctx context.Context, cl *call, prov Provider, in Examined) (idempotency.Recording, error) {
	step := StepCharge
	if in.Kind == KindRefund {
		step = StepRefund
	}
	window := DedupWindowOf(prov, step)
	proof, err := LookupBeyondWindow(ctx, prov, in, window)
	if err != nil {
		return idempotency.Recording{}, &UnknownOutcomeError{Provider: prov.Name(),
			Err: fmt.Errorf("past the provider's deduplication window (%s) the attempt is looked up, not re-sent: %w", window, err)}
	}
	c.log.Warn("payments: a retry came past the provider's deduplication window; looked up instead of re-sent",
		"key", idempotency.ShortHash(in.Key), "provider", in.Provider, "window", window, "proof", proof.Status)
	return c.applyUnderLease(ctx, cl, in, proof)
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
	from := in.SentAt
	if from.IsZero() {
		from = in.CreatedAt
	}
	noun := "charge"
	var found []foundObject
	var consistent bool
	var err error
	if in.Kind == KindRefund {
		noun = "refund"
		found, consistent, err = lookupRefundObjects(ctx, prov, in)
	} else {
		var res LookupResult
		res, err = prov.Lookup(ctx, LookupRequest{Key: in.Key, ProviderKey: in.ProviderKey, ProviderID: in.ProviderID,
			From: from.Add(-10 * time.Minute), To: LookupUntil(from, window)})
		for _, ch := range res.Charges {
			f := foundObject{id: ch.ProviderID, amount: ch.Amount}
			switch ch.Status {
			case ChargeSucceeded:
				f.status = IntentSucceeded
			case ChargeFailed:
				f.status = IntentDeclined
			case ChargeRequiresAction:
				f.status = IntentRequiresAction
			}
			found = append(found, f)
		}
		consistent = res.Consistent
	}
	past := fmt.Sprintf("past %s's deduplication window (%s) for attempt %d", in.Provider, window, in.Attempt)
	review := func(why string) (Proof, error) {
		return Proof{Status: IntentNeedsReview, Reason: past + ": " + why}, nil
	}
	switch {
	case errors.Is(err, ErrCannotTell):
		return review(err.Error())
	case err != nil:
		return Proof{}, err
	case len(found) > 1:
		return review(fmt.Sprintf("%d %ss at the provider for one attempt", len(found), noun))
	case len(found) == 0 && consistent:
		return Proof{Status: IntentFailed, Reason: past + ": a consistent lookup found no " + noun + " for this attempt"}, nil
	case len(found) == 0:
		return review("the provider's lookup found no " + noun + ", and that is not proof of absence")
	}
	f := found[0]
	switch {
	case f.amount.Currency() != "" && !f.amount.Equal(in.Amount):
		return review("the provider's " + noun + " is " + f.amount.String() + ", the intent " + in.Amount.String())
	case f.status == "":
		return Proof{}, errors.New("the " + noun + " is still pending at the provider")
	}
	p := Proof{Status: f.status, ProviderID: f.id, Reason: past + ": the provider reports the " + noun + " " + strings.ToLower(string(f.status))}
	if f.status == IntentDeclined {
		p.DeclineCode = "declined"
	}
	return p, nil
}

// foundObject is a charge or refund a lookup found, with the intent
// status it proves ("" while still pending there).
type foundObject struct {
	id     string
	amount money.Money
	status IntentStatus
}

func lookupRefundObjects(ctx context.Context, prov Provider, in Examined) ([]foundObject, bool, error) {
	rl, ok := prov.(RefundLooker)
	if !ok {
		return nil, false, fmt.Errorf("%s has no refund lookup; only its notification can tell: %w", in.Provider, ErrCannotTell)
	}
	res, err := rl.LookupRefund(ctx, RefundLookupRequest{Key: in.Key, ProviderKey: in.ProviderKey,
		ProviderID: in.ProviderID, ChargeID: in.ChargeID})
	var found []foundObject
	for _, rf := range res.Refunds {
		f := foundObject{id: rf.ProviderID, amount: rf.Amount}
		switch rf.Status {
		case RefundSucceeded:
			f.status = IntentSucceeded
		case RefundFailed:
			f.status = IntentFailed
		}
		found = append(found, f)
	}
	return found, res.Consistent, err
}

// LookupUntil is where a lookup of an attempt first sent at sentAt may
// stop: its references are re-sent only inside the provider's window, so
// nothing the attempt made can have been created after sentAt + window
// (plus a few minutes for a request in flight at its edge), or after now.
// A bounded period lets a lookup whose index lags (PayPal's transaction
// search, up to 3 hours) prove absence once the period is old enough.
func LookupUntil(sentAt time.Time, window time.Duration) time.Time {
	now := time.Now().Add(5 * time.Minute)
	if sentAt.IsZero() || window <= 0 {
		return now
	}
	if end := sentAt.Add(window + 5*time.Minute); end.Before(now) {
		return end
	}
	return now
}

// ClockReader is implemented by a provider whose Lookup lists what was
// created in [LookupRequest.From, LookupRequest.To] on the provider's own
// clock, page by page (Stripe's List API: a narrower window is fewer
// pages, and a window with fewer objects than the adapter scans is
// consistent), and that can read that clock. [Client.LookupAttempt] looks
// such a provider up over each send's own window, with a margin measured
// rather than assumed.
type ClockReader interface {
	// ReadClock returns the provider's clock now and how far from it the
	// answer may be (the clock's resolution and the round trip of the
	// answer it was read from). It may send a request to the provider.
	ReadClock(ctx context.Context) (now time.Time, within time.Duration, err error)
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
