package payments

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/internal/crashpoint"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

// WebhookConfig configures a receiver made by [Client.WebhookHandler].
type WebhookConfig struct {
	// MaxBody bounds a delivery's body; a larger one gets 413 and is not
	// stored. Default 1 MiB.
	MaxBody int64
	// Logger receives refusals and failures. Default: the Client's.
	Logger *slog.Logger
}

// Webhook event outcomes, as stored in webhook_events.outcome.
const (
	// EventApplied: the event moved its intent (and the ledger).
	EventApplied = "applied"
	// EventConfirmed: the intent already said what the event says.
	EventConfirmed = "confirmed"
	// EventStale: the event would move a final intent backwards (a late
	// "pending" after "succeeded"); ignored.
	EventStale = "stale"
	// EventConflict: the event contradicts a final local state (the
	// provider says succeeded, payonce recorded declined, or amounts
	// differ); nothing changes and the reconciler reports it.
	EventConflict = "conflict"
	// EventUnmatched: no local intent carries the event's references.
	EventUnmatched = "unmatched"
	// EventIgnoredOutcome: a type payonce does not act on.
	EventIgnoredOutcome = "ignored"
	// EventSecondObject: a success event naming another provider object
	// than the one its intent settled with: a second charge (or refund)
	// at the provider for one intent. Nothing changes; the reconciler
	// reports it ("several charges at provider").
	EventSecondObject = "second_object"
	// EventSucceededAfterDecline: a success of the very provider object
	// a DECLINED charge intent names (Stripe's PaymentIntent confirmed
	// again after its decline): the charge is booked (intent SUCCEEDED,
	// its ledger entry) and the key's record answers the success instead
	// of the decline. The reconciler reports it ("declined locally,
	// succeeded at provider").
	EventSucceededAfterDecline = "succeeded_after_decline"
	// EventRefundFailedAfterSuccess: a failure of the refund a SUCCEEDED
	// refund intent names (Stripe's failed refunds, Adyen's REFUND_FAILED):
	// the refund's entry is reversed, its reservation on the charge
	// released, the intent FAILED with the provider's reason, and the
	// key's record answers the failure. The reconciler reports it
	// ("refund succeeded locally, failed at provider").
	EventRefundFailedAfterSuccess = "refund_failed_after_success"
	// EventNeedsReview: the event overturns a final intent but cannot be
	// booked safely (a success for a DECLINED intent that names no
	// provider object, so that nothing says the success is its own): the
	// intent is NEEDS_REVIEW with the reason (the event's detail), and the
	// reconciler reports it.
	EventNeedsReview = "needs_review"
)

// WebhookHandler returns the receiver of the named provider's
// notifications, mountable under any path (POST only). For each delivery
// it verifies the signature through the provider's [provider.WebhookVerifier],
// then, in ONE transaction per delivery, stores each event once in the
// webhook_events inbox (keyed by provider and event id) together with its
// effect on the intent it names (and the ledger postings where money
// moved), and answers 2xx only after that commit. A redelivery of a
// stored event is acknowledged and changes nothing. Events never move an
// intent backwards.
//
// Answers: 200 stored (or already stored); 400 malformed body; 401 bad or
// missing signature; 405 not POST; 413 body over the limit; 503 the
// verification or the database failed (the provider will redeliver).
// Nothing is stored for a refused delivery.
//
// Errors: *ConfigError when the provider is not configured or cannot
// verify webhooks.
func (c *Client) WebhookHandler(provName string, cfg *WebhookConfig) (http.Handler, error) {
	p := c.providers[provName]
	if p == nil {
		return nil, &ConfigError{"provider", fmt.Sprintf("unknown provider %q", provName)}
	}
	v, ok := p.(provider.WebhookVerifier)
	if !ok {
		return nil, &ConfigError{"provider", fmt.Sprintf("%q does not verify webhooks", provName)}
	}
	var wc WebhookConfig
	if cfg != nil {
		wc = *cfg
	}
	if wc.MaxBody == 0 {
		wc.MaxBody = 1 << 20
	}
	if wc.MaxBody < 0 {
		return nil, &ConfigError{"WebhookConfig.MaxBody", "negative"}
	}
	if wc.Logger == nil {
		wc.Logger = c.log
	}
	return &receiver{c: c, provider: provName, verifier: v, cfg: wc}, nil
}

