// Package service is the checkout example's HTTP service: charges and
// refunds through payonce's payments API, with the client's
// Idempotency-Key as the payment's key, so that any number of retries,
// double clicks and lost responses charge a customer once; and a checkout
// that reserves stock, charges and records the order as one saga (package
// saga), done once per key or undone step by step.
//
// It is a separate package only so that `payonce demo` can run the very
// same service as a worker process it kills and restarts; read it as the
// code a checkout service would contain.
//
// # Endpoints
//
// "Authorization: Bearer <user>" makes <user> the scope (a demo
// authentication). Every POST except /inventory needs an Idempotency-Key
// header.
//
//	POST /charges  {"amount": "49.99", "currency": "EUR", "recipient": "acct_x",
//	                "payment_method": "pm_card_visa", "provider": "stripe",
//	                "description": "...", "metadata": {"order": "o-1"}}
//	POST /refunds  {"charge_key": "<the charge's Idempotency-Key>", "amount": "10.00"}
//	GET  /charges/{key}, GET /refunds/{key}: the intent's current state
//	POST /checkout {"sku": "book-42", "qty": 1, "amount": "49.99", "currency": "EUR",
//	                "payment_method": "pm_card_visa", "provider": "stripe", "recipient": "acct_x"}
//	GET  /checkout/{key}: the checkout saga's state and steps
//	POST /inventory {"sku": "book-42", "stock": 10}: sets a sku's stock (demos, tests)
//	POST /webhooks/stripe, /webhooks/adyen, /webhooks/paypal: the providers'
//	     notifications, verified, stored once and applied to the intents
//
// A charge or refund answers its outcome as JSON ({"key", "status",
// "provider", "provider_id", "amount", "currency"}), with
// "Idempotent-Replayed: true" when an earlier request with the same key
// recorded it.
//
// # Status codes of charges and refunds
//
//	201  succeeded (the money moved)
//	202  accepted, final outcome later (PENDING, REQUIRES_ACTION)
//	400  bad input (names the field), missing or malformed Idempotency-Key
//	401  no Authorization
//	402  declined by the provider (decline_code); final for the key
//	404  no such charge for this caller, or an Idempotency-Key that
//	     belongs to another caller (nothing is created)
//	409  the key is still being processed (Retry-After), or was used with
//	     another amount, currency, recipient, payment method or provider,
//	     or the payment is under review (NEEDS_REVIEW: never re-charged)
//	422  refused by the provider as invalid, or a refund beyond the charge
//	503  outcome unknown (the provider's answer was lost), not sent, or
//	     payonce's database unavailable: Retry-After; retry with the SAME
//	     key, which resolves it without a second charge
//
// Unknown outcomes answer 503 with Retry-After rather than 202: it is the
// answer every HTTP client and retry middleware already retries, and a
// retry with the same key is exactly what resolves the outcome (payonce
// re-drives the provider call with the same provider key, which the
// provider deduplicates). The body still carries the intent's status
// ("UNKNOWN"), and GET /charges/{key} reads it at any time. A client
// that never retries loses nothing either: the service's payments
// reconciler (Config.Reconcile) asks the provider and settles the intent.
//
// # Checkout
//
// POST /checkout runs the saga "checkout" with the Idempotency-Key as its
// key, bound to every field of the body:
//
//  1. reserve (local): takes qty of sku out of the inventory table (a
//     conditional UPDATE: never oversold, whatever the concurrency) and
//     records a reservation, in the transaction of the step's transition;
//  2. charge (remote): payments.Charge with the step's sub-key
//     "<key>_charge" (so GET /charges/<key>_charge reads the payment);
//     compensated by a refund of the whole amount with the key
//     "<key>_charge_compensate";
//  3. confirm (local): records the order (the orders table) and marks the
//     reservation confirmed; Config.ConfirmCheck may refuse the order here.
//
// A step that fails for good undoes the steps before it, in reverse order:
// a decline releases the reservation; a refused order is refunded and
// released. A step whose outcome is unknown is never undone blindly: the
// saga waits, and a retry with the same key, or the service's recovery job
// (Config.RecoverSpec), runs it again with the same sub-key. A client that
// gives up therefore still gets its checkout finished, and reads it with
// GET /checkout/{key}.
//
// A finished checkout answers {"key", "status", "order", "failed_step",
// "reason", "steps": [{"name", "status", "output", "error"}]}, stored with
// the saga and replayed byte for byte ("Idempotent-Replayed: true"). Its
// status codes:
//
//	201  COMPLETED: reserved, charged, confirmed; "order" is the order
//	202  not finished (a step's outcome unknown, a transient failure, the
//	     request ended part-way): Retry-After; retry with the SAME key, or
//	     read GET /checkout/{key}: the recovery job finishes it meanwhile
//	400  bad input (names the field: sku, qty, amount, currency,
//	     payment_method, provider, recipient, or an unknown one), missing
//	     or malformed Idempotency-Key; nothing is recorded
//	401  no Authorization
//	402  ROLLED_BACK: the charge was declined; the items were released
//	409  ROLLED_BACK out-of-stock (nothing was charged) or
//	     order-not-confirmed (refunded, items released); the key is still
//	     being processed (request-in-progress, Retry-After); the key was
//	     used with another body (idempotency-key-reused, nothing changed);
//	     checkout-under-review (NEEDS_REVIEW: an undo failed for good)
//	422  ROLLED_BACK: the provider refused the charge as invalid; or the
//	     key is past its retention
//	503  payonce's database unavailable: Retry-After
//
// The answers of 402 and 409 ROLLED_BACK are problems (RFC 9457) carrying
// "status", "failed_step", "reason" and "steps". GET /checkout/{key}
// answers 200 with {"key", "saga", "status", "current_step",
// "failed_step", "reason", "steps": [{"name", "kind", "status", "output",
// "error", "attempts", "compensation_attempts"}], "created_at",
// "updated_at", "finished_at"}, or 404 when this caller has no such
// checkout.
//
// # Tables
//
// The example owns its tables inventory, reservations and orders: Open
// creates them (CREATE TABLE IF NOT EXISTS, under an advisory lock), next
// to payonce's own, which it migrates.
package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers"
	"github.com/payonce/payonce/reconcile"
	"github.com/payonce/payonce/saga"
)

