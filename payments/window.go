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
	"github.com/payonce/payonce/payments/provider"
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
func (c *Client) beyondWindow(prov provider.Provider, step string, prior priorIntent) bool {
	return prior.now.Sub(prior.sentAt) >= provider.DedupWindowOf(prov, step)-c.windowMargin
}

// settleBeyondWindow resolves an open intent whose references are past
// the provider's window without sending anything: it looks the attempt up
// and applies what that proves, under the caller's lease. Without proof
// the intent goes to NEEDS_REVIEW and the caller gets a
// *UnderReviewError; a failed lookup (an outage) leaves everything as it
// was and answers a *provider.UnknownOutcomeError (retry later).
func (c *Client) settleBeyondWindow(ctx context.Context, cl *call, prov provider.Provider, in Examined) (idempotency.Recording, error) {
	step := provider.StepCharge
	if in.Kind == KindRefund {
		step = provider.StepRefund
	}
	window := provider.DedupWindowOf(prov, step)
	proof, err := proveBeyondWindow(ctx, prov, in, window, func() (provider.LookupResult, error) { return c.LookupAttempt(ctx, prov, in) })
	if err != nil {
		return idempotency.Recording{}, &provider.UnknownOutcomeError{Provider: prov.Name(),
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
//
// A charge is looked up over the creation windows of the attempt's sends
// (as [Client.LookupAttempt] does) with [DefaultLookupMargin] on each side
// and the default lease (30s) as the time a send takes to reach the
// provider: without a [Client] there is no database to measure the
// clocks' skew against.
func LookupBeyondWindow(ctx context.Context, prov provider.Provider, in Examined, window time.Duration) (Proof, error) {
	_, perSend := prov.(provider.ClockReader)
	return proveBeyondWindow(ctx, prov, in, window, func() (provider.LookupResult, error) {
		return lookupWindows(ctx, prov, attemptRequest(in), attemptWindows(in, provider.DedupWindowOf(prov, provider.StepCharge), defaultLease,
			DefaultLookupMargin, perSend))
	})
}

// proveBeyondWindow is LookupBeyondWindow with the charge lookup given.
func proveBeyondWindow(ctx context.Context, prov provider.Provider, in Examined, window time.Duration, lookup func() (provider.LookupResult, error)) (Proof, error) {
	noun := "charge"
	var found []foundObject
	var consistent bool
	var err error
	if in.Kind == KindRefund {
		noun = "refund"
		found, consistent, err = lookupRefundObjects(ctx, prov, in)
	} else {
		var res provider.LookupResult
		res, err = lookup()
		for _, ch := range res.Charges {
			f := foundObject{id: ch.ProviderID, amount: ch.Amount}
			switch ch.Status {
			case provider.ChargeSucceeded:
				f.status = IntentSucceeded
			case provider.ChargeFailed:
				f.status = IntentDeclined
			case provider.ChargeRequiresAction:
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
	case errors.Is(err, provider.ErrCannotTell):
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

func lookupRefundObjects(ctx context.Context, prov provider.Provider, in Examined) ([]foundObject, bool, error) {
	rl, ok := prov.(provider.RefundLooker)
	if !ok {
		return nil, false, fmt.Errorf("%s has no refund lookup; only its notification can tell: %w", in.Provider, provider.ErrCannotTell)
	}
	res, err := rl.LookupRefund(ctx, provider.RefundLookupRequest{Key: in.Key, ProviderKey: in.ProviderKey,
		ProviderID: in.ProviderID, ChargeID: in.ChargeID})
	var found []foundObject
	for _, rf := range res.Refunds {
		f := foundObject{id: rf.ProviderID, amount: rf.Amount}
		switch rf.Status {
		case provider.RefundSucceeded:
			f.status = IntentSucceeded
		case provider.RefundFailed:
			f.status = IntentFailed
		}
		found = append(found, f)
	}
	return found, res.Consistent, err
}

// LookupUntil is where a lookup of an attempt first sent at sentAt may
// stop when its last send is not known: its references are re-sent only
// inside the provider's window, so nothing the attempt made can have been
// created after sentAt + window (plus a few minutes for a request in
// flight at its edge), or after now. A bounded period lets a lookup whose
// index lags (PayPal's transaction search, up to 3 hours) prove absence
// once the period is old enough. An attempt whose sends are counted
// (Examined.LastSentAt) is looked up over its sends' own windows instead
// ([Client.LookupAttempt]).
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

// DefaultLookupMargin is the margin a lookup's creation window gets on
// each side when the skew between the database's clock (which stamps the
// sends) and the provider's (which stamps what they created) is not
// measured: the provider cannot read its clock ([provider.ClockReader]), or reading
// it failed.
const DefaultLookupMargin = 10 * time.Minute

// MeasuredLookupMargin is added, on each side of a lookup's window, to the
// skew measured between the database's clock and the provider's and to
// that measurement's error: it covers what one measurement cannot see
// (the provider's servers disagreeing among themselves by milliseconds).
// Two clocks that are not kept in step may also drift apart between a
// send and its lookup: the margin grows by 200 ppm of the send's age
// (17 s a day).
const MeasuredLookupMargin = 2 * time.Second

// clockDrift is how fast two clocks not kept in step by NTP may drift
// apart: 200 ppm, a common quartz tolerance.
const clockDrift = 200e-6

// defaultLease is Config.LockTimeout's default: how long a send is
// assumed to take to reach the provider when the client's lease is not
// known (LookupBeyondWindow).
const defaultLease = 30 * time.Second

// LookupAttempt asks prov what the current attempt of the open charge
// intent in left there: the charges carrying in.Key that were created
// while the attempt's sends could create them. The database stamps each
// send before it goes out (Examined.SentAt, the first; LastSentAt, the
// last; Sends, how many), and a send reaches the provider while the key's
// lease (Config.LockTimeout) holds, so the attempt's charges were created
// in [SentAt, LastSentAt + lease], widened on each side by the skew
// between the database's clock and the provider's:
//
//   - A [provider.ClockReader] is read, and the database's clock with it: the
//     margin is the measured skew, its error and [MeasuredLookupMargin]
//     (seconds when the clocks agree). Its window is one per send when the
//     attempt was sent at most twice (a first send and a retry an hour
//     later are two narrow windows, not the hour between them), one from
//     the first send to the last otherwise.
//   - Any other provider, or a clock that could not be read:
//     [DefaultLookupMargin], one window.
//
// An attempt whose last send is not known (LastSentAt zero: recorded
// before sends were counted) is looked up from its first send to
// [LookupUntil]; one reopened and not sent since (SentAt zero), over the
// intent's whole life. The result is Consistent only when every window's
// lookup was. Errors: those of prov.Lookup.
func (c *Client) LookupAttempt(ctx context.Context, prov provider.Provider, in Examined) (provider.LookupResult, error) {
	margin := DefaultLookupMargin
	cr, perSend := prov.(provider.ClockReader)
	if perSend {
		if m, err := c.measuredMargin(ctx, cr, prov.Name(), in); err != nil {
			c.log.Warn("payments: the provider's clock could not be read; the lookup takes the default margin",
				"provider", prov.Name(), "key", idempotency.ShortHash(in.Key), "margin", margin, "err", err)
		} else {
			margin = m
		}
	}
	ws := attemptWindows(in, provider.DedupWindowOf(prov, provider.StepCharge), c.exec.Config().LockTimeout, margin, perSend)
	return lookupWindows(ctx, prov, attemptRequest(in), ws)
}

// clockSQL reads the database's clock now (not the transaction's start).
const clockSQL = `SELECT clock_timestamp()`

// measuredMargin measures the skew between the database's clock and the
// provider's (both against this process's monotonic clock, so that a step
// of its wall clock does not count) and returns the margin a lookup of
// in's sends needs on each side. A skew past a few seconds is logged: the
// database host's time synchronisation is off.
func (c *Client) measuredMargin(ctx context.Context, cr provider.ClockReader, provider string, in Examined) (time.Duration, error) {
	provNow, provWithin, err := cr.ReadClock(ctx)
	read := time.Now()
	if err != nil {
		return 0, err
	}
	before := time.Now()
	var dbNow time.Time
	if err := c.pool.QueryRow(ctx, clockSQL).Scan(&dbNow); err != nil {
		return 0, fmt.Errorf("reading the database's clock: %w", err)
	}
	half := time.Since(before) / 2
	// The database's clock at the instant the provider's was read.
	dbAtRead := dbNow.Add(read.Sub(before.Add(half)))
	skew := provNow.Sub(dbAtRead)
	within := provWithin + half
	oldest := in.SentAt
	if oldest.IsZero() {
		oldest = in.CreatedAt
	}
	drift := time.Duration(float64(max(dbNow.Sub(oldest), 0)) * clockDrift)
	if skew.Abs() > 5*time.Second {
		c.log.Warn("payments: the database's clock and the provider's disagree; lookups widen their windows by the difference",
			"provider", provider, "skew", skew.Round(time.Millisecond), "within", within.Round(time.Millisecond))
	}
	return MeasuredLookupMargin + skew.Abs() + within + drift, nil
}

// window is a period of creation times at the provider, both ends
// included.
type window struct{ from, to time.Time }

// attemptWindows returns the periods in which in's attempt can have
// created its charges at the provider (see [Client.LookupAttempt]): dedup
// is the provider's deduplication window of a charge, flight how long a
// send may take to reach the provider (the lease it is sent under),
// margin the clocks' skew allowance on each side, and perSend whether
// each send gets its own window when there are two.
func attemptWindows(in Examined, dedup, flight, margin time.Duration, perSend bool) []window {
	first, last := in.SentAt, in.LastSentAt
	// Nothing is sent past the provider's window (payments looks the
	// attempt up instead; a resumption that did so still counts as a
	// send), nor created after now: LookupUntil, on the provider's clock,
	// bounds every window.
	until := LookupUntil(first, dedup).Add(margin)
	switch {
	case first.IsZero():
		// Reopened and not sent since: this attempt made nothing yet; the
		// lookup still covers whatever the intent's earlier attempts left.
		return []window{{in.CreatedAt.Add(-margin), until}}
	case last.IsZero() || last.Before(first):
		// The last send is not known: the attempt may have been re-sent
		// until the provider's window closed.
		return []window{{first.Add(-margin), until}}
	}
	firstW := window{first.Add(-margin), minTime(first.Add(flight+margin), until)}
	lastW := window{last.Add(-margin), minTime(last.Add(flight+margin), until)}
	switch {
	case !perSend || in.Sends > 2 || !lastW.from.After(firstW.to):
		// The sends between the first and the last (if any) could be at
		// any time between them.
		return []window{{firstW.from, lastW.to}}
	case lastW.to.Before(lastW.from):
		// The last "send" came past the provider's window: nothing went.
		return []window{firstW}
	}
	return []window{firstW, lastW}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func attemptRequest(in Examined) provider.LookupRequest {
	return provider.LookupRequest{Key: in.Key, ProviderKey: in.ProviderKey, ProviderID: in.ProviderID}
}

// lookupWindows looks req up over each window and merges the answers: the
// charges found (each once), consistent only when every lookup was.
func lookupWindows(ctx context.Context, prov provider.Provider, req provider.LookupRequest, ws []window) (provider.LookupResult, error) {
	out := provider.LookupResult{Charges: []provider.ChargeResult{}, Consistent: true}
	seen := map[string]bool{}
	for _, w := range ws {
		r := req
		r.From, r.To = w.from, w.to
		res, err := prov.Lookup(ctx, r)
		if err != nil {
			return provider.LookupResult{}, err
		}
		out.Consistent = out.Consistent && res.Consistent
		for _, ch := range res.Charges {
			if ch.ProviderID != "" && seen[ch.ProviderID] {
				continue
			}
			seen[ch.ProviderID] = true
			out.Charges = append(out.Charges, ch)
		}
	}
	return out, nil
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
