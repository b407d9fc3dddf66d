// Package service is the checkout example's HTTP service: charges and
// refunds through payonce's payments API, with the client's
// Idempotency-Key as the payment's key, so that any number of retries,
// double clicks and lost responses charge a customer once.
//
// It is a separate package only so that `payonce demo` can run the very
// same service as a worker process it kills and restarts; read it as the
// code a checkout service would contain.
//
// # Endpoints
//
// "Authorization: Bearer <user>" makes <user> the scope (a demo
// authentication). Every POST needs an Idempotency-Key header.
//
//	POST /charges  {"amount": "49.99", "currency": "EUR", "recipient": "acct_x",
//	                "payment_method": "pm_card_visa", "provider": "stripe",
//	                "description": "...", "metadata": {"order": "o-1"}}
//	POST /refunds  {"charge_key": "<the charge's Idempotency-Key>", "amount": "10.00"}
//	GET  /charges/{key}, GET /refunds/{key}: the intent's current state
//	POST /webhooks/stripe, /webhooks/adyen, /webhooks/paypal: the providers'
//	     notifications, verified, stored once and applied to the intents
//
// A charge or refund answers its outcome as JSON ({"key", "status",
// "provider", "provider_id", "amount", "currency"}), with
// "Idempotent-Replayed: true" when an earlier request with the same key
// recorded it.
//
// # Status codes
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
// ("UNKNOWN"), and GET /charges/{key} reads it at any time.
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
	"github.com/payonce/payonce/wiring"
)

// Config configures a Service.
type Config struct {
	// DatabaseURL is the PostgreSQL the service records into; it is
	// migrated on Open.
	DatabaseURL string
	// Config configures the providers (each one whose API base is set),
	// the HTTP client and timeout of their calls, the lease of a payment
	// in progress and the logger, whose default here is slog.Default():
	// see wiring.Config.
	wiring.Config
}

// Service is the checkout service.
type Service struct {
	pool     *pgxpool.Pool
	client   *payments.Client
	log      *slog.Logger
	webhooks []namedHandler
}

type namedHandler struct {
	name string
	h    http.Handler
}

// Open connects, migrates and wires payments with the configured
// providers.
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
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		return nil, err
	}
	client, err := NewClient(pool, cfg)
	if err != nil {
		return nil, err
	}
	s := &Service{pool: pool, log: cfg.Logger, client: client}
	for _, name := range []string{"stripe", "adyen", "paypal"} {
		if _, ok := client.Provider(name).(payments.WebhookVerifier); !ok {
			continue
		}
		h, err := client.WebhookHandler(name, &payments.WebhookConfig{Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		s.webhooks = append(s.webhooks, namedHandler{name, h})
	}
	return s, nil
}

// NewClient wires a payments client on a migrated database with the
// providers cfg configures (wiring.Client).
func NewClient(pool *pgxpool.Pool, cfg Config) (*payments.Client, error) {
	client, err := wiring.Client(pool, cfg.Config)
	if errors.Is(err, wiring.ErrNoProvider) {
		return nil, fmt.Errorf("checkout: %w", err)
	}
	return client, err
}

// Close releases the database pool.
func (s *Service) Close() { s.pool.Close() }

// Client is the service's payments client.
func (s *Service) Client() *payments.Client { return s.client }

// Handler serves the endpoints.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", s.charge)
	mux.HandleFunc("POST /refunds", s.refund)
	mux.HandleFunc("GET /charges/{key}", s.getIntent(s.client.Intent))
	mux.HandleFunc("GET /refunds/{key}", s.getIntent(s.client.RefundIntent))
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
		decline  *payments.DeclineError
		invalid  *payments.InvalidRequestError
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
	case errors.Is(err, payments.ErrNeedsReview):
		problem(w, http.StatusConflict, "payment-under-review", "This payment's outcome could not be proven and is being reviewed; it will not be charged again with this key.", 0,
			map[string]any{"status": string(payments.IntentNeedsReview)})
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// The client gave up (or the request's deadline passed): whatever
		// was recorded stays recorded, and a retry with the key resolves it.
		problem(w, http.StatusServiceUnavailable, "request-abandoned", "The request ended before its outcome was known; retry with the same Idempotency-Key.", time.Second, nil)
	case payments.OutcomeUnknown(err) || payments.SafeToRetry(err):
		status := payments.IntentUnknown
		if errors.Is(err, payments.ErrNotSent) {
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

// ConfigFromEnv reads the service's environment: DATABASE_URL and the
// providers' variables (wiring.FromEnv: STRIPE_API_BASE,
// STRIPE_SECRET_KEY, STRIPE_WEBHOOK_SECRET, ADYEN_API_BASE, ADYEN_API_KEY,
// ADYEN_MERCHANT_ACCOUNT, ADYEN_HMAC_KEY, ADYEN_RETURN_URL,
// PAYPAL_API_BASE, PAYPAL_CLIENT_ID, PAYPAL_SECRET, PAYPAL_WEBHOOK_ID).
// It refuses a provider base URL without its credentials.
func ConfigFromEnv() (Config, error) { return ConfigFrom(os.Getenv) }

// ConfigFrom is ConfigFromEnv reading the variables through getenv.
func ConfigFrom(getenv func(string) string) (Config, error) {
	providers, err := wiring.FromEnv(getenv)
	return Config{DatabaseURL: getenv("DATABASE_URL"), Config: providers}, err
}