// Config configures a Service.
type Config struct {
	// DatabaseURL is the PostgreSQL the service records into; it is
	// migrated on Open.
	DatabaseURL string
	// Config configures the providers (each one whose API base is set),
	// the HTTP client and timeout of their calls, the lease of a payment
	// in progress and the logger, whose default here is slog.Default():
	// see providers.Config. Its LockTimeout is the checkout sagas' lease
	// too.
	providers.Config
	// RecoverSpec is the cron schedule (saga.Config.RecoverSpec) of the
	// checkout sagas' recovery, which finishes the sagas whose client gave
	// up or whose process died. Default "@every 1m"; "off" runs none (for
	// tests that want the client's retries alone to finish a saga).
	RecoverSpec string
	// Reconcile configures the payments reconciler Open schedules
	// (reconcile.Reconciler.Start): it settles, with no client retry,
	// the payments whose outcome stayed unknown (a provider answering
	// 5xx, an answer lost, a crash), as every service charging through
	// payonce runs it. Its Spec is the cron schedule; "" or "off" runs
	// none (ConfigFromEnv defaults it to "@every 1m"). Its Logger,
	// MeterProvider and TracerProvider default to the service's.
	Reconcile reconcile.Config
	// ConfirmCheck, when set, runs in the checkout saga's confirm step,
	// after the charge, before the order is recorded: an error fails the
	// step for good, so the charge is refunded and the items released.
	// The place for a last check (a fraud rule, an address); tests inject
	// a failure after the charge with it.
	ConfirmCheck func(ctx context.Context, o Order) error
	// CrashAt is for tests only: "<step>:<phase>" kills the process with
	// SIGKILL at that point of every checkout saga, to test recovery
	// from a crash. step is reserve, charge, confirm, reserve_compensate or
	// charge_compensate; phase is before (the step's action, or
	// compensation, starts), commit (its effect is done, its outcome not
	// yet committed) or after (its outcome committed). Default: never.
	CrashAt string
}

// Service is the checkout service.
type Service struct {
	pool         *pgxpool.Pool
	client       *payments.Client
	orch         *saga.Orchestrator
	log          *slog.Logger
	webhooks     []namedHandler
	confirmCheck func(context.Context, Order) error
	crash        crashAt
	stopRecovery func()
	stopRecon    func() // the payments reconciler's; nil: none
}

