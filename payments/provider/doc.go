// Package provider is the SPI of payonce's payments: what a payment
// provider's adapter implements (providers/stripe, providers/adyen and
// providers/paypal do), and what package payments calls. It is to payments
// what riverdriver is to River: the customer API stays in package payments
// (Client, Operator, ChargeParams, Outcome), and an adapter imports only
// this package and money, never the client, its database or its ledger.
//
//	type Adapter struct{ /* its HTTP client, base URL, credentials */ }
//
//	var _ provider.Provider = (*Adapter)(nil)
//
//	func (a *Adapter) Charge(ctx context.Context, req provider.ChargeRequest) (provider.ChargeResult, error) {
//		// Send req.ProviderKey as the provider's idempotency key, and
//		// classify every failure: a timeout after the request was
//		// written is &provider.UnknownOutcomeError{...}, never a failure.
//	}
//
// # The contract
//
// [Provider] is the one interface every adapter implements: Name,
// DedupWindow (how long the provider deduplicates an idempotency key),
// Charge, Refund and Lookup. Every request carries references payments
// derives deterministically from the action's key, its step
// ([StepCharge], [StepRefund]) and its attempt ([DeriveKey]): a retry
// reaches the provider with the same references, so the provider's own
// deduplication makes it a replay. An adapter sends them as they are and
// derives any further reference of its own with [DeriveKey] too (Adyen's
// capture and cancel references).
//
// # Outcome classes
//
// Every error an adapter returns is one of these, so that payments knows
// what the answer proves:
//
//   - [DeclineError] ([ErrDeclined]): a definite, permanent refusal of the
//     payment, replayed to every retry of the key;
//   - [InvalidRequestError] ([ErrInvalidRequest]): the request itself was
//     refused (bad input, or a bug); Replayed when the provider marked the
//     answer as its replay of the first one;
//   - [NotSentError] ([ErrNotSent]): the request provably never reached
//     the provider;
//   - [UnknownOutcomeError] ([ErrOutcomeUnknown]): it may have reached it
//     (timeout, reset after write, 5xx); never assumed failed;
//   - [InProgressError] ([ErrInProgress]): the provider is still executing
//     a request with the same idempotency key;
//   - [KeyMismatchError] ([ErrKeyMismatch]): the provider saw the key with
//     other parameters (a bug, reported loudly);
//   - [CredentialsError] ([ErrCredentials]): the provider refused the
//     adapter's credentials; a configuration error, never an outcome.
//
// Each error and sentinel answers [idempotency.SafeToRetry] for itself
// (a method SafeToRetry() bool): true for NotSent, UnknownOutcome and
// InProgress, false for the others. A lookup that
// can no longer tell what an attempt did wraps [ErrCannotTell].
//
// # Optional capabilities
//
// payments asks for each with a type assertion:
//
//   - [StepWindower]: a deduplication window per step ([DedupWindowOf]);
//   - [ReferenceLimiter]: references shorter than 255 bytes
//     ([MaxReferenceLen]);
//   - [Validator], [RefundValidator]: refuse up front, before anything is
//     recorded, what the provider would refuse;
//   - [Voider]: make an attempt whose outcome is unknown provably void;
//   - [RefundLooker]: tell what exists for a refund attempt;
//   - [ClockReader]: read the provider's clock, for lookups over narrow
//     windows;
//   - [Totaler]: the money moved over a period ([Totals], [AddMovement]),
//     for the reconciler's balance check;
//   - [WebhookVerifier], [WebhookAcknowledger]: authenticate notifications
//     and turn them into [WebhookEvent] values of an [EventKind].
//
// # Testing an adapter
//
// Package providers/providertest is the conformance suite every adapter
// passes against its provider's stateful fake.
package provider
