package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

// Config configures a [Client]. The zero value (or nil) means defaults.
type Config struct {
	// LockTimeout is the lease of a charge in progress, kept alive by
	// heartbeats while the provider is called. Default 30s.
	LockTimeout time.Duration
	// Retention is how long a charge's outcome is kept and replayed. It
	// must be at least every provider's deduplication window (Stripe 24h):
	// a shorter one is refused. Default: the longest window of the
	// providers, at least 24h.
	Retention time.Duration
	// WindowMargin is taken off every provider's deduplication window
	// before payments decides that an open attempt may no longer be
	// re-sent with its references: a retry (or an operator's release)
	// past the window minus the margin looks the attempt up instead, and
	// without proof flags the intent NEEDS_REVIEW. It covers the skew
	// between the database's clock and the provider's. Default 1h
	// ([DefaultWindowMargin]); it must be less than half of every
	// provider's shortest window.
	WindowMargin time.Duration
	// Store is the idempotency store of payments' keys; it must be on the
	// client's database (records complete in the same transactions as the
	// intents), so its transactions are pgx's. Default: pgstore.New over
	// pool, with MeterProvider.
	Store idempotency.TxStore[pgx.Tx]
	// Ledger receives the postings; it must be on the client's database.
	// Default: ledger.New(pool, nil).
	Ledger *ledger.Ledger
	// Logger receives the client's warnings and errors (a provider refusing
	// the credentials, a provider key seen with other parameters), its
	// executor's and, unless Ledger is given, its ledger's. Keys appear
	// only as short hashes. Default: slog.Default().
	Logger *slog.Logger
	// MeterProvider receives the payments instruments (payments.charges,
	// payments.refunds, payments.unknown_outcomes,
	// payments.provider_call_duration_ms, payments.webhook_events,
	// payments.webhook_refusals) and the idempotency core's.
	// Default: a no-op provider.
	MeterProvider metric.MeterProvider
	// TracerProvider receives spans: payments.charge and payments.refund
	// around each call, payments.provider.<step> around each provider call
	// (with the provider's object id and request id where given),
	// payments.webhook.apply per batch of notifications, and the
	// idempotency core's spans. Keys appear as short hashes only. Default:
	// no spans.
	TracerProvider trace.TracerProvider
}

// Client charges through providers, exactly once per key: it claims the
// key, records the intent before the provider call, calls the provider
// with references derived from the key, and commits the intent's outcome,
// the ledger postings and the idempotency record in one transaction.
type Client struct {
	metrics   *instruments
	pool      *pgxpool.Pool
	store     idempotency.TxStore[pgx.Tx]
	exec      *idempotency.TxExecutor[pgx.Tx]
	ledger    *ledger.Ledger
	inbox     *WebhookInbox
	providers map[string]provider.Provider
	log       *slog.Logger
	hooks     hooks
	// windowMargin: Config.WindowMargin.
	windowMargin time.Duration
	tracer       trace.Tracer
}

// ConfigError names a bad configuration field.
type ConfigError struct{ Field, Reason string }

func (e *ConfigError) Error() string { return "payments: " + e.Field + ": " + e.Reason }

// Is reports idempotency.ErrInvalid: bad input or configuration, named.
func (e *ConfigError) Is(target error) bool { return target == idempotency.ErrInvalid }

// SafeToRetry reports false: fix the field first.
func (e *ConfigError) SafeToRetry() bool { return false }

