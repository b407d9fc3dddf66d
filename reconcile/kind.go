package reconcile

// Kind is what diverged: the kind of a report item. Its values are stored
// in reconcile_items and label the divergences metric (kind): dashboards,
// alert rules and the runbook match them, so they never change.
type Kind string

// Divergence kinds.
const (
	// KindPendingSucceededAtProvider: an open intent the provider reports
	// succeeded; completed locally.
	KindPendingSucceededAtProvider Kind = "pending locally, succeeded at provider"
	// KindPendingFailedAtProvider: an open intent the provider reports
	// failed; failed with that proof.
	KindPendingFailedAtProvider Kind = "pending locally, failed at provider"
	// KindPendingMissingAtProvider: an open intent a consistent lookup
	// found nothing for; failed with that proof, or reopened
	// (Config.Redrive), or, reopened already, waiting for its retry.
	KindPendingMissingAtProvider Kind = "pending locally, missing at provider"
	// KindPendingUnknownAtProvider: an open intent without a conclusive
	// answer (still open at the provider, waiting for the customer, not
	// found by an eventually consistent lookup, a void under way, its
	// provider not configured).
	KindPendingUnknownAtProvider Kind = "pending locally, unknown at provider"
	// KindAmountDiffers: the provider's amount is not the intent's.
	KindAmountDiffers Kind = "amount differs"
	// KindSucceededMissingAtProvider: a charge succeeded locally that a
	// consistent lookup does not find.
	KindSucceededMissingAtProvider Kind = "succeeded locally, missing at provider"
	// KindSucceededFailedAtProvider: a charge succeeded locally that the
	// provider reports failed.
	KindSucceededFailedAtProvider Kind = "succeeded locally, failed at provider"
	// KindRefundTotalsDiffer: the provider refunded another total of a
	// charge than the refunds payonce recorded.
	KindRefundTotalsDiffer Kind = "refund totals differ"
	// KindBalanceDrift: the money a provider moved over a period is not
	// the ledger's for the intents created then.
	KindBalanceDrift Kind = "balance drift"
	// KindDuplicateAtProvider: several charges (or refunds) at the
	// provider for one attempt or one intent, found by a lookup or
	// announced by a webhook event.
	KindDuplicateAtProvider Kind = "several charges at provider"
	// KindRefundOutcomeMissing: a refund still open without a conclusive
	// answer.
	KindRefundOutcomeMissing Kind = "refund outcome never arrived"
	// KindProviderUnavailable: the provider could not be asked.
	KindProviderUnavailable Kind = "provider unavailable"
	// KindStuckRecord: an idempotency record PROCESSING long after its
	// lease ended.
	KindStuckRecord Kind = "stuck record"
	// KindUnmatchedProviderObject: a webhook event that named no local
	// intent.
	KindUnmatchedProviderObject Kind = "provider object without local intent"
	// KindWebhookConflict: a webhook event that contradicted a final local
	// state.
	KindWebhookConflict Kind = "provider contradicts a final local state"
	// KindPastProviderWindow: an open intent whose references are past the
	// provider's deduplication window, and the provider can no longer say
	// what the attempt did (no lookup by payonce's references then).
	KindPastProviderWindow Kind = "past provider's deduplication window"
	// KindVoidRefused: a void of an attempt whose outcome was lost did not
	// cancel anything (Adyen TECHNICAL_CANCEL or CANCEL_OR_REFUND
	// success=false): the payment may exist, captured.
	KindVoidRefused Kind = "void refused at provider"
	// KindSucceededAfterDecline: a charge recorded DECLINED whose own
	// provider object succeeded afterwards (a Stripe PaymentIntent
	// confirmed again after its decline), announced by a webhook event:
	// booked (ActionCompleted: intent SUCCEEDED, its ledger entry, the
	// key's record answering the success), or NEEDS_REVIEW when the
	// intent named no object that the success could be matched to.
	KindSucceededAfterDecline Kind = "declined locally, succeeded at provider"
	// KindRefundFailedAfterSuccess: a refund recorded SUCCEEDED that the
	// provider failed afterwards (Stripe's failed refunds, Adyen's
	// REFUND_FAILED), announced by a webhook event: reversed
	// (ActionReversed).
	KindRefundFailedAfterSuccess Kind = "refund succeeded locally, failed at provider"
)

// Action is what the reconciler did about a report item. Its values are
// stored in reconcile_items and never change.
type Action string

// Actions recorded in the report.
const (
	// ActionCompleted: the intent took the provider's state: SUCCEEDED
	// (with its ledger postings) or REQUIRES_ACTION.
	ActionCompleted Action = "completed locally"
	// ActionFailedWithProof: the intent failed on the provider's proof
	// that nothing moved (the provider reports the attempt failed, or a
	// consistent lookup found nothing).
	ActionFailedWithProof Action = "failed with proof"
	// ActionNewAttempt: the intent was reopened under the next attempt
	// number (Config.Redrive).
	ActionNewAttempt Action = "reopened for a new attempt"
	// ActionNeedsReview: the intent was flagged NEEDS_REVIEW.
	ActionNeedsReview Action = "needs review"
	// ActionRescheduled: the intent is looked at again later.
	ActionRescheduled Action = "rescheduled"
	// ActionVoidSent: a void of the attempt was requested; its
	// notification settles the intent.
	ActionVoidSent Action = "void requested"
	// ActionReported: reported only (a final intent, a record, an event,
	// a balance): a human decides.
	ActionReported Action = "reported"
	// ActionReversed: a refund the provider failed after its success was
	// reversed: a reversal ledger entry, its reservation on the charge
	// released, the intent FAILED, the key's record answering the
	// failure.
	ActionReversed Action = "reversed locally"
)
