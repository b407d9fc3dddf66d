// Package payments is payonce's payments API: [Client.Charge] and
// [Client.Refund] move money exactly once per key, whatever the retries,
// crashes, lost responses and webhook storms.
//
//	client, err := payments.New(pool, []provider.Provider{stripe}, nil)
//	out, err := client.Charge(ctx, payments.ChargeParams{Scope: customer, Key: idempotencyKey,
//		Provider: "stripe", Amount: money.MustParse("49.99", money.EUR),
//		PaymentMethod: "pm_card_visa"})
//	if payments.OutcomeUnknown(err) { /* retry with the SAME key */ }
//
// Each field of [ChargeParams] says which providers use it; Recipient is
// required only by a provider that routes charges to one
// ([provider.RecipientRequirer]), none of this module's adapters.
//
// # Keys at the provider
//
// A charge is recorded and sent under the composed key [ChargeKey]
// returns, "<scope>_charge_<key>" (cust_1_charge_order-3 for Scope cust_1
// and Key order-3), not under the client's key alone: Stripe's and
// Adyen's metadata payonce_key hold it, every provider reference derives
// from it, and the reconciler's reports name it. Search a provider's
// dashboard for ChargeKey(scope, key) ([RefundKey] for a refund).
//
// # The flow of a charge
//
//  1. Claim the key ([idempotency.Executor.DoRecording] on pgstore),
//     fingerprinting every field sent to the provider (amount, currency,
//     recipient, payment method, provider, description, metadata and
//     shopper): a retry with other fields is refused before anything is
//     sent, a key another scope used is refused ([idempotency.ErrForeignKey]).
//  2. Record the intent in payment_intents, with the provider key derived
//     from the local key ([provider.DeriveKey]), BEFORE calling the provider.
//  3. Call the provider with that key: a retry reaches it with the same
//     key, so the provider's deduplication makes it a replay. Past the
//     provider's deduplication window ([provider.DedupWindowOf], less
//     Config.WindowMargin) the key is never re-sent: the attempt is looked
//     up ([LookupBeyondWindow]) and settled from what that proves, or
//     flagged NEEDS_REVIEW with the reason.
//  4. Decide what the answer proves (a pure function: succeeded, pending,
//     requires action, failed at the provider, declined, refused; or
//     nothing, when the outcome is unknown), then commit that transition in
//     one transaction: the intent's outcome, the ledger postings where
//     money moved, the caller's [TxFunc] rows, and the idempotency record
//     (COMPLETED, or FAILED for a decline) under the key's fencing token.
//
// An unknown outcome (timeout, reset after the provider committed, 5xx)
// leaves the intent open (UNKNOWN) and releases the key: the caller gets a
// [provider.UnknownOutcomeError] ([OutcomeUnknown], [idempotency.SafeToRetry]), and a
// retry with the same key re-drives with the same provider key. Unknown
// never becomes failed without proof from the provider. docs/design.md
// draws the flow.
//
// # Providers and outcome classes
//
// The adapters (providers/stripe, providers/adyen, providers/paypal)
// implement package [provider], the SPI: [provider.Provider] and its
// optional capabilities, the requests and results, and the outcome errors.
// A caller registers adapters with [New] as []provider.Provider, and
// imports package provider to tell its errors apart. An adapter converts
// amounts to its provider's own units, refuses what the provider cannot
// take before anything is recorded ([provider.Validator],
// [provider.RefundValidator]), and classifies every error:
// [provider.DeclineError] (final, replayed to retries),
// [provider.InvalidRequestError] (final on a first attempt; on a retry of
// an attempt whose outcome is unknown only when the provider replayed it,
// else a [RefusedRetryError] and the intent stays open),
// [provider.CredentialsError] (the provider refused payonce's API key:
// never final, the intent stays open until the key is fixed),
// [provider.NotSentError] and [provider.InProgressError] (safe to retry),
// [provider.UnknownOutcomeError], and [provider.KeyMismatchError] (a bug,
// reported loudly). Each error says whether a retry is safe ([Retrier],
// [idempotency.SafeToRetry]); bad input answers errors.Is idempotency.ErrInvalid.
//
// # Refunds
//
// [Client.Refund] has its own key and the same flow; its amount is
// reserved on the charge (payment_intents.refund_reserved, CHECK <= amount)
// in the transaction that records the refund intent, before the provider
// is called, so concurrent refunds can never exceed the charge. A refused
// or failed refund releases its reservation; an unknown one keeps it.
//
// # Webhooks, the reconciler and operators
//
// [Client.WebhookHandler] verifies provider notifications, stores each once
// in the inbox ([WebhookInbox]) and applies it to its intent in the same
// transaction, never moving a final intent backwards. Where the provider
// overturns a final state on the intent's own object, the receiver books
// what is true now in that transaction: a charge declined then succeeded
// (a Stripe PaymentIntent confirmed again) is posted, and its key's
// record answers the success ([EventSucceededAfterDecline]); a refund
// succeeded then failed is reversed, its amount refundable again under a
// new key, and its key's record answers the failure
// ([EventRefundFailedAfterSuccess]); the reconciler reports both. The
// reconciler (package reconcile) and operators settle intents through
// [Client.Operator]: [Operator.Resolve] applies a provider's proof,
// [Operator.ResolveReview] a human's decision on an intent under review.
//
// # Metrics
//
// With Config.MeterProvider: payments.charges and payments.refunds (by
// provider and outcome), payments.unknown_outcomes (by provider and
// operation), payments.provider_call_duration_ms (a histogram, by
// provider and operation), payments.webhook_events (by provider and
// outcome) and payments.webhook_refusals (by provider and reason);
// replays reach no provider and count nothing there (the idempotency core
// counts them). The names are stable: dashboards and alerts may use them.
//
// # Tracing
//
// With Config.TracerProvider: payments.charge and payments.refund, a span
// per call (with
// idempotency's key and scope hashes, payments.provider, and at its end
// payments.intent_status, payments.replayed and payments.provider_id), a
// client span per provider call, "payments.provider.<step>" (with
// payments.provider, payments.step, payments.provider_key_hash, and as
// the answer says payments.provider_id, payments.provider_request_id,
// payments.provider_status and payments.provider_replayed), and for a
// webhook delivery "payments.webhook.apply" (payments.provider,
// payments.webhook_events) with a "payments.webhook.event" per event
// (payments.webhook_event_type, payments.provider_id,
// payments.webhook_event_outcome). Provider keys appear only as short
// hashes; provider object ids ("pi_...") and request ids are the
// provider's own references and appear as they are. The reconciler's
// provider calls have spans of the same names and attributes.
package payments