// New returns a Client on pool's database, building its idempotency store
// and ledger unless cfg gives them. A bad field is answered with an error
// matching idempotency.ErrInvalid that names it: a *ConfigError, or for
// LockTimeout and Retention the *idempotency.InvalidError of the
// executor's check.
//
// The database must hold the payments line of package migrations (with
// the idempotency and ledger lines it needs): New checks it once, with one
// query, and refuses a missing or older schema with a
// *migrations.NotMigratedError (errors.Is(err, migrations.ErrNotMigrated))
// that names the versions missing and how to apply them: `payonce migrate
// up`, or migrations.MigrateLines(ctx, pool, migrations.LinePayments).
func New(pool *pgxpool.Pool, providers []provider.Provider, cfg *Config) (*Client, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	switch {
	case pool == nil:
		return nil, &ConfigError{"pool", "nil"}
	case len(providers) == 0:
		return nil, &ConfigError{"providers", "at least one provider is required"}
	}
	if err := checkSchema(pool); err != nil {
		return nil, err
	}
	store, l := c.Store, c.Ledger
	var err error
	if store == nil {
		if store, err = pgstore.New(pool, &pgstore.Config{MeterProvider: c.MeterProvider}); err != nil {
			return nil, err
		}
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	if l == nil {
		if l, err = ledger.New(pool, &ledger.Config{Logger: log}); err != nil {
			return nil, err
		}
	}
	byName := map[string]provider.Provider{}
	window := 24 * time.Hour
	for i, p := range providers {
		if p == nil || p.Name() == "" {
			return nil, &ConfigError{fmt.Sprintf("providers[%d]", i), "nil or unnamed"}
		}
		if _, dup := byName[p.Name()]; dup {
			return nil, &ConfigError{fmt.Sprintf("providers[%d]", i), fmt.Sprintf("%q appears twice", p.Name())}
		}
		byName[p.Name()] = p
		window = max(window, p.DedupWindow())
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = 30 * time.Second
	}
	if c.Retention == 0 {
		c.Retention = window
	}
	switch {
	case c.WindowMargin < 0:
		return nil, &ConfigError{"Config.WindowMargin", "negative"}
	case c.WindowMargin == 0:
		c.WindowMargin = DefaultWindowMargin
	}
	for _, p := range providers {
		for _, step := range []string{provider.StepCharge, provider.StepRefund} {
			if w := provider.DedupWindowOf(p, step); c.WindowMargin >= w/2 {
				return nil, &ConfigError{"Config.WindowMargin", fmt.Sprintf("%s is not less than half of %s's %s deduplication window (%s)",
					c.WindowMargin, p.Name(), step, w)}
			}
		}
	}
	for _, p := range providers {
		if c.Retention < p.DedupWindow() {
			return nil, &ConfigError{"Config.Retention", fmt.Sprintf("%s is shorter than %s's deduplication window (%s): a retry after the local record expired would charge again", c.Retention, p.Name(), p.DedupWindow())}
		}
	}
	exec, err := idempotency.NewTx(store, &idempotency.Config{LockTimeout: c.LockTimeout, Retention: c.Retention,
		Logger: log, MeterProvider: c.MeterProvider, TracerProvider: c.TracerProvider})
	if err != nil {
		return nil, err
	}
	ins, err := newInstruments(c.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("payments: metrics: %w", err)
	}
	return &Client{metrics: ins, pool: pool, store: store, exec: exec, ledger: l, inbox: NewWebhookInbox(pool), providers: byName, log: log,
		windowMargin: c.WindowMargin, tracer: idempotency.Tracer(c.TracerProvider, "payments")}, nil
}

// checkSchema refuses a schema without the payments line, once, at
// construction: a missing table would otherwise surface on the first
// charge as `relation "payment_intents" does not exist`.
func checkSchema(pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := migrations.Check(ctx, pool, migrations.LinePayments); err != nil {
		return fmt.Errorf("payments.New: %w", err)
	}
	return nil
}

// Operator is the client's operator and reconciler calls, apart from the
// customer calls on [Client]; every statement they run on payment_intents
// is here, in package payments:
//   - claiming the work: [Operator.ClaimDue] (open intents due for a
//     lookup), [Operator.ClaimUnverified] (settled intents not yet
//     verified), [Operator.Hold], [Operator.Release],
//     [Operator.ReleaseClaim], [Operator.RescheduleTx],
//     [Operator.CheckedTx], [Operator.Unverify];
//   - settling intents with proof: [Operator.Resolve] (a provider's),
//     [Operator.ResolveReview] (a human's), [Operator.NoteReviewTx];
//   - the webhook inbox: [Operator.ApplyEvents], [Operator.StoredEvents],
//     [Operator.DivergentEvents];
//   - the books: [Operator.RefundedLocally], [Operator.LedgerTotals],
//     [Operator.CountIntents].
type Operator struct{ c *Client }

// Operator returns the client's operator calls.
func (c *Client) Operator() *Operator { return &Operator{c} }

// Provider returns the configured provider named name, or nil.
func (c *Client) Provider(name string) provider.Provider { return c.providers[name] }

// ProviderNames lists the configured providers' names, sorted.
func (c *Client) ProviderNames() []string {
	names := make([]string, 0, len(c.providers))
	for n := range c.providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ChargeKey is the idempotency key a charge is recorded and sent under:
// "<scope>_charge_<key>", composed from [ChargeParams.Scope] and
// [ChargeParams.Key] by the function [Client.Charge] uses. That composed
// key, not the client's own, is what the providers carry (Stripe's
// metadata payonce_key, Adyen's metadata payonce_key), what each provider
// reference derives from ([provider.DeriveKey]: Stripe's Idempotency-Key,
// Adyen's reference, PayPal's custom_id) and what the reconciler's reports
// name: search a provider's dashboard for it. Errors:
// *idempotency.InvalidError naming the bad part, as Charge returns it.
func ChargeKey(scope, key string) (string, error) {
	return idempotency.ComposeKey(scope, "charge", key)
}

// RefundKey is [ChargeKey] for a refund: "<scope>_refund_<key>", from
// [RefundParams.Scope] and [RefundParams.Key], as [Client.Refund]
// composes it.
func RefundKey(scope, key string) (string, error) {
	return idempotency.ComposeKey(scope, "refund", key)
}

// ChargeParams describes one charge. Each field says which providers use
// it; every field is part of the charge's fingerprint (a retry of the key
// with another value is refused, whichever provider ignores it).
type ChargeParams struct {
	// Scope is the authenticated customer or tenant, taken from
	// authentication, never from the request body. Required, every
	// provider: it is the first part of the composed key ([ChargeKey]).
	Scope string
	// Key is the client's idempotency key for this charge. Required, every
	// provider. The providers carry the composed key, [ChargeKey], not
	// this one.
	Key string
	// Provider names the configured provider to charge through ("stripe",
	// "adyen", "paypal"). Required.
	Provider string
	// Amount is what to charge, positive. Required, every provider (each
	// sends it in its own units).
	Amount money.Money
	// Recipient is the account the money goes to, for providers that route
	// charges (a connected account, a split's destination). Optional: it is
	// required only by a provider implementing provider.RecipientRequirer,
	// and none of this module's adapters does (Stripe charges land on the
	// account of the secret key, Adyen sends no split, PayPal no payee). At
	// most 255 bytes.
	Recipient string
	// PaymentMethod is the stored payment method to charge. Required, every
	// provider: Stripe's PaymentMethod ("pm_..."), Adyen's
	// storedPaymentMethodId, PayPal's vault id of the card. At most 255
	// bytes.
	PaymentMethod string
	// Description is a human-readable note: Stripe's description, PayPal's
	// purchase unit description; Adyen does not send it. Optional, at most
	// 1000 bytes.
	Description string
	// Metadata is sent with the charge by Stripe and Adyen (beside
	// payonce's own payonce_key entry); PayPal orders have none. Optional,
	// see [MaxMetadataKeys] for the limits.
	Metadata map[string]string
	// Shopper is the paying customer as the provider knows them: Adyen's
	// shopperReference, required by Adyen for a payment with a stored
	// payment method (a token). Default: Scope, the authenticated customer.
	// At most 255 bytes. PayPal does not use it; the Stripe adapter hands
	// it to its Config.Customer hook, where one is set.
	Shopper string
}

// shopper is Shopper, or Scope by default.
func (p ChargeParams) shopper() string {
	if p.Shopper != "" {
		return p.Shopper
	}
	return p.Scope
}

// IntentStatus is a payment intent's state.
type IntentStatus string

const (
	IntentPending        IntentStatus = "PENDING"
	IntentUnknown        IntentStatus = "UNKNOWN"
	IntentRequiresAction IntentStatus = "REQUIRES_ACTION"
	IntentSucceeded      IntentStatus = "SUCCEEDED"
	IntentDeclined       IntentStatus = "DECLINED"
	IntentFailed         IntentStatus = "FAILED"
	// IntentNeedsReview: the reconciler could not prove the outcome; a
	// human decides. Retries get an *UnderReviewError and never re-drive.
	IntentNeedsReview IntentStatus = "NEEDS_REVIEW"
)

// Outcome is the result of [Client.Charge] and [Client.Refund].
type Outcome struct {
	Status     IntentStatus `json:"status"`
	Provider   string       `json:"provider"`
	ProviderID string       `json:"provider_id"`
	Amount     string       `json:"amount"`
	Currency   string       `json:"currency"`
	// Replayed is true when the outcome was recorded by an earlier call
	// with the same key.
	Replayed bool `json:"-"`
}

// stored is what the idempotency record keeps of a charge: the result, or
// the permanent error a retry gets back.
type stored struct {
	Result  *Outcome                      `json:"result,omitempty"`
	Decline *provider.DeclineError        `json:"decline,omitempty"`
	Invalid *provider.InvalidRequestError `json:"invalid,omitempty"`
}

// Charge charges p.Amount once for (p.Scope, p.Key), whatever the retries.
//
// Errors:
//   - *ConfigError / *idempotency.InvalidError: bad input, nothing recorded;
//   - *provider.DeclineError: declined; every retry of the key gets it back;
//   - *provider.InvalidRequestError: refused by the provider; final for
//     the key;
//   - *provider.UnknownOutcomeError (OutcomeUnknown): the provider's answer was
//     lost; the intent stays open and a retry with the same key resolves it
//     with the same provider key (never a second charge);
//   - *RefusedRetryError (OutcomeUnknown): the provider refused a retry
//     of an attempt whose outcome was unknown, which proves nothing about
//     the earlier send; the intent stays open, as above;
//   - *provider.CredentialsError (provider.ErrCredentials): the provider
//     refused payonce's API key; nothing is decided, the intent stays
//     open, and a retry with the same key resumes it once the key is fixed;
//   - *provider.NotSentError, *provider.InProgressError: safe to retry;
//   - idempotency.ErrInProgress: another call with this key is running;
//   - idempotency.ErrFingerprintMismatch: the key was used for another
//     amount, currency, recipient, method, provider, description,
//     metadata or shopper; nothing was sent.
func (c *Client) Charge(ctx context.Context, p ChargeParams) (Outcome, error) {
	return c.ChargeTx(ctx, p, nil)
}

// TxFunc is the caller's part of the transaction that records an outcome:
// it runs inside that transaction, after the intent's outcome and the
// ledger postings, before the idempotency record completes, so that the
// caller's own rows (an order marked paid) commit with them or not at all.
// It receives the outcome being recorded (Status SUCCEEDED, DECLINED,
// FAILED, PENDING or REQUIRES_ACTION). An error rolls everything back: the
// provider's answer is then unrecorded, the call returns an
// *provider.UnknownOutcomeError and a retry replays the provider's answer into a
// new transaction (fn runs again then). fn is not called for replays
// (their transaction committed long ago) nor for unknown outcomes.
type TxFunc func(ctx context.Context, tx pgx.Tx, out Outcome) error

// ChargeTx is [Client.Charge] with fn run inside the transaction that
// records the charge's outcome (see [TxFunc]). No transaction is held open
// across the provider call: the intent commits before it, the outcome
// after.
func (c *Client) ChargeTx(ctx context.Context, p ChargeParams, fn TxFunc) (out Outcome, err error) {
	prov, req, pkey, err := c.chargeRequest(p)
	if err != nil {
		return Outcome{}, err
	}
	ctx, span := c.startCall(ctx, "payments.charge", p.Provider, req)
	defer func() { endCall(span, out, err) }()
	cl := &call{fn: fn}
	action := func(ctx context.Context, lease idempotency.Lease) (idempotency.Recording, error) {
		c.hooks.call(pointAfterClaim, c.hooks.afterClaim, ctx, req.Key)
		cl.lease = lease
		return c.charge(ctx, cl, prov, req, p, pkey)
	}
	res, err := c.exec.DoRecording(ctx, req, action)
	if errors.Is(err, idempotency.ErrFingerprintMismatch) {
		res, err = c.chargeLegacy(ctx, req, p, action, res, err)
	}
	c.hooks.call(pointAfterCommit, c.hooks.afterCommit, ctx, req.Key)
	return c.outcome(res, err, p.Provider, cl)
}

// chargeRequest checks p and derives the charge's key, fingerprint and
// provider key (attempt 0's: an earlier attempt's recorded one wins).
func (c *Client) chargeRequest(p ChargeParams) (provider.Provider, idempotency.Request, string, error) {
	prov := c.providers[p.Provider]
	switch {
	case prov == nil:
		return nil, idempotency.Request{}, "", &ConfigError{"Provider", fmt.Sprintf("unknown provider %q", p.Provider)}
	case !p.Amount.IsPositive():
		return nil, idempotency.Request{}, "", &ConfigError{"Amount", fmt.Sprintf("a charge must be positive, got %s", p.Amount)}
	case len(p.Recipient) > 255:
		return nil, idempotency.Request{}, "", &ConfigError{"Recipient", "at most 255 bytes"}
	case p.Recipient == "" && provider.RequiresRecipient(prov):
		return nil, idempotency.Request{}, "", &ConfigError{"Recipient",
			fmt.Sprintf("required by provider %q, which sends the charge to that account; set ChargeParams.Recipient", p.Provider)}
	case p.PaymentMethod == "" || len(p.PaymentMethod) > 255:
		return nil, idempotency.Request{}, "", &ConfigError{"PaymentMethod", "required, at most 255 bytes"}
	case len(p.Description) > 1000:
		return nil, idempotency.Request{}, "", &ConfigError{"Description", "at most 1000 bytes"}
	case len(p.Shopper) > 255:
		return nil, idempotency.Request{}, "", &ConfigError{"Shopper", "at most 255 bytes"}
	}
	if err := checkMetadata(p.Metadata); err != nil {
		return nil, idempotency.Request{}, "", err
	}
	key, err := ChargeKey(p.Scope, p.Key)
	if err != nil {
		return nil, idempotency.Request{}, "", err
	}
	pkey := provider.DeriveKey(key, provider.StepCharge, 0, provider.MaxReferenceLen(prov))
	if v, ok := prov.(provider.Validator); ok {
		if err := v.ValidateCharge(provider.ChargeRequest{Key: key, ProviderKey: pkey, Amount: p.Amount, Recipient: p.Recipient,
			PaymentMethod: p.PaymentMethod, Description: p.Description, Metadata: p.Metadata, Shopper: p.shopper()}); err != nil {
			return nil, idempotency.Request{}, "", err
		}
	}
	fp, err := chargeFingerprint(p)
	if err != nil {
		return nil, idempotency.Request{}, "", err
	}
	return prov, idempotency.Request{Scope: p.Scope, Key: key, Fingerprint: fp}, pkey, nil
}

// chargeFingerprint is what a charge's key is bound to: every field sent
// to the provider under the attempt's references. A provider compares
// what a retry of its idempotency key sends with the first request
// (Stripe refuses other parameters with idempotency_error), so a retry
// with another description, metadata or shopper must be refused here,
// before anything is sent (idempotency.ErrFingerprintMismatch), never at
// the provider. The shopper is the one sent (Shopper, else Scope).
func chargeFingerprint(p ChargeParams) (idempotency.Fingerprint, error) {
	b := idempotency.NewFingerprint().
		Decimal("amount", p.Amount.AmountString()).String("currency", string(p.Amount.Currency())).
		String("recipient", p.Recipient).String("payment_method", p.PaymentMethod).
		String("provider", p.Provider).String("description", p.Description).String("shopper", p.shopper())
	for k, v := range p.Metadata { // the builder's encoding does not depend on the order
		b.String("metadata/"+k, v)
	}
	return b.Sum()
}

// legacyChargeFingerprint is the fingerprint charges had before it
// covered the description, the metadata and the shopper. Records made
// then keep it until they expire: [Client.ChargeTx] accepts it for them
// (chargeLegacy), and an intent whose record is gone is claimed with it
// ([Client.intentFingerprint]).
func legacyChargeFingerprint(amount money.Money, recipient, method, provider string) (idempotency.Fingerprint, error) {
	return idempotency.NewFingerprint().
		Decimal("amount", amount.AmountString()).String("currency", string(amount.Currency())).
		String("recipient", recipient).String("payment_method", method).
		String("provider", provider).Sum()
}

// chargeLegacy retries a charge whose fingerprint did not match its key's
// record with the legacy fingerprint, for a record made before the
// fingerprint covered the description, the metadata and the shopper: an
// in-flight key retried across the upgrade must get its outcome, not a
// refusal. It costs a second claim only on a mismatch, and counts that
// mismatch in idempotency.fingerprint_mismatches. A record with the
// current fingerprint never matches the legacy one (other fields, another
// hash): its mismatch (res, err) is returned as it was.
func (c *Client) chargeLegacy(ctx context.Context, req idempotency.Request, p ChargeParams,
	action idempotency.RecordingAction, res idempotency.Result, err error) (idempotency.Result, error) {
	legacy, ferr := legacyChargeFingerprint(p.Amount, p.Recipient, p.PaymentMethod, p.Provider)
	if ferr != nil {
		return res, err
	}
	old := req
	old.Fingerprint = legacy
	lres, lerr := c.exec.DoRecording(ctx, old, action)
	if errors.Is(lerr, idempotency.ErrFingerprintMismatch) {
		return res, err
	}
	return lres, lerr
}

// intentFingerprint is the fingerprint to claim an existing intent's key
// with (the reconciler, an operator): its record's, which covers what the
// charge sent (its description, metadata and shopper are kept nowhere
// else). A charge intent whose record is gone (pruned) is claimed with
// the legacy fingerprint of its own fields, which a later retry of the key
// is accepted with too (chargeLegacy); a refund's is computed as its
// record's was.
func (c *Client) intentFingerprint(ctx context.Context, in Examined) (idempotency.Fingerprint, error) {
	rec, err := c.store.Get(ctx, in.Scope, in.Key)
	switch {
	case err == nil:
		return rec.Fingerprint, nil
	case !errors.Is(err, idempotency.ErrNotFound):
		return "", err
	case in.Kind == KindRefund:
		return refundFingerprint(in.ChargeKey, in.Amount)
	}
	return legacyChargeFingerprint(in.Amount, in.Recipient, in.PaymentMethod, in.Provider)
}

// refundFingerprint is what a refund's key is bound to.
func refundFingerprint(chargeKey string, amount money.Money) (idempotency.Fingerprint, error) {
	return idempotency.NewFingerprint().String("charge", chargeKey).
		Decimal("amount", amount.AmountString()).String("currency", string(amount.Currency())).Sum()
}

// Metadata limits of every charge, whatever the provider (the strictest
// common ground; a provider with tighter ones refuses through
// provider.Validator).
const (
	MaxMetadataKeys     = 20
	MaxMetadataKeyLen   = 40
	MaxMetadataValueLen = 500
)

func checkMetadata(md map[string]string) error {
	if len(md) > MaxMetadataKeys {
		return &ConfigError{"Metadata", fmt.Sprintf("%d entries, at most %d", len(md), MaxMetadataKeys)}
	}
	for k, v := range md {
		switch {
		case k == "" || len(k) > MaxMetadataKeyLen:
			return &ConfigError{"Metadata", fmt.Sprintf("key %.50q: 1 to %d bytes", k, MaxMetadataKeyLen)}
		case len(v) > MaxMetadataValueLen:
			return &ConfigError{"Metadata", fmt.Sprintf("value of %q: %d bytes, at most %d", k, len(v), MaxMetadataValueLen)}
		}
	}
	return nil
}

const insertIntentSQL = `INSERT INTO payment_intents
    (idempotency_key, user_id, kind, provider, provider_key, amount, currency, recipient, payment_method, client_key,
     attempt_sent_at, attempt_sends, attempt_last_sent_at)
VALUES ($1, $2, 'CHARGE', $3, $4, $5, $6, $7, $8, $9, now(), 1, now())
ON CONFLICT (idempotency_key, user_id) DO NOTHING
RETURNING provider_key`

// resumeIntentSQL reads an intent recorded by an earlier attempt (a retry
// after an unknown outcome): the same provider key must be sent, unless
// the provider's deduplication window for it has passed. An open attempt
// reopened by the reconciler (attempt_sent_at NULL) is about to be sent:
// its window starts now. Every resumption of an open attempt counts as a
// send (attempt_sends, attempt_last_sent_at, updated_at), committed
// before the send goes out: a settling decision about the attempt made on
// a lookup that began before this send is refused by its compare-and-set
// (see [Client.apply]), and the reconciler leaves the intent alone for its
// grace period after the send.
const resumeIntentSQL = `UPDATE payment_intents
   SET attempt_sent_at = CASE WHEN status IN ('PENDING', 'UNKNOWN', 'REQUIRES_ACTION')
                              THEN coalesce(attempt_sent_at, now()) ELSE attempt_sent_at END,
       attempt_sends = CASE WHEN status IN ('PENDING', 'UNKNOWN', 'REQUIRES_ACTION')
                            THEN attempt_sends + 1 ELSE attempt_sends END,
       attempt_last_sent_at = CASE WHEN status IN ('PENDING', 'UNKNOWN', 'REQUIRES_ACTION')
                                   THEN now() ELSE attempt_last_sent_at END,
       updated_at = CASE WHEN status IN ('PENDING', 'UNKNOWN', 'REQUIRES_ACTION')
                         THEN now() ELSE updated_at END
 WHERE idempotency_key = $1 AND user_id = $2
RETURNING provider_key, coalesce(provider_id, ''), status, coalesce(decline_code, ''), coalesce(review_reason, ''),
          attempt, coalesce(attempt_sent_at, now()), now(), attempt_sends, coalesce(attempt_last_sent_at, now())`

// priorIntent is what an earlier attempt recorded of an intent.
type priorIntent struct {
	providerKey, providerID, status, declineCode, reviewReason string
	attempt                                                    int
	// sentAt is when the attempt's references were first sent, now the
	// database's clock at the read.
	sentAt, now time.Time
	// sends counts the attempt's sends, this one included; lastSentAt is
	// the last one's time.
	sends      int
	lastSentAt time.Time
}

func (pi *priorIntent) scan(row pgx.Row) error {
	return row.Scan(&pi.providerKey, &pi.providerID, &pi.status, &pi.declineCode, &pi.reviewReason,
		&pi.attempt, &pi.sentAt, &pi.now, &pi.sends, &pi.lastSentAt)
}

// open reports whether the intent's outcome is still to be learnt.
func (pi priorIntent) open() bool { return openStatus[pi.status] }

// final reports whether a webhook or the reconciler settled the intent
// while no call held its key: a retry then records that state instead of
// calling the provider again.
func (pi priorIntent) final() bool {
	switch IntentStatus(pi.status) {
	case IntentSucceeded, IntentDeclined, IntentFailed:
		return true
	}
	return false
}

// progressSQL records the provider's object as soon as a multi-step
// adapter knows it (PayPal's order, before its capture).
const progressSQL = `UPDATE payment_intents SET provider_id = $3, updated_at = now()
 WHERE idempotency_key = $1 AND user_id = $2 AND provider_id IS DISTINCT FROM $3`

// settleIntentSQL records an outcome. A final status (SUCCEEDED, DECLINED,
// FAILED) is never moved back to an open one: a webhook may have settled
// the intent while the synchronous call was still running, and its late
// "pending" or "unknown" must not undo that.
const settleIntentSQL = `UPDATE payment_intents
   SET status = CASE WHEN status IN ('SUCCEEDED', 'DECLINED', 'FAILED') AND $3 IN ('PENDING', 'UNKNOWN', 'REQUIRES_ACTION')
                     THEN status ELSE $3 END,
       provider_id = coalesce(nullif($4, ''), provider_id), decline_code = coalesce(nullif($5, ''), decline_code), updated_at = now()
 WHERE idempotency_key = $1 AND user_id = $2`

// charge runs under the key's lease: intent first, then the provider,
// then the outcome in one transaction with the record.
func (c *Client) charge(ctx context.Context, cl *call, prov provider.Provider, req idempotency.Request, p ChargeParams, pkey string) (idempotency.Recording, error) {
	// The intent is recorded before the call (a retry finds it and reuses
	// its provider key).
	var prior priorIntent
	err := c.pool.QueryRow(ctx, insertIntentSQL, req.Key, req.Scope, p.Provider, pkey,
		p.Amount.AmountString(), string(p.Amount.Currency()), p.Recipient, p.PaymentMethod, p.Key).Scan(&pkey)
	if errors.Is(err, pgx.ErrNoRows) { // recorded by an earlier attempt: reuse its provider key
		err = prior.scan(c.pool.QueryRow(ctx, resumeIntentSQL, req.Key, req.Scope))
		pkey = prior.providerKey
	}
	if isForeignKeyUse(err) {
		return idempotency.Recording{}, foreignKey("charge")
	}
	if err != nil {
		return idempotency.Recording{}, fmt.Errorf("payments: record intent: %w", err)
	}
	subj := subject{scope: req.Scope, key: req.Key, kind: KindCharge, provider: p.Provider, amount: p.Amount}
	if prior.final() {
		return c.record(ctx, cl, subj, decideSettled(subj, IntentStatus(prior.status), prior.providerID, prior.declineCode))
	}
	if prior.status == string(IntentNeedsReview) {
		return idempotency.Recording{}, &UnderReviewError{Reason: prior.reviewReason}
	}
	if prior.open() && c.beyondWindow(prov, provider.StepCharge, prior) {
		in := Examined{Scope: req.Scope, Key: req.Key, Kind: KindCharge, Provider: p.Provider, ProviderKey: pkey,
			ProviderID: prior.providerID, Attempt: prior.attempt, Status: IntentStatus(prior.status), Amount: p.Amount,
			Recipient: p.Recipient, PaymentMethod: p.PaymentMethod, SentAt: prior.sentAt, Sends: prior.sends, LastSentAt: prior.lastSentAt}
		return c.settleBeyondWindow(ctx, cl, prov, in)
	}
	known := prior.providerID
	c.hooks.call(pointAfterIntent, c.hooks.afterIntent, ctx, req.Key)
	// A holder whose lease may have ended (heartbeats unconfirmed past
	// its local deadline, or paused beyond it) sends nothing: another
	// holder may own the key by now. The intent stays open with the same
	// provider key; a retry re-drives it.
	if err := idempotency.CheckLease(ctx); err != nil {
		return idempotency.Recording{}, err
	}
	started := time.Now()
	pctx, pspan := c.startProvider(ctx, provider.StepCharge, p.Provider, pkey)
	pres, perr := prov.Charge(pctx, provider.ChargeRequest{Key: req.Key, ProviderKey: pkey, Amount: p.Amount,
		Recipient: p.Recipient, PaymentMethod: p.PaymentMethod, Description: p.Description, Metadata: p.Metadata,
		Shopper: p.shopper(), ProviderID: known,
		Progress: func(ctx context.Context, id string) error {
			_, err := c.pool.Exec(ctx, progressSQL, req.Key, req.Scope, id)
			return err
		}})
	endProvider(pspan, pres.ProviderID, pres.RequestID, string(pres.Status), pres.Replayed, perr)
	c.hooks.call(pointAfterProvider, c.hooks.afterProvider, ctx, req.Key)
	c.metrics.observe(ctx, "charge", p.Provider, string(pres.Status), perr, time.Since(started))

	// A resumed attempt (an open intent: its references were sent before)
	// is settled by a refusal only when the provider replayed it.
	t, err := decideCharge(subj, prior.open(), pres, perr)
	var mismatch *provider.KeyMismatchError
	switch {
	case err == nil:
		return c.record(ctx, cl, subj, t)
	case errors.As(err, &mismatch):
		// Not expected: every field sent is in the key's fingerprint (only
		// a record made before it was can get here). The intent is left
		// open for a human; the key stays released.
		c.log.Error("payments: provider saw this key with other parameters", "key", idempotency.ShortHash(req.Key), "provider", p.Provider)
		return idempotency.Recording{}, err
	case errors.Is(err, provider.ErrCredentials):
		c.log.Error("payments: provider refused our credentials; the intent stays open", "key", idempotency.ShortHash(req.Key),
			"provider", p.Provider, "err", err)
	}
	// Unknown, not sent, in progress at the provider: the intent stays
	// open with the same provider key; the lease is released.
	return idempotency.Recording{}, c.markUnknown(ctx, subj, err)
}

// postCharge records a succeeded charge in the ledger.
func (c *Client) postCharge(ctx context.Context, tx pgx.Tx, key, provider string, amount money.Money) error {
	for _, a := range ledger.ChartAccounts(provider, amount.Currency()) {
		if _, err := c.ledger.EnsureAccountTx(ctx, tx, a); err != nil {
			return err
		}
	}
	entry, err := ledger.ChargeEntry(key, provider, amount)
	if err != nil {
		return err
	}
	_, err = c.ledger.PostTx(ctx, tx, entry)
	return err
}

// Intent is the stored state of a payment intent.
type Intent struct {
	Scope, Key, Provider, ProviderKey, ProviderID string
	Status                                        IntentStatus
	Amount                                        string
	Currency                                      string
}

// Intent reads the intent of a charge by the client's key.
func (c *Client) Intent(ctx context.Context, scope, key string) (Intent, error) {
	return c.intent(ctx, scope, key, ChargeKey)
}

// RefundIntent reads the intent of a refund by the client's key.
func (c *Client) RefundIntent(ctx context.Context, scope, key string) (Intent, error) {
	return c.intent(ctx, scope, key, RefundKey)
}

// intent reads the intent of the client's key, composed by compose
// ([ChargeKey], [RefundKey]).
func (c *Client) intent(ctx context.Context, scope, key string, compose func(scope, key string) (string, error)) (Intent, error) {
	k, err := compose(scope, key)
	if err != nil {
		return Intent{}, err
	}
	var in Intent
	var pid *string
	err = c.pool.QueryRow(ctx, `SELECT provider, provider_key, provider_id, status, amount::text, currency
		FROM payment_intents WHERE idempotency_key = $1 AND user_id = $2`, k, scope).
		Scan(&in.Provider, &in.ProviderKey, &pid, &in.Status, &in.Amount, &in.Currency)
	if errors.Is(err, pgx.ErrNoRows) {
		return Intent{}, idempotency.ErrNotFound
	}
	if err != nil {
		return Intent{}, err
	}
	if pid != nil {
		in.ProviderID = *pid
	}
	in.Scope, in.Key = scope, key
	return in, nil
}

// encodeStored is the idempotency record's body for an outcome.
func encodeStored(s stored) ([]byte, error) { return json.Marshal(s) }
