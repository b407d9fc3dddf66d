package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/saga"
)

// rawField is a number field as sent, kept verbatim and judged by
// validation, so that its error names the field whatever was sent.
type rawField json.RawMessage

func (q *rawField) UnmarshalJSON(b []byte) error {
	*q = append((*q)[:0], b...)
	return nil
}

// decimal reads q as an amount: a JSON string ("49.99", preferred) or a
// JSON number, for money.Parse to judge.
func (q rawField) decimal() (string, error) {
	var str string
	if err := json.Unmarshal(q, &str); err == nil {
		return str, nil
	}
	var n json.Number
	if len(q) == 0 || string(q) == "null" {
		return "", errors.New("required")
	}
	if err := json.Unmarshal(q, &n); err != nil {
		return "", errors.New(`a decimal string such as "49.99" is expected`)
	}
	return n.String(), nil
}

// int reads q as a whole number between lo and hi (a JSON number, or a
// string of one).
func (q rawField) int(lo, hi int) (int, error) {
	var n json.Number
	if len(q) == 0 || string(q) == "null" {
		return 0, errors.New("required")
	}
	err := json.Unmarshal(q, &n)
	var v int
	if err == nil {
		v, err = strconv.Atoi(n.String())
	}
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("a whole number from %d to %d is expected", lo, hi)
	}
	return v, nil
}

type checkoutIn struct {
	SKU           string   `json:"sku"`
	Qty           rawField `json:"qty"`
	Amount        rawField `json:"amount"`
	Currency      string   `json:"currency"`
	PaymentMethod string   `json:"payment_method"`
	Provider      string   `json:"provider"`
	Recipient     string   `json:"recipient"`
}

type inventoryIn struct {
	SKU   string   `json:"sku"`
	Stock rawField `json:"stock"`
}

// Bounds of the checkout's fields.
const (
	maxQty   = 1000
	maxStock = 1_000_000_000
)

var skuPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)

func checkSKU(sku string) error {
	if sku == "" {
		return errors.New("required")
	}
	if !skuPattern.MatchString(sku) {
		return errors.New("1 to 64 letters, digits and . _ : - are expected")
	}
	return nil
}

// order validates a checkout request: every error names its field, and
// nothing is recorded for a bad one.
func (s *Service) order(in checkoutIn) (Order, string, error) {
	if err := checkSKU(in.SKU); err != nil {
		return Order{}, "sku", err
	}
	qty, err := in.Qty.int(1, maxQty)
	if err != nil {
		return Order{}, "qty", err
	}
	cur, err := money.ParseCurrency(in.Currency)
	if err != nil {
		return Order{}, "currency", err
	}
	text, err := in.Amount.decimal()
	if err != nil {
		return Order{}, "amount", err
	}
	amount, err := money.Parse(text, cur)
	if err != nil {
		return Order{}, "amount", err
	}
	if err := amount.CheckCharge(); err != nil {
		return Order{}, "amount", err
	}
	switch {
	case in.PaymentMethod == "" || len(in.PaymentMethod) > 255:
		return Order{}, "payment_method", errors.New("required, at most 255 bytes")
	case in.Recipient == "" || len(in.Recipient) > 255:
		return Order{}, "recipient", errors.New("required, at most 255 bytes")
	case s.client.Provider(in.Provider) == nil:
		return Order{}, "provider", fmt.Errorf("unknown provider %q (configured: %v)", in.Provider, s.client.ProviderNames())
	}
	return Order{SKU: in.SKU, Qty: qty, Amount: amount.AmountString(), Currency: string(amount.Currency()),
		PaymentMethod: in.PaymentMethod, Provider: in.Provider, Recipient: in.Recipient}, "", nil
}

// checkKeys checks that every key the saga derives from the client's key
// is valid: the saga's own and its sub-keys (saga.Run checks them), and
// the payments' keys of the charge and the refund, which carry the scope.
func checkKeys(scope, key string) error {
	for _, k := range [][2]string{
		{"saga", key},
		{"charge", saga.SubKey(key, StepCharge)},
		{"refund", saga.CompensationKey(key, StepCharge)},
	} {
		if _, err := idempotency.ComposeKey(scope, k[0], k[1]); err != nil {
			return err
		}
	}
	return nil
}