type namedHandler struct {
	name string
	h    http.Handler
}

// Open connects, migrates, creates the example's tables, wires payments
// with the configured providers and the checkout saga, and starts the
// saga's recovery (Config.RecoverSpec) and the payments reconciler
// (Config.Reconcile). Close stops them.
func Open(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.DatabaseURL == "" {
		return nil, errors.New("checkout: DatabaseURL is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("checkout: database: %w", err)
	}
	s, err := open(ctx, pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

func open(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Service, error) {
	crash, err := parseCrashAt(cfg.CrashAt)
	if err != nil {
		return nil, fmt.Errorf("checkout: %w", err)
	}
	recoverSpec := cfg.RecoverSpec
	if recoverSpec == "off" {
		recoverSpec = ""
	}
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		return nil, err
	}
	if err := createSchema(ctx, pool); err != nil {
		return nil, err
	}
	client, err := NewClient(pool, cfg)
	if err != nil {
		return nil, err
	}
	orch, err := saga.New(pool, &saga.Config{LockTimeout: cfg.LockTimeout, RecoverSpec: recoverSpec, Logger: cfg.Logger, Hooks: crash.hooks()})
	if err != nil {
		return nil, fmt.Errorf("checkout: %w", err)
	}
	s := &Service{pool: pool, log: cfg.Logger, client: client, orch: orch, confirmCheck: cfg.ConfirmCheck, crash: crash}
	if err := orch.Register(s.definition()); err != nil {
		return nil, err
	}
	for _, name := range []string{"stripe", "adyen", "paypal"} {
		if _, ok := client.Provider(name).(provider.WebhookVerifier); !ok {
			continue
		}
		h, err := client.WebhookHandler(name, &payments.WebhookConfig{Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		s.webhooks = append(s.webhooks, namedHandler{name, h})
	}
	rec, err := newReconciler(pool, client, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.RecoverSpec != "off" {
		s.stopRecovery = orch.Start(context.WithoutCancel(ctx))
	}
	if rec != nil {
		s.stopRecon = rec.Start(context.WithoutCancel(ctx))
	}
	return s, nil
}

// NewClient wires a payments client on a migrated database with the
// providers cfg configures (providers.Client).
func NewClient(pool *pgxpool.Pool, cfg Config) (*payments.Client, error) {
	client, err := providers.NewClient(pool, cfg.Config)
	if errors.Is(err, providers.ErrNoProvider) {
		return nil, fmt.Errorf("checkout: %w", err)
	}
	return client, err
}

// Close stops the saga recovery and the reconciler, and releases the
// database pool.
func (s *Service) Close() {
	if s.stopRecovery != nil {
		s.stopRecovery()
	}
	if s.stopRecon != nil {
		s.stopRecon()
	}
	s.pool.Close()
}

// Client is the service's payments client.
func (s *Service) Client() *payments.Client { return s.client }

// Sagas is the service's saga orchestrator (the checkout saga is
// registered on it).
func (s *Service) Sagas() *saga.Orchestrator { return s.orch }

// Handler serves the endpoints.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", s.charge)
	mux.HandleFunc("POST /refunds", s.refund)
	mux.HandleFunc("GET /charges/{key}", s.getIntent(s.client.Intent))
	mux.HandleFunc("GET /refunds/{key}", s.getIntent(s.client.RefundIntent))
	mux.HandleFunc("POST /checkout", s.checkout)
	mux.HandleFunc("GET /checkout/{key}", s.getCheckout)
	mux.HandleFunc("POST /inventory", s.inventory)
	for _, w := range s.webhooks {
		mux.Handle("POST /webhooks/"+w.name, w.h)
	}
	return mux
}

// maxBody bounds a request body.
const maxBody = 64 << 10

// decimal is an amount as sent: a JSON string ("49.99", preferred) or a
// JSON number, kept verbatim for money.Parse to judge.
type decimal string

func (d *decimal) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*d = decimal(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return errors.New("amount: a decimal string such as \"49.99\" is expected")
	}
	*d = decimal(n.String())
	return nil
}

type chargeIn struct {
	Amount        decimal           `json:"amount"`
	Currency      string            `json:"currency"`
	Recipient     string            `json:"recipient"`
	PaymentMethod string            `json:"payment_method"`
	Provider      string            `json:"provider"`
	Description   string            `json:"description"`
	Metadata      map[string]string `json:"metadata"`
}

type refundIn struct {
	ChargeKey string  `json:"charge_key"`
	Amount    decimal `json:"amount"`
}

// outcomeOut is a charge's or refund's answer.
type outcomeOut struct {
	Key        string `json:"key"`
	Status     string `json:"status"`
	Provider   string `json:"provider"`
	ProviderID string `json:"provider_id,omitempty"`
	Amount     string `json:"amount"`
	Currency   string `json:"currency"`
}

func (s *Service) charge(w http.ResponseWriter, r *http.Request) {
	scope, key, ok := s.caller(w, r)
	if !ok {
		return
	}
	var in chargeIn
	if !decode(w, r, &in) {
		return
	}
	cur, err := money.ParseCurrency(in.Currency)
	if err != nil {
		badField(w, "currency", err)
		return
	}
	amount, err := money.Parse(string(in.Amount), cur)
	if err != nil {
		badField(w, "amount", err)
		return
	}
	out, err := s.client.Charge(r.Context(), payments.ChargeParams{Scope: scope, Key: key, Provider: in.Provider,
		Amount: amount, Recipient: in.Recipient, PaymentMethod: in.PaymentMethod,
		Description: in.Description, Metadata: in.Metadata})
	s.answer(w, key, out, err)
}

func (s *Service) refund(w http.ResponseWriter, r *http.Request) {
	scope, key, ok := s.caller(w, r)
	if !ok {
		return
	}
	var in refundIn
	if !decode(w, r, &in) {
		return
	}
	if in.ChargeKey == "" {
		badField(w, "charge_key", errors.New("required"))
		return
	}
	charge, err := s.client.Intent(r.Context(), scope, in.ChargeKey)
	if err != nil {
		s.answer(w, key, payments.Outcome{}, err)
		return
	}
	cur, err := money.ParseCurrency(charge.Currency)
	if err != nil {
		s.answer(w, key, payments.Outcome{}, err)
		return
	}
	amount, err := money.Parse(string(in.Amount), cur)
	if err != nil {
		badField(w, "amount", err)
		return
	}
	out, err := s.client.Refund(r.Context(), payments.RefundParams{Scope: scope, Key: key, ChargeKey: in.ChargeKey, Amount: amount})
	s.answer(w, key, out, err)
}

func (s *Service) getIntent(read func(ctx context.Context, scope, key string) (payments.Intent, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		scope := bearer(r)
		if scope == "" {
			problem(w, http.StatusUnauthorized, "unauthenticated", "Send Authorization: Bearer <user>.", 0, nil)
			return
		}
		key := r.PathValue("key")
		in, err := read(r.Context(), scope, key)
		if err != nil {
			s.answer(w, key, payments.Outcome{}, err)
			return
		}
		writeJSON(w, http.StatusOK, outcomeOut{Key: key, Status: string(in.Status), Provider: in.Provider,
			ProviderID: in.ProviderID, Amount: in.Amount, Currency: in.Currency})
	}
}

// caller authenticates and reads the Idempotency-Key.
func (s *Service) caller(w http.ResponseWriter, r *http.Request) (scope, key string, ok bool) {
	scope = bearer(r)
	if scope == "" {
		problem(w, http.StatusUnauthorized, "unauthenticated", "Send Authorization: Bearer <user>.", 0, nil)
		return "", "", false
	}
	values := r.Header.Values("Idempotency-Key")
	if len(values) == 0 {
		problem(w, http.StatusBadRequest, "idempotency-key-missing", "Payments need an Idempotency-Key header: retries with the same key charge once.", 0, nil)
		return "", "", false
	}
	key, err := idempotency.ParseKeyHeader(values)
	if err != nil {
		problem(w, http.StatusBadRequest, "idempotency-key-malformed", "The Idempotency-Key header is malformed: "+err.Error(), 0, nil)
		return "", "", false
	}
	return scope, key, true
}

// answer maps a payments outcome or error to HTTP (see the package doc).
func (s *Service) answer(w http.ResponseWriter, key string, out payments.Outcome, err error) {
	var (
		decline  *provider.DeclineError
		invalid  *provider.InvalidRequestError
		cfgErr   *payments.ConfigError
		badInput *idempotency.InvalidError
		inFlight *idempotency.InProgressError
	)
	switch {
	case err == nil:
		if out.Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		code := http.StatusCreated
		if out.Status != payments.IntentSucceeded {
			code = http.StatusAccepted
		}
		writeJSON(w, code, outcomeOut{Key: key, Status: string(out.Status), Provider: out.Provider,
			ProviderID: out.ProviderID, Amount: out.Amount, Currency: out.Currency})
	case errors.As(err, &decline):
		replayed(w, out)
		problem(w, http.StatusPaymentRequired, "declined", decline.Error(), 0, map[string]any{"decline_code": decline.DeclineCode, "status": string(payments.IntentDeclined)})
	case errors.As(err, &invalid):
		replayed(w, out)
		problem(w, http.StatusUnprocessableEntity, "invalid-request", invalid.Error(), 0, map[string]any{"code": invalid.Code, "param": invalid.Param, "status": string(payments.IntentFailed)})
	case errors.As(err, &cfgErr):
		badField(w, cfgErr.Field, errors.New(cfgErr.Reason))
	case errors.As(err, &badInput):
		badField(w, badInput.Field, errors.New(badInput.Reason))
	case errors.Is(err, idempotency.ErrFingerprintMismatch):
		problem(w, http.StatusConflict, "idempotency-key-reused", "This Idempotency-Key was used for another payment (amount, currency, recipient, payment method or provider).", 0, nil)
	case errors.As(err, &inFlight):
		problem(w, http.StatusConflict, "request-in-progress", "A payment with this key is still being processed; retry with the same key.", max(inFlight.RetryAfter, time.Second), nil)
	case errors.Is(err, idempotency.ErrInProgress):
		problem(w, http.StatusConflict, "request-in-progress", "A payment with this key is still being processed; retry with the same key.", time.Second, nil)
	case errors.Is(err, idempotency.ErrNotFound) || errors.Is(err, idempotency.ErrForeignKey):
		// A key another customer used answers as if it did not exist:
		// nothing is created, and nothing about the other charge leaks.
		problem(w, http.StatusNotFound, "not-found", "No such charge for this caller.", 0, nil)
	case errors.Is(err, idempotency.ErrExpired):
		problem(w, http.StatusUnprocessableEntity, "idempotency-key-expired", "This Idempotency-Key is past its retention; use a new key for a new payment.", 0, nil)
	case errors.Is(err, payments.ErrUnderReview):
		problem(w, http.StatusConflict, "payment-under-review", "This payment's outcome could not be proven and is being reviewed; it will not be charged again with this key.", 0,
			map[string]any{"status": string(payments.IntentNeedsReview)})
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// The client gave up (or the request's deadline passed): whatever
		// was recorded stays recorded, and a retry with the key resolves it.
		problem(w, http.StatusServiceUnavailable, "request-abandoned", "The request ended before its outcome was known; retry with the same Idempotency-Key.", time.Second, nil)
	case payments.OutcomeUnknown(err) || idempotency.SafeToRetry(err):
		status := payments.IntentUnknown
		if errors.Is(err, provider.ErrNotSent) {
			status = payments.IntentPending
		}
		problem(w, http.StatusServiceUnavailable, "outcome-pending", "The payment's outcome is not known yet; retry with the same Idempotency-Key to resolve it (it will not charge twice).", time.Second, map[string]any{"status": string(status)})
	default:
		s.log.Error("checkout: unexpected error", "key", idempotency.ShortHash(key), "err", err)
		problem(w, http.StatusServiceUnavailable, "unavailable", "The payment could not be processed now; retry with the same Idempotency-Key.", 2*time.Second, nil)
	}
}

func replayed(w http.ResponseWriter, out payments.Outcome) {
	if out.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
}

// bearer is the demo authentication: "Authorization: Bearer <user>".
func bearer(r *http.Request) string {
	user, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(user)
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			problem(w, http.StatusRequestEntityTooLarge, "body-too-large", fmt.Sprintf("The body exceeds %d bytes.", maxBody), 0, nil)
			return false
		}
		problem(w, http.StatusBadRequest, "body-unreadable", "The body could not be read.", 0, nil)
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			badField(w, typeErr.Field, fmt.Errorf("a JSON %s is expected", typeErr.Type.Kind()))
			return false
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			if f, err := strconv.Unquote(f); err == nil {
				badField(w, f, errors.New("unknown field"))
				return false
			}
		}
		problem(w, http.StatusBadRequest, "body-invalid", "The body is not the expected JSON: "+err.Error(), 0, nil)
		return false
	}
	return true
}

