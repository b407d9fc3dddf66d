package provider

import (
	"fmt"
	"strings"

	"github.com/payonce/payonce/idempotency"
)

// Sentinels of the outcome classes; the error types below carry data and
// match them with errors.Is. Their texts start "payments:" since they
// reach payments' callers as they are. Each answers
// [idempotency.SafeToRetry] for itself, as its error type does.
var (
	ErrDeclined       = sentinel("payments: declined", false)
	ErrInvalidRequest = sentinel("payments: invalid request", false)
	ErrNotSent        = sentinel("payments: request not sent", true)
	ErrOutcomeUnknown = sentinel("payments: outcome unknown", true)
	ErrInProgress     = sentinel("payments: provider still processing this key", true)
	ErrKeyMismatch    = sentinel("payments: provider saw this key with other parameters", false)
	// ErrCredentials: the provider refused payonce's credentials for it
	// (a wrong, rolled, revoked or restricted API key). A configuration
	// error, never an outcome: see [CredentialsError].
	ErrCredentials = sentinel("payments: the provider refused our credentials", false)
)

// DeclineError is a definite, permanent refusal by the provider (or the
// card's issuer). It is replayed to every retry of the key.
type DeclineError struct {
	Provider string
	// Code is the provider's error code ("card_declined"), DeclineCode
	// the issuer's reason ("insufficient_funds").
	Code, DeclineCode string
	Message           string
}

func (e *DeclineError) Error() string {
	return fmt.Sprintf("payments: %s declined: %s (%s)", e.Provider, e.DeclineCode, e.Code)
}

// Is reports ErrDeclined.
func (e *DeclineError) Is(target error) bool { return target == ErrDeclined }

// SafeToRetry reports false: a decline is final for the key.
func (e *DeclineError) SafeToRetry() bool { return false }

// InvalidRequestError is a permanent refusal of the request itself.
//
// On a first attempt it is final for the key: nothing was sent before.
// On a resumed attempt (a retry re-sending the references of an attempt
// whose outcome is unknown) it is final only when Replayed: otherwise it
// speaks of this send alone, an earlier send may have charged, and the
// caller gets a payments.RefusedRetryError while the intent stays open.
type InvalidRequestError struct {
	Provider, Code, Param, Message string
	// Replayed is true when the provider marked the answer as its replay
	// of the first answer it gave to these references (Stripe's
	// Idempotent-Replayed: true): the attempt itself was refused, a proof
	// about it. Adyen and PayPal mark no replayed error, so theirs stay
	// false. Not stored with the key's answer.
	Replayed bool `json:"-"`
}

func (e *InvalidRequestError) Error() string {
	return fmt.Sprintf("payments: %s refused the request: %s %s: %s", e.Provider, e.Code, e.Param, e.Message)
}

// Is reports ErrInvalidRequest, and ErrRefundExceedsCharge for Code
// "refund_exceeds_charge".
func (e *InvalidRequestError) Is(target error) bool {
	return target == ErrInvalidRequest || (target == ErrRefundExceedsCharge && e.Code == "refund_exceeds_charge")
}

// SafeToRetry reports false: the refusal is final for the key (a
// resumed attempt's unreplayed refusal reaches the caller as a
// payments.RefusedRetryError, which answers for itself).
func (e *InvalidRequestError) SafeToRetry() bool { return false }

// NotSentError: the request provably never reached the provider (no
// connection, refused before writing).
type NotSentError struct {
	Provider string
	Err      error
}

func (e *NotSentError) Error() string {
	return fmt.Sprintf("payments: request to %s not sent: %v", e.Provider, e.Err)
}

// Is reports ErrNotSent.
func (e *NotSentError) Is(target error) bool { return target == ErrNotSent }

// SafeToRetry reports true: the provider never saw the request.
func (e *NotSentError) SafeToRetry() bool { return true }

// Unwrap returns the cause.
func (e *NotSentError) Unwrap() error { return e.Err }

// UnknownOutcomeError: the request may have reached the provider and the
// answer was lost (timeout, reset after write, 5xx). Never treat it as a
// failure without proof: a retry with the same provider key or the
// reconciler resolves it.
type UnknownOutcomeError struct {
	Provider string
	// Status is the HTTP status when one was received (5xx), else 0.
	Status int
	Err    error
}

func (e *UnknownOutcomeError) Error() string {
	return fmt.Sprintf("payments: outcome at %s unknown (status %d): %v", e.Provider, e.Status, e.Err)
}

// Is reports ErrOutcomeUnknown.
func (e *UnknownOutcomeError) Is(target error) bool { return target == ErrOutcomeUnknown }

// SafeToRetry reports true: a retry with the same key re-sends the same
// provider references (deduplicated), or looks the attempt up.
func (e *UnknownOutcomeError) SafeToRetry() bool { return true }

// Unwrap returns the cause.
func (e *UnknownOutcomeError) Unwrap() error { return e.Err }