type receiver struct {
	c        *Client
	provider string
	verifier provider.WebhookVerifier
	cfg      WebhookConfig
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	refuse := func(reason string) { rc.c.metrics.refused(ctx, rc.provider, reason) }
	if r.Method != http.MethodPost {
		refuse("method")
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rc.cfg.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			refuse("too_large")
			http.Error(w, fmt.Sprintf("body over %d bytes", rc.cfg.MaxBody), http.StatusRequestEntityTooLarge)
			return
		}
		refuse("malformed")
		http.Error(w, "body unreadable", http.StatusBadRequest)
		return
	}
	events, err := rc.verifier.VerifyWebhook(r.Context(), r.Header, body)
	switch {
	case errors.Is(err, provider.ErrWebhookSignature):
		refuse("signature")
		rc.cfg.Logger.Warn("payments: webhook refused: signature", "provider", rc.provider, "err", err)
		http.Error(w, "signature missing or invalid", http.StatusUnauthorized)
		return
	case errors.Is(err, provider.ErrWebhookMalformed):
		refuse("malformed")
		rc.cfg.Logger.Warn("payments: webhook refused: malformed", "provider", rc.provider, "err", err)
		http.Error(w, "malformed event", http.StatusBadRequest)
		return
	case err != nil:
		refuse("verify_failed")
		rc.cfg.Logger.Error("payments: webhook verification failed", "provider", rc.provider, "err", err)
		http.Error(w, "verification unavailable", http.StatusServiceUnavailable)
		return
	}
	if _, err := rc.c.applyEvents(r.Context(), rc.provider, events); err != nil {
		refuse("store_failed")
		rc.cfg.Logger.Error("payments: webhook not stored", "provider", rc.provider, "err", err)
		http.Error(w, "not stored", http.StatusServiceUnavailable)
		return
	}
	if ack, ok := rc.verifier.(provider.WebhookAcknowledger); ok {
		ct, b := ack.WebhookAck()
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"received":true}` + "\n"))
}

// AppliedEvent is what [Client.ApplyEvents] did with one event.
type AppliedEvent struct {
	ID string
	// Outcome is one of EventApplied, EventConfirmed, EventStale,
	// EventConflict, EventUnmatched, EventIgnoredOutcome, EventSecondObject,
	// EventSucceededAfterDecline, EventRefundFailedAfterSuccess,
	// EventNeedsReview, or "duplicate" when the event was stored before
	// (nothing changed).
	Outcome string
	Detail  string
}

// ApplyEvents stores verified events of provider in the inbox and applies
// them to their intents, all in one transaction (see
// [Client.WebhookHandler]). It is what the receiver calls; use it for
// events obtained another way (a provider's event list). Events must be
// verified.
func (o *Operator) ApplyEvents(ctx context.Context, provider string, events []provider.WebhookEvent) ([]AppliedEvent, error) {
	return o.c.applyEvents(ctx, provider, events)
}

func (c *Client) applyEvents(ctx context.Context, provider string, events []provider.WebhookEvent) (_ []AppliedEvent, err error) {
	ctx, span := c.tracer.Start(ctx, "payments.webhook.apply", trace.WithAttributes(
		attribute.String(attrProvider, provider), attribute.Int(attrEvents, len(events))))
	defer func() { idempotency.EndSpan(span, err) }()
	var out []AppliedEvent
	crashpoint.Reach(ctx, crashpoint.WebhookBeforeApply, provider)
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		out = out[:0]
		for _, ev := range events {
			ectx, espan := c.tracer.Start(ctx, "payments.webhook.event", trace.WithAttributes(
				attribute.String(attrEventType, ev.Type), attribute.String(attrProviderID, ev.ProviderID)))
			a, err := c.applyEvent(ectx, tx, provider, ev)
			espan.SetAttributes(attribute.String(attrEventOutcome, a.Outcome))
			idempotency.EndSpan(espan, err)
			if err != nil {
				return fmt.Errorf("event %s: %w", ev.ID, err)
			}
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("payments: apply webhook events: %w", err)
	}
	for _, a := range out {
		c.metrics.webhook(ctx, provider, a.Outcome)
		if overturned[a.Outcome] {
			c.log.Warn("payments: the provider overturned a final outcome", "provider", provider, "event", a.ID,
				"outcome", a.Outcome, "detail", a.Detail)
		}
	}
	return out, nil
}

const insertEventSQL = `INSERT INTO webhook_events
    (provider, event_id, event_type, kind, reference, local_key, provider_id, charge_id, amount, currency, decline_code, outcome, body)