// jsonFields names payments' parameters as the request body does.
var jsonFields = map[string]string{"Provider": "provider", "Amount": "amount", "Recipient": "recipient",
	"PaymentMethod": "payment_method", "Description": "description", "Metadata": "metadata", "scope": "authorization"}

func badField(w http.ResponseWriter, field string, err error) {
	if f, ok := jsonFields[field]; ok {
		field = f
	}
	problem(w, http.StatusBadRequest, "invalid-field", field+": "+err.Error(), 0, map[string]any{"field": field})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// problem writes an RFC 9457 problem; it never echoes keys or bodies.
func problem(w http.ResponseWriter, status int, typ, detail string, retryAfter time.Duration, extra map[string]any) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	}
	w.WriteHeader(status)
	body := map[string]any{"type": "https://payonce.dev/problems/" + typ, "title": http.StatusText(status), "status": status, "detail": detail}
	for k, v := range extra {
		body[k] = v
	}
	_ = json.NewEncoder(w).Encode(body)
}

// ConfigFromEnv reads the service's environment: DATABASE_URL, the
// providers' variables (providers.FromEnv: STRIPE_API_BASE,
// STRIPE_SECRET_KEY, STRIPE_WEBHOOK_SECRET, ADYEN_API_BASE, ADYEN_API_KEY,
// ADYEN_MERCHANT_ACCOUNT, ADYEN_HMAC_KEY, ADYEN_RETURN_URL,
// PAYPAL_API_BASE, PAYPAL_CLIENT_ID, PAYPAL_SECRET, PAYPAL_WEBHOOK_ID),
// CHECKOUT_LOCK_TIMEOUT (a Go duration: Config.LockTimeout) and
// CHECKOUT_RECOVER_SPEC (Config.RecoverSpec), and the payments
// reconciler's (Config.Reconcile): CHECKOUT_RECONCILE_SPEC (its cron
// schedule, default "@every 1m"; "off" runs none),
// CHECKOUT_RECONCILE_GRACE (a Go duration: reconcile.Config.Grace) and
// CHECKOUT_RECONCILE_RECHECK (comma-separated Go durations:
// reconcile.Config.Schedule). Two more are for tests
// only: PAYONCE_CHECKOUT_CRASH_AT (Config.CrashAt) and
// PAYONCE_CHECKOUT_FAIL_CONFIRM_SKU (a Config.ConfirmCheck that fails the
// confirm step of every checkout of that sku). It refuses a provider base
// URL without its credentials, and malformed values.
func ConfigFromEnv() (Config, error) { return ConfigFrom(os.Getenv) }

