// Package payments is payonce's payments API. So far it defines the
// [Provider] interface that the provider adapters implement, the outcome
// classes of a provider call ([DeclineError], [InvalidRequestError],
// [NotSentError], [UnknownOutcomeError], [InProgressError],
// [KeyMismatchError], with the predicates [OutcomeUnknown] and
// [SafeToRetry]) and the derivation of provider idempotency keys
// ([ProviderKey]). The Client (Charge, Refund) that records an intent
// before every provider call is the next step.
package payments