VALUES ($1, $2, $3, $4, nullif($5, ''), nullif($6, ''), nullif($7, ''), nullif($8, ''), $9::numeric, $10, nullif($11, ''), 'ignored', $12)
ON CONFLICT (provider, event_id) DO NOTHING
RETURNING event_id`

const eventOutcomeSQL = `UPDATE webhook_events SET outcome = $3, detail = $4, intent_key = $5, intent_user = $6
 WHERE provider = $1 AND event_id = $2`

// intentRow is an intent locked for an event.
type intentRow struct {
	key, user, kind, status, amount, currency string
	providerID, chargeKey                     *string
}

const intentCols = `idempotency_key, user_id, kind, status, amount::text, currency, provider_id, charge_key`

func (c *Client) applyEvent(ctx context.Context, tx pgx.Tx, provName string, ev provider.WebhookEvent) (AppliedEvent, error) {
	if ev.ID == "" {
		return AppliedEvent{}, errors.New("event without an id")
	}
	var amount, currency any
	if ev.Amount.Currency() != "" {
		amount, currency = ev.Amount.AmountString(), string(ev.Amount.Currency())
	}
	body := ev.Body
	if body == nil {
		body = []byte{}
	}
	var id string
	err := tx.QueryRow(ctx, insertEventSQL, provName, ev.ID, ev.Type, string(ev.Kind), ev.Reference, ev.Key,
		ev.ProviderID, ev.ChargeID, amount, currency, ev.DeclineCode, body).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return AppliedEvent{ID: ev.ID, Outcome: "duplicate"}, nil
	}
	if err != nil {
		return AppliedEvent{}, err
	}
	if ev.Kind == provider.EventIgnored || ev.Kind == provider.EventCancelFailed {
		return AppliedEvent{ID: ev.ID, Outcome: EventIgnoredOutcome}, nil
	}
	kind := "CHARGE"
	if ev.Kind == provider.EventRefundSucceeded || ev.Kind == provider.EventRefundFailed || ev.Kind == provider.EventRefundReversed {
		kind = "REFUND"
	}
	in, found, err := findIntent(ctx, tx, provName, kind, ev)
	if err != nil {
		return AppliedEvent{}, err
	}
	var outcome, detail string
	if !found {
		outcome, detail, err = c.unmatched(ctx, tx, provName, ev)
	} else {
		outcome, detail, err = c.transition(ctx, tx, provName, in, ev)
	}
	if err != nil {
		return AppliedEvent{}, err
	}
	var ik, iu any
	if found {
		ik, iu = in.key, in.user
	}
	if _, err := tx.Exec(ctx, eventOutcomeSQL, provName, ev.ID, outcome, detail, ik, iu); err != nil {
		return AppliedEvent{}, err
	}
	return AppliedEvent{ID: ev.ID, Outcome: outcome, Detail: detail}, nil
}

// findIntent locks the intent an event names: by the provider's object,
// else by the reference payonce sent, else by the local key.
func findIntent(ctx context.Context, tx pgx.Tx, provider, kind string, ev provider.WebhookEvent) (intentRow, bool, error) {
	probes := []struct{ col, val string }{{"provider_id", ev.ProviderID}, {"provider_key", ev.Reference}, {"idempotency_key", ev.Key}}
	for _, p := range probes {
		if p.val == "" {
			continue
		}
		var in intentRow
		err := tx.QueryRow(ctx, `SELECT `+intentCols+` FROM payment_intents
			WHERE provider = $1 AND kind = $2 AND `+p.col+` = $3 ORDER BY created_at LIMIT 1 FOR UPDATE`, provider, kind, p.val).
			Scan(&in.key, &in.user, &in.kind, &in.status, &in.amount, &in.currency, &in.providerID, &in.chargeKey)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return intentRow{}, false, err
		}
		return in, true, nil
	}
	return intentRow{}, false, nil
}

// unmatched classifies an event with no intent of its kind. A refund
// event that names a known charge (Stripe's charge.refunded is about the
// charge, not the refund) is confirmed when a refund intent of that charge
// has its amount.
func (c *Client) unmatched(ctx context.Context, tx pgx.Tx, provName string, ev provider.WebhookEvent) (string, string, error) {
	// Only for events about the charge rather than one refund (Stripe's
	// charge.refunded names the PaymentIntent): an event naming its own
	// refund object that no intent carries is a refund made outside
	// payonce.
	aboutCharge := ev.ProviderID == "" || ev.ProviderID == ev.ChargeID
	if (ev.Kind == provider.EventRefundSucceeded || ev.Kind == provider.EventRefundFailed || ev.Kind == provider.EventRefundReversed) && ev.ChargeID != "" && aboutCharge {
		var n int
		err := tx.QueryRow(ctx, `SELECT count(*) FROM payment_intents r JOIN payment_intents ch
			ON ch.idempotency_key = r.charge_key AND ch.user_id = r.user_id
			WHERE ch.provider = $1 AND ch.provider_id = $2 AND r.kind = 'REFUND' AND ($3::numeric IS NULL OR r.amount = $3::numeric)`,
			provName, ev.ChargeID, nullAmount(ev.Amount)).Scan(&n)
		if err != nil {
			return "", "", err
		}
		if n > 0 {
			return EventConfirmed, "a refund intent of this charge has this amount", nil
		}
		return EventUnmatched, "refund of charge " + ev.ChargeID + " with no matching refund intent", nil
	}
	return EventUnmatched, "no local intent carries this event's references", nil
}

func nullAmount(m money.Money) any {
	if m.Currency() == "" {
		return nil
	}
	return m.AmountString()
}

var openStatus = map[string]bool{string(IntentPending): true, string(IntentUnknown): true, string(IntentRequiresAction): true}

// transition applies an event to its locked intent (see decideEvent).
func (c *Client) transition(ctx context.Context, tx pgx.Tx, provider string, in intentRow, ev provider.WebhookEvent) (string, string, error) {
	amount, err := intentAmount(in)
	if err != nil {
		return "", "", err
	}
	if in.kind == string(KindRefund) && in.chargeKey == nil {
		return "", "", errors.New("refund intent without its charge")
	}
	s := subject{scope: in.user, key: in.key, kind: IntentKind(in.kind), provider: provider, amount: amount}
	if in.chargeKey != nil {
		s.chargeKey = *in.chargeKey
	}
	outcome, detail, t := decideEvent(s, in, ev)
	switch {
	case t != nil:
		if err := c.commit(ctx, tx, s, *t, nil); err != nil {
			return "", "", err
		}
		if t.supersede {
			if err := c.supersede(ctx, tx, s, *t); err != nil {
				return "", "", err
			}
		}
	case outcome == EventNeedsReview:
		if err := c.flagReview(ctx, tx, s, detail); err != nil {
			return "", "", err
		}
	}
	return outcome, detail, nil
}

// decideEvent is what a verified event proves for its intent: the outcome
// stored with the event and, when it moves an open intent, the transition.
// It never moves a final intent backwards. A final state the provider
// overturns is booked where the event names the intent's own object (a
// success after a decline, a refund failed after its success: see
// succeededAfterDecline, refundFailedAfterSuccess), sent to review where
// nothing says the object is the intent's, and any other contradiction is
// a conflict (reported, nothing changes).
func decideEvent(s subject, in intentRow, ev provider.WebhookEvent) (outcome, detail string, t *transition) {
	moved := ev.Kind == provider.EventChargeSucceeded || ev.Kind == provider.EventRefundSucceeded || ev.Kind == provider.EventCaptureSucceeded ||
		(ev.Kind == provider.EventRefundReversed && in.status == string(IntentSucceeded)) // what a reversal would move back
	if moved && ev.Amount.Currency() != "" && !ev.Amount.Equal(s.amount) {
		return EventConflict, fmt.Sprintf("the provider reports %s %s, the intent is %s %s",
			ev.Amount.AmountString(), ev.Amount.Currency(), in.amount, in.currency), nil
	}
	open := openStatus[in.status]
	pid := ev.ProviderID
	if in.providerID != nil {
		pid = "" // the intent already names its provider object
	}
	with := func(t transition, declineCode string) *transition {
		t.declineCode = declineCode
		return &t
	}
	switch ev.Kind {
	case provider.EventChargeSucceeded, provider.EventCaptureSucceeded, provider.EventRefundSucceeded:
		if other := otherObject(in, ev); other != "" {
			return EventSecondObject, other, nil
		}
		switch {
		case open:
			return EventApplied, "", with(succeeded(s, pid), "")
		case in.status == string(IntentSucceeded):
			return EventConfirmed, "", nil
		case in.status == string(IntentDeclined) && s.kind == KindCharge:
			return decideSuccessAfterDecline(s, in, ev)
		case ev.Kind == provider.EventRefundSucceeded:
			return EventConflict, "the provider reports the refund succeeded, the intent is " + in.status, nil
		default:
			return EventConflict, "the provider reports success, the intent is " + in.status, nil
		}
	case provider.EventChargeFailed, provider.EventCancelled:
		switch {
		case open && ev.Kind == provider.EventCancelled:
			return EventApplied, "", with(transition{status: IntentFailed, providerID: pid}, ev.DeclineCode)
		case open:
			return EventApplied, "", with(transition{status: IntentDeclined, providerID: pid}, ev.DeclineCode)
		case in.status == string(IntentSucceeded) && ev.Kind == provider.EventCancelled:
			return EventConflict, "the provider reports the payment cancelled, the intent succeeded", nil
		case in.status == string(IntentSucceeded):
			return EventStale, "a failure reported after the success", nil
		case in.status == string(IntentDeclined) && ev.Kind == provider.EventChargeFailed && in.providerID == nil && ev.ProviderID != "":
			// The notification of a decline recorded from the synchronous
			// answer: it names the declined object, which a later success
			// must name to be this intent's.
			return EventConfirmed, "", with(transition{status: IntentDeclined, providerID: ev.ProviderID}, "")
		default:
			return EventConfirmed, "", nil
		}
	case provider.EventChargePending:
		if open {
			return EventConfirmed, "", nil
		}
		return EventStale, "pending reported after " + in.status, nil
	case provider.EventCaptureFailed:
		if in.status == string(IntentSucceeded) {
			return EventConflict, "the provider reports the capture failed, the intent succeeded", nil
		}
		return EventConfirmed, "", nil
	case provider.EventRefundFailed, provider.EventRefundReversed:
		switch {
		case open:
			return EventApplied, "", with(transition{status: IntentFailed, providerID: pid, effect: releaseReservation}, ev.DeclineCode)
		case in.status == string(IntentSucceeded) && ev.Kind == provider.EventRefundReversed:
			return decideRefundFailedAfterSuccess(s, in, ev)
		case in.status == string(IntentSucceeded):
			return EventConflict, "the provider reports the refund refused after it succeeded", nil
		default:
			return EventConfirmed, "", nil
		}
	}
	return EventIgnoredOutcome, "kind " + string(ev.Kind) + " not applied", nil
}

// otherObject describes the second provider object a success event names
// when its intent already names another one; "" when it names the same
// (or the intent names none yet). A capture names its payment in ChargeID
// (Adyen's originalReference); a charge or refund event its own object in
// ProviderID.
func otherObject(in intentRow, ev provider.WebhookEvent) string {
	if in.providerID == nil || *in.providerID == "" {
		return ""
	}
	named := ev.ProviderID
	if ev.Kind == provider.EventCaptureSucceeded && ev.ChargeID != "" {
		named = ev.ChargeID
	}
	if named == "" || named == *in.providerID {
		return ""
	}
	return fmt.Sprintf("the provider reports %s succeeded for this intent, which %s with %s: a second object at the provider",
		named, map[bool]string{true: "is open", false: "settled"}[openStatus[in.status]], *in.providerID)
}

func intentAmount(in intentRow) (money.Money, error) {
	return money.Parse(in.amount, money.Currency(in.currency))
}

func sameAmount(m money.Money, amount, currency string) bool {
	other, err := intentAmount(intentRow{amount: amount, currency: currency})
	return err == nil && other.Equal(m)
}

// StoredEvents returns the verified events of provider stored for a
// reference, oldest first (see [WebhookInbox.Events]).
func (o *Operator) StoredEvents(ctx context.Context, provider, reference string) ([]provider.WebhookEvent, error) {
	return o.c.inbox.Events(ctx, provider, reference)
}
