package payments

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	"github.com/payonce/payonce/money"
)

// Provider is a payment provider as payments sees it: an adapter over the
// provider's API (providers/stripe, later Adyen and PayPal). Every call
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
	// (see [ProviderKey]).
	ProviderKey   string
	Amount        money.Money
	Recipient     string
	PaymentMethod string
	Description   string
	Metadata      map[string]string
	// Shopper identifies the paying customer at the provider: Adyen's
	// shopperReference (required with a stored payment method). It is
	// [ChargeParams.Shopper], or the charge's Scope when that is empty.
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

// Steps of an action whose provider references payments derives from the
// action's key ([ProviderKey]).
const (
	StepCharge = "charge"
	StepRefund = "refund"
)

// StepWindower is implemented by providers whose deduplication window
// differs by step: PayPal keeps the request ids of an order (create and
// capture) 6 hours, those of a refund of a capture 45 days. DedupWindow
// stays the longest of them (it bounds the local retention); payments
// uses the step's own window to decide whether a retry may still re-send
// a step's references ([DedupWindowOf]).
type StepWindower interface {
	// StepDedupWindow is the window of step (StepCharge, StepRefund); zero
	// means DedupWindow.
	StepDedupWindow(step string) time.Duration
}

// DedupWindowOf is how long p deduplicates the references of step: its
// [StepWindower] window, else its DedupWindow.
func DedupWindowOf(p Provider, step string) time.Duration {
	if w, ok := p.(StepWindower); ok {
		if d := w.StepDedupWindow(step); d > 0 {
			return d
		}
	}
	return p.DedupWindow()
}

// ErrCannotTell is wrapped by a Lookup or LookupRefund that cannot say what
// an attempt did any more: the provider's window for replaying its
// references has passed and it offers no other consistent lookup by them.
// It is not an outage (looking again will not help): the reconciler flags
// the intent NEEDS_REVIEW with the reason instead of rescheduling it.
var ErrCannotTell = errors.New("payments: the provider can no longer tell what this attempt did")

// ReferenceLimiter is implemented by providers whose business reference
// (the ProviderKey payonce sends) must be shorter than 255 bytes: Adyen's
// reference is at most 80 characters. payments derives ProviderKey with
// [ProviderKey] under that limit.
type ReferenceLimiter interface {
	MaxReferenceLen() int
}

// MaxReferenceLen is the length limit payments derives provider keys
// under for p: its [ReferenceLimiter] limit, at most 255.
func MaxReferenceLen(p Provider) int {
	if l, ok := p.(ReferenceLimiter); ok && l.MaxReferenceLen() > 0 && l.MaxReferenceLen() < 255 {
		return l.MaxReferenceLen()
	}
	return 255
}

// Validator is implemented by providers with input limits of their own
// (metadata sizes, reference lengths): payments calls ValidateCharge
// before anything is recorded, so that a request the provider would refuse
// is refused up front and leaves no intent behind. It returns an
// *InvalidRequestError naming the field.
type Validator interface {
	ValidateCharge(req ChargeRequest) error
}

// RefundValidator is implemented by providers with limits on a refund's
// request (an amount in a currency they cannot represent): payments calls
// ValidateRefund before the refund is recorded or its amount reserved, so
// a refund the provider would refuse leaves nothing behind. It returns an
// *InvalidRequestError naming the field.
type RefundValidator interface {
	ValidateRefund(req RefundRequest) error
}

// Voider is implemented by providers that can make an attempt whose
// outcome is unknown provably void by its reference (Adyen's technical
// cancel): whatever the provider did or will do with that reference is
// cancelled. The outcome arrives later by webhook (Adyen:
// TECHNICAL_CANCEL), which settles the intent.
type Voider interface {
	Void(ctx context.Context, req VoidRequest) error
}

// VoidRequest names the attempt to void.
type VoidRequest struct {
	// Key is payonce's key of the action; ProviderKey the attempt's
	// reference.
	Key, ProviderKey string
	// ProviderID is the provider's object of the attempt when payonce
	// knows it (a pspReference from a Received answer). An adapter then
	// voids that object whatever its state (Adyen: POST
	// /payments/{pspReference}/reversals, cancel or refund), instead of by
	// reference (Adyen's technical cancel, which cannot undo a captured
	// payment).
	ProviderID string
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

// ProviderKey derives the provider's idempotency key for one attempt of
// one step of a local action: "<key>_<step>_<attempt>", or, when that
// exceeds maxLen, a prefix of it and the hex SHA-256 of the whole, cut to
// maxLen. It is deterministic: a retry sends the same key; a deliberate new
// attempt (after the previous one is proven void) uses attempt+1.
func ProviderKey(key, step string, attempt, maxLen int) string {
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

// Totaler is implemented by providers that report the money they moved
// over a period (Stripe's balance transactions): the reconciler compares it
// with the ledger per currency (balance-level drift).
type Totaler interface {
	// Totals sums, per currency, the charges and refunds the provider
	// recorded in [from, to). Charged is positive; Refunded is signed: a
	// refund that fails in the period gives money back and reduces it. The
	// currency is the one the provider settled in (a converted charge
	// lands in the account's settlement currency).
	Totals(ctx context.Context, from, to time.Time) (map[money.Currency]Totals, error)
}

// Totals is the money a provider moved in one currency over a period.
type Totals struct {
	Charged, Refunded money.Money
}

// RefundLooker is implemented by providers that can tell what exists for
// a refund attempt: the reconciler resolves refund intents whose outcome
// was lost with it.
type RefundLooker interface {
	LookupRefund(ctx context.Context, req RefundLookupRequest) (RefundLookupResult, error)
}

// RefundLookupRequest names a refund attempt.
type RefundLookupRequest struct {
	// Key is payonce's key of the refund; ProviderKey the reference (and
	// idempotency key) it was sent with; ProviderID the refund's id when
	// known.
	Key, ProviderKey, ProviderID string
	// ChargeID is the provider's id of the refunded charge.
	ChargeID string
}

// RefundLookupResult lists the refunds found for the attempt.
type RefundLookupResult struct {
	Refunds []RefundResult
	// Consistent is false when absence is not proof (an eventually
	// consistent source, such as notifications that may still come).
	Consistent bool
}

// AddMovement adds one balance movement of a provider to totals, as the
// providers' reports sign them: a charge (positive) to Charged, a refund
// (negative: money given back) or a refund failure (positive: money
// returned) to Refunded, negated.
func AddMovement(totals map[money.Currency]Totals, amount money.Money, charge bool) error {
	cur := amount.Currency()
	t, ok := totals[cur]
	if !ok {
		zero, err := money.FromMinor(0, cur)
		if err != nil {
			return err
		}
		t = Totals{Charged: zero, Refunded: zero}
	}
	var err error
	if charge {
		t.Charged, err = t.Charged.Add(amount)
	} else {
		t.Refunded, err = t.Refunded.Sub(amount)
	}
	if err != nil {
		return err
	}
	totals[cur] = t
	return nil
}
