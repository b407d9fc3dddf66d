// Package payments is payonce's payments API: [Client.Charge] charges
// exactly once per key, whatever the retries, crashes and lost responses.
//
// # The flow of a charge
//
//  1. Claim the key (pgstore), fingerprinting amount, currency, recipient,
//     payment method and provider: a retry with other fields is refused.
//  2. Record the intent in payment_intents, with the provider key derived
//     from the local key ([ProviderKey]), BEFORE calling the provider.
//  3. Call the provider with that key: a retry reaches it with the same
//     key, so the provider's deduplication makes it a replay.
//  4. One transaction: the intent's outcome, the ledger postings (money
//     moved) and the idempotency record (COMPLETED, or FAILED for a
//     decline), under the key's fencing token.
//
// An unknown outcome (timeout, reset after the provider committed, 5xx)
// leaves the intent open (UNKNOWN) and releases the key: the caller gets an
// [UnknownOutcomeError] ([OutcomeUnknown], [SafeToRetry]), and a retry with
// the same key re-drives with the same provider key. Unknown never becomes
// failed without proof from the provider.
//
// # Providers and outcome classes
//
// A [Provider] adapter (providers/stripe) classifies every error:
// [DeclineError] (final, replayed to retries), [InvalidRequestError]
// (final), [NotSentError] and [InProgressError] (safe to retry),
// [UnknownOutcomeError], and [KeyMismatchError] (a bug, reported loudly).
//
// # Refunds
//
// [Client.Refund] has its own key and the same flow; its amount is
// reserved on the charge (payment_intents.refund_reserved, CHECK <= amount)
// in the transaction that records the refund intent, before the provider
// is called, so concurrent refunds can never exceed the charge. A refused
// or failed refund releases its reservation; an unknown one keeps it.
//
// # Metrics
//
// With Config.MeterProvider: payments.charges and payments.refunds (by
// provider and outcome), payments.unknown_outcomes, and
// payments.provider_call_duration_ms; replays reach no provider and count
// nothing there (the idempotency core counts them).
//
// Not built yet: the checkout example, the storm
// demo, the crash fault matrix, stripe-mock request-shape conformance and
// the reconciler (the intents' open states and an index on them are in
// place for it).
package payments