// checkoutOut is a checkout's answer: the saga's stored result (replayed
// identically to every retry of the key) and the key.
type checkoutOut struct {
	Key        string            `json:"key"`
	Status     saga.Status       `json:"status"`
	Order      json.RawMessage   `json:"order,omitempty"`
	FailedStep string            `json:"failed_step,omitempty"`
	Reason     string            `json:"reason,omitempty"`
	Steps      []saga.StepResult `json:"steps"`
}

// pendingOut is the answer of a checkout that has not finished.
type pendingOut struct {
	Key    string      `json:"key"`
	Status saga.Status `json:"status"`
	// Step is the step (or compensation) to run again.
	Step string `json:"pending_step,omitempty"`
	// OutcomeUnknown: that step may have had its effect; it runs again
	// with the same sub-key, never blindly compensated.
	OutcomeUnknown bool `json:"outcome_unknown,omitempty"`
}

func (s *Service) checkout(w http.ResponseWriter, r *http.Request) {
	scope, key, ok := s.caller(w, r)
	if !ok {
		return
	}
	if err := checkKeys(scope, key); err != nil {
		var inv *idempotency.InvalidError
		if errors.As(err, &inv) && inv.Field == "scope" {
			badField(w, "scope", errors.New(inv.Reason))
			return
		}
		problem(w, http.StatusBadRequest, "idempotency-key-malformed", "The Idempotency-Key cannot name a checkout: "+err.Error(), 0, nil)
		return
	}
	var in checkoutIn
	if !decode(w, r, &in) {
		return
	}
	o, field, err := s.order(in)
	if err != nil {
		badField(w, field, err)
		return
	}
	res, err := s.orch.Run(r.Context(), saga.RunParams{Saga: SagaName, Scope: scope, Key: key, Input: o})
	s.answerCheckout(r.Context(), w, scope, key, res, err)
}

// answerCheckout maps a checkout saga's result or error to HTTP (see the
// package doc).
func (s *Service) answerCheckout(ctx context.Context, w http.ResponseWriter, scope, key string, res saga.Result, err error) {
	var (
		pending  *saga.PendingError
		badInput *idempotency.InvalidError
		inFlight *idempotency.InProgressError
	)
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	final := map[string]any{"status": string(res.Status), "failed_step": res.FailedStep, "reason": res.Reason, "steps": res.Steps}
	switch {
	case err == nil:
		writeJSON(w, http.StatusCreated, checkoutOut{Key: key, Status: res.Status, Order: res.Output, Steps: res.Steps})
	case errors.Is(err, saga.ErrRolledBack):
		switch res.FailedStep {
		case StepReserve:
			problem(w, http.StatusConflict, "out-of-stock", "Not enough of the items are left; nothing was charged.", 0, final)
		case StepCharge:
			code, typ := http.StatusPaymentRequired, "declined"
			if in, ierr := s.client.Intent(ctx, scope, saga.SubKey(key, StepCharge)); ierr == nil && in.Status == payments.IntentFailed {
				code, typ = http.StatusUnprocessableEntity, "invalid-request"
			}
			problem(w, code, typ, "The payment failed; the items were released.", 0, final)
		default:
			problem(w, http.StatusConflict, "order-not-confirmed", "The order could not be confirmed; the payment was refunded and the items released.", 0, final)
		}
	case errors.Is(err, saga.ErrNeedsReview):
		problem(w, http.StatusConflict, "checkout-under-review", "The checkout could not be undone automatically and is being reviewed.", 0, final)
	case errors.As(err, &pending):
		s.log.Warn("checkout: pending; a retry or the recovery job resumes it", "key", idempotency.ShortHash(key),
			"step", pending.Step, "compensating", pending.Compensating, "unknown", pending.Unknown, "err", pending.Err)
		status := saga.StatusRunning
		if pending.Compensating {
			status = saga.StatusCompensating
		}
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusAccepted, pendingOut{Key: key, Status: status, Step: pending.Step, OutcomeUnknown: pending.Unknown})
	case errors.As(err, &badInput):
		badField(w, badInput.Field, errors.New(badInput.Reason))
	case errors.Is(err, idempotency.ErrFingerprintMismatch):
		problem(w, http.StatusConflict, "idempotency-key-reused", "This Idempotency-Key was used for another checkout (sku, quantity, amount, currency, payment method, provider or recipient).", 0, nil)
	case errors.As(err, &inFlight):
		problem(w, http.StatusConflict, "request-in-progress", "A checkout with this key is still being processed; retry with the same key.", max(inFlight.RetryAfter, time.Second), nil)
	case errors.Is(err, idempotency.ErrInProgress):
		problem(w, http.StatusConflict, "request-in-progress", "A checkout with this key is still being processed; retry with the same key.", time.Second, nil)
	case errors.Is(err, idempotency.ErrExpired):
		problem(w, http.StatusUnprocessableEntity, "idempotency-key-expired", "This Idempotency-Key is past its retention; use a new key for a new checkout.", 0, nil)
	case errors.Is(err, idempotency.ErrLeaseLost), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The run stopped part-way (the client left, or another process
		// took the saga over): what was done is recorded, and a retry
		// with the key, or the recovery job, goes on from there.
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusAccepted, pendingOut{Key: key, Status: saga.StatusRunning})
	default:
		s.log.Error("checkout: unexpected error", "key", idempotency.ShortHash(key), "err", err)
		problem(w, http.StatusServiceUnavailable, "unavailable", "The checkout could not be processed now; retry with the same Idempotency-Key.", 2*time.Second, nil)
	}
}