// InProgressError: the provider is still executing a request with the same
// idempotency key (Stripe 409 idempotency_key_in_use). Retry later with the
// same key.
type InProgressError struct{ Provider string }

func (e *InProgressError) Error() string {
	return fmt.Sprintf("payments: %s is still processing a request with this key", e.Provider)
}

// Is reports ErrInProgress.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// SafeToRetry reports true: retry later with the same key.
func (e *InProgressError) SafeToRetry() bool { return true }

// KeyMismatchError: the provider saw the same idempotency key with other
// parameters. payments binds every field it sends to the key's
// fingerprint, so that a retry with other fields is refused before
// anything is sent; seeing this means a bug, two systems sharing keys, or
// a record made before the fingerprint covered the charge's description,
// metadata and shopper, and must be reported loudly.
//
// Message is the provider's or the adapter's explanation; it may quote
// keys and references, so Error never prints what Message quotes: each
// quoted text is replaced by its [idempotency.ShortHash].
type KeyMismatchError struct {
	Provider, Message string
}

func (e *KeyMismatchError) Error() string {
	return fmt.Sprintf("payments: BUG: %s saw this idempotency key with other parameters: %s", e.Provider, redactQuoted(e.Message))
}

// redactQuoted replaces every text between single or double quotes in s
// (a key, a reference, a custom_id, as providers and adapters quote them)
// by the ShortHash of the text: no error text holds a full key. An
// unclosed quote hides the rest of s.
func redactQuoted(s string) string {
	var b strings.Builder
	for {
		i := strings.IndexAny(s, `"'`)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		q := s[i]
		b.WriteString(s[:i+1])
		rest := s[i+1:]
		j := strings.IndexByte(rest, q)
		if j < 0 {
			b.WriteString("…")
			return b.String()
		}
		if j > 0 {
			b.WriteString("#" + idempotency.ShortHash(rest[:j]))
		}
		b.WriteByte(q)
		s = rest[j+1:]
	}
}

// Is reports ErrKeyMismatch.
func (e *KeyMismatchError) Is(target error) bool { return target == ErrKeyMismatch }

// SafeToRetry reports false: the provider refuses the key with these
// parameters every time.
func (e *KeyMismatchError) SafeToRetry() bool { return false }

// CredentialsError: the provider refused the request for payonce's
// credentials (HTTP 401 or 403: an API key that is wrong, rolled,
// revoked, or without the permission the call needs; Adyen's merchant
// account the key may not use). It is a configuration error and proves
// nothing about the payment: the provider refuses such a request before
// looking at it, so a first attempt moved no money, and a resumed attempt
// learns nothing of what its earlier sends did. The intent stays open and
// the key is not spent: once the credentials are fixed, a retry with the
// same key goes through (resuming the same attempt), and meanwhile the
// reconciler reports the provider unavailable. Retrying before the fix
// cannot succeed, so SafeToRetry is false: fix the key, then retry.
type CredentialsError struct {
	Provider string
	// Status is the provider's HTTP status (401, 403); Code its error code
	// (Adyen's "000" or "010", PayPal's AUTHENTICATION_FAILURE or
	// NOT_AUTHORIZED, OAuth's invalid_client), when it gave one.
	Status int
	Code   string
	// Setting names the adapter's configuration to check
	// ("Config.SecretKey").
	Setting string
	Message string
}

func (e *CredentialsError) Error() string {
	setting := ""
	if e.Setting != "" {
		setting = " (" + e.Setting + ")"
	}
	return fmt.Sprintf("payments: %s refused our credentials: check the API key%s and its permissions (HTTP %d %s: %s); "+
		"the payment stays open, and a retry with the same key resumes it once the key is fixed",
		e.Provider, setting, e.Status, e.Code, e.Message)
}

// Is reports ErrCredentials.
func (e *CredentialsError) Is(target error) bool { return target == ErrCredentials }

// SafeToRetry reports false: the same credentials get the same refusal.
// Nothing is spent either: a retry with the same key after the fix is
// safe.
func (e *CredentialsError) SafeToRetry() bool { return false }

// ErrRefundExceedsCharge: the refunds of a charge would exceed what it
// captured. payments refuses such a refund itself, before any provider
// call, with an *InvalidRequestError of Code "refund_exceeds_charge",
// which matches it; final for the refund's key.
var ErrRefundExceedsCharge = sentinel("payments: refunds would exceed the charge", false)

// sentinelError is a sentinel error that answers [idempotency.SafeToRetry] for
// itself.
type sentinelError struct {
	text string
	safe bool
}

func sentinel(text string, safeToRetry bool) error {
	return &sentinelError{text: text, safe: safeToRetry}
}

func (s *sentinelError) Error() string { return s.text }

// SafeToRetry reports what the sentinel stands for.
func (s *sentinelError) SafeToRetry() bool { return s.safe }
