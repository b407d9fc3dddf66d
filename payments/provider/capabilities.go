package provider

import (
	"context"
	"time"

	"github.com/payonce/payonce/money"
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

// ReferenceLimiter is implemented by providers whose business reference
// (the ProviderKey payonce sends) must be shorter than 255 bytes: Adyen's
// reference is at most 80 characters. payments derives ProviderKey with
// [DeriveKey] under that limit.
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

// RecipientRequirer is implemented by providers that send
// ChargeRequest.Recipient (a connected account, a split's destination):
// for them payments refuses a charge without one before anything is
// recorded (a *payments.ConfigError naming Recipient and the provider).
// For every other provider Recipient is optional. None of this module's
// adapters sends it: Stripe charges land on the account of the secret
// key (no Connect destination), Adyen's payments carry no split, PayPal's
// orders no payee.
type RecipientRequirer interface {
	RequiresRecipient() bool
}

// RequiresRecipient reports whether p sends ChargeRequest.Recipient (see
// [RecipientRequirer]).
func RequiresRecipient(p Provider) bool {
	r, ok := p.(RecipientRequirer)
	return ok && r.RequiresRecipient()
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

// ErrCannotTell is wrapped by a Lookup or LookupRefund that cannot say what
// an attempt did any more: the provider's window for replaying its
// references has passed and it offers no other consistent lookup by them.
// It is not an outage (looking again will not help): the reconciler flags
// the intent NEEDS_REVIEW with the reason instead of rescheduling it.
var ErrCannotTell = sentinel("payments: the provider can no longer tell what this attempt did", false)

// ClockReader is implemented by a provider whose Lookup lists what was
// created in [LookupRequest.From, LookupRequest.To] on the provider's own
// clock, page by page (Stripe's List API: a narrower window is fewer
// pages, and a window with fewer objects than the adapter scans is
// consistent), and that can read that clock. payments
// (Client.LookupAttempt) looks such a provider up over each send's own
// window, with a margin measured rather than assumed.
type ClockReader interface {
	// ReadClock returns the provider's clock now and how far from it the
	// answer may be (the clock's resolution and the round trip of the
	// answer it was read from). It may send a request to the provider.
	ReadClock(ctx context.Context) (now time.Time, within time.Duration, err error)
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

// IDChecker is implemented by providers whose objects' ids have a
// documented shape: payments calls CheckID on an id an operator gives as
// proof (payments.Operator.ResolveReview) before anything changes, so that
// a typo or another provider's id is refused, not recorded. step is
// StepCharge or StepRefund: the kind of intent the id settles. It sends
// nothing and returns an *InvalidRequestError naming the field.
type IDChecker interface {
	CheckID(step, id string) error
}