// sagaOut is GET /checkout/{key}: the saga's stored state.
type sagaOut struct {
	Key         string      `json:"key"`
	Saga        string      `json:"saga"`
	Status      saga.Status `json:"status"`
	CurrentStep int         `json:"current_step"`
	FailedStep  string      `json:"failed_step,omitempty"`
	Reason      string      `json:"reason,omitempty"`
	Steps       []stepOut   `json:"steps"`
	CreatedAt   time.Time   `json:"created_at"`
	UpdatedAt   time.Time   `json:"updated_at"`
	FinishedAt  *time.Time  `json:"finished_at,omitempty"`
}

type stepOut struct {
	Name                 string          `json:"name"`
	Kind                 string          `json:"kind"`
	Status               saga.StepStatus `json:"status"`
	Output               json.RawMessage `json:"output,omitempty"`
	Error                string          `json:"error,omitempty"`
	Attempts             int             `json:"attempts"`
	CompensationAttempts int             `json:"compensation_attempts"`
}

func (s *Service) getCheckout(w http.ResponseWriter, r *http.Request) {
	scope := bearer(r)
	if scope == "" {
		problem(w, http.StatusUnauthorized, "unauthenticated", "Send Authorization: Bearer <user>.", 0, nil)
		return
	}
	key := r.PathValue("key")
	st, err := s.orch.State(r.Context(), scope, key)
	switch {
	case errors.Is(err, saga.ErrNotFound):
		problem(w, http.StatusNotFound, "not-found", "No such checkout for this caller.", 0, nil)
		return
	case err != nil:
		s.log.Error("checkout: read saga", "key", idempotency.ShortHash(key), "err", err)
		problem(w, http.StatusServiceUnavailable, "unavailable", "The checkout could not be read now.", 2*time.Second, nil)
		return
	}
	out := sagaOut{Key: key, Saga: st.Name, Status: st.Status, CurrentStep: st.CurrentStep, FailedStep: st.FailedStep,
		Reason: st.Reason, Steps: make([]stepOut, len(st.Steps)), CreatedAt: st.CreatedAt, UpdatedAt: st.UpdatedAt}
	if !st.FinishedAt.IsZero() {
		out.FinishedAt = &st.FinishedAt
	}
	for i, x := range st.Steps {
		out.Steps[i] = stepOut{Name: x.Name, Kind: x.Kind.String(), Status: x.Status, Output: x.Output, Error: x.Error,
			Attempts: x.Attempts, CompensationAttempts: x.CompensationAttempts}
	}
	writeJSON(w, http.StatusOK, out)
}

// inventory sets a sku's stock: an operator's endpoint, for demos and
// tests (a real service would restrict it). Setting is idempotent by
// nature: no Idempotency-Key.
func (s *Service) inventory(w http.ResponseWriter, r *http.Request) {
	if bearer(r) == "" {
		problem(w, http.StatusUnauthorized, "unauthenticated", "Send Authorization: Bearer <user>.", 0, nil)
		return
	}
	var in inventoryIn
	if !decode(w, r, &in) {
		return
	}
	if err := checkSKU(in.SKU); err != nil {
		badField(w, "sku", err)
		return
	}
	stock, err := in.Stock.int(0, maxStock)
	if err != nil {
		badField(w, "stock", err)
		return
	}
	if err := s.setStock(r.Context(), in.SKU, stock); err != nil {
		s.log.Error("checkout: set stock", "err", err)
		problem(w, http.StatusServiceUnavailable, "unavailable", "The stock could not be set now.", 2*time.Second, nil)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"sku": in.SKU, "stock": stock})
}