// ConfigFrom is ConfigFromEnv reading the variables through getenv.
func ConfigFrom(getenv func(string) string) (Config, error) {
	providers, err := providers.FromEnv(getenv)
	cfg := Config{DatabaseURL: getenv("DATABASE_URL"), Config: providers,
		RecoverSpec: getenv("CHECKOUT_RECOVER_SPEC"), CrashAt: getenv("PAYONCE_CHECKOUT_CRASH_AT")}
	if err != nil {
		return cfg, err
	}
	if v := getenv("CHECKOUT_LOCK_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("checkout: CHECKOUT_LOCK_TIMEOUT=%q: a positive duration such as 30s is expected", v)
		}
		cfg.LockTimeout = d
	}
	if cfg.Reconcile, err = reconcileFrom(getenv); err != nil {
		return cfg, err
	}
	if _, err := parseCrashAt(cfg.CrashAt); err != nil {
		return cfg, fmt.Errorf("checkout: PAYONCE_CHECKOUT_CRASH_AT: %w", err)
	}
	if sku := getenv("PAYONCE_CHECKOUT_FAIL_CONFIRM_SKU"); sku != "" {
		cfg.ConfirmCheck = func(_ context.Context, o Order) error {
			if o.SKU == sku {
				return fmt.Errorf("confirm refused for %q (PAYONCE_CHECKOUT_FAIL_CONFIRM_SKU)", sku)
			}
			return nil
		}
	}
	return cfg, nil
}
