package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/payonce/payonce/money"
)

// Provider is a payment provider as payments sees it: an adapter over the
// provider's API (providers/stripe, providers/adyen, providers/paypal).
// Every call
// carries references derived deterministically from the local key, the
// step and the attempt, so that a retry reaches the provider with the same
// references and the provider's own deduplication makes it a replay.
//
// Errors are classified for the caller: [DeclineError] (definite and
// permanent), [InvalidRequestError] (permanent; our bug or bad input),
// [NotSentError] (the request provably never reached the provider: safe to
// retry), [UnknownOutcomeError] (timeout, reset after write, 5xx: the
// outcome is unknown and must be resolved, never assumed failed),
// [InProgressError] (the provider is still processing the same key), and
// [KeyMismatchError] (the provider saw the same key with other parameters:
// a bug, reported loudly).
type Provider interface {
	// Name is the provider's name in payments and the ledger ("stripe").
	Name() string
	// DedupWindow is how long the provider deduplicates a key: the local
	// retention of any key reaching it must be at least this long.
	DedupWindow() time.Duration
	// Charge creates and confirms a payment.
	Charge(ctx context.Context, req ChargeRequest) (ChargeResult, error)
	// Refund refunds (part of) a charge.
	Refund(ctx context.Context, req RefundRequest) (RefundResult, error)
	// Lookup finds what the provider holds for a local key, for the
	// reconciler: the charges carrying the key in their metadata, created
	// in the window.
	Lookup(ctx context.Context, req LookupRequest) (LookupResult, error)
}

// ChargeRequest is one charge attempt.
type ChargeRequest struct {
	// Key is the local idempotency key; it travels in the metadata.
	Key string
	// ProviderKey is the provider's idempotency key for this attempt
	// (see [DeriveKey]).
	ProviderKey   string
	Amount        money.Money
	Recipient     string
	PaymentMethod string
	Description   string
	Metadata      map[string]string
	// Shopper identifies the paying customer at the provider: Adyen's
	// shopperReference (required with a stored payment method). It is
	// payments.ChargeParams.Shopper, or the charge's Scope when that is
	// empty.
	Shopper string
	// ProviderID is the provider's object for this attempt when an earlier
	// call already learnt it (a PayPal order id, an Adyen pspReference
	// recorded through Progress): the adapter resumes from it instead of
	// creating anew. Empty on a first call.
	ProviderID string
	// Progress, when set, is called by an adapter as soon as the
	// provider's object exists and before any further step (PayPal's
	// order, when its create answers; Adyen's payment under manual
	// capture, before its capture), so that the caller records it: a lost
	// later response is then resolved by a read of that object. An error from
	// Progress stops the charge before the next step (its outcome is then
	// unknown, and a retry resumes).
	Progress func(ctx context.Context, providerID string) error
}

// ChargeStatus is a charge's state at the provider.
type ChargeStatus string

const (
	ChargeSucceeded ChargeStatus = "succeeded"
	// ChargeRequiresAction: the customer must act (3-D Secure); the charge
	// completes or fails later (webhook or lookup).
	ChargeRequiresAction ChargeStatus = "requires_action"
	// ChargePending: accepted, final outcome later.
	ChargePending ChargeStatus = "pending"
	ChargeFailed  ChargeStatus = "failed"
)

// ChargeResult is what the provider answered.
type ChargeResult struct {
	// ProviderID identifies the charge at the provider ("pi_...").
	ProviderID string
	Status     ChargeStatus
	Amount     money.Money
	// Replayed is true when the provider answered from its idempotency
	// cache (the same key was seen before).
	Replayed bool
	// RequestID is the provider's id of this request, where it gives one
	// (Stripe's Request-Id, PayPal's Paypal-Debug-Id), for tracing and
	// support tickets.
	RequestID string
	// Refunded is what the provider has refunded of this charge, when a
	// lookup asked for it (LookupRequest.WithRefunds) and RefundsKnown
	// is set; the reconciler compares it with the refunds payonce
	// recorded.
	Refunded     money.Money
	RefundsKnown bool
}

// RefundRequest is one refund attempt of a charge.
type RefundRequest struct {
	Key         string
	ProviderKey string
	// ChargeID is the charge's ProviderID.
	ChargeID string
	Amount   money.Money
}

// RefundStatus is a refund's state at the provider.
type RefundStatus string

const (
	RefundSucceeded RefundStatus = "succeeded"
	RefundPending   RefundStatus = "pending"
	RefundFailed    RefundStatus = "failed"
)

// RefundResult is what the provider answered.
type RefundResult struct {
	ProviderID string
	Status     RefundStatus
	Amount     money.Money
	Replayed   bool
	// RequestID is the provider's id of this request, where it gives one.
	RequestID string
}

// LookupRequest asks what exists at the provider for a local key.
type LookupRequest struct {
	Key string
	// ProviderKey is the reference payonce sent (Adyen's reference, the
	// seed of PayPal's request ids).
	ProviderKey string
	// ProviderID is the provider's object when known (a PayPal order id).
	ProviderID string
	// WithRefunds asks for each charge's refunded total (ChargeResult.
	// Refunded), at the cost of another request where the provider needs
	// one.
	WithRefunds bool
	// From and To bound the creation time to search (the provider's clock).
	From, To time.Time
}

// LookupResult lists the charges found.
type LookupResult struct {
	Charges []ChargeResult
	// Consistent is false when the answer came from an eventually
	// consistent index (Stripe's Search, Adyen's webhooks): a recent
	// charge may be missing yet. An empty result that is not Consistent
	// is NOT proof of absence: never fail an intent or move to a new
	// attempt on it.
	Consistent bool
}

// Steps of an action whose provider references payments derives from the
// action's key ([DeriveKey]).
const (
	StepCharge = "charge"
	StepRefund = "refund"
)

// DeriveKey derives the provider's idempotency key (a request's
// ProviderKey) for one attempt of one step of a local action:
// "<key>_<step>_<attempt>", or, when that exceeds maxLen, a prefix of it
// and the hex SHA-256 of the whole, cut to maxLen. It is deterministic: a retry sends the same key; a deliberate new
// attempt (after the previous one is proven void) uses attempt+1.
func DeriveKey(key, step string, attempt, maxLen int) string {
	full := key + "_" + step + "_" + strconv.Itoa(attempt)
	if len(full) <= maxLen {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	h := hex.EncodeToString(sum[:])
	if maxLen <= len(h)+1 {
		return h[:maxLen]
	}
	return full[:maxLen-len(h)-1] + "_" + h
}
