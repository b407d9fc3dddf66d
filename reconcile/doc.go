// Package reconcile brings payonce's local state, its ledger and the
// payment providers back into agreement after partial failures: a crash
// after the provider charged but before the local commit, a response lost
// in a timeout, a webhook that never came.
//
// A [Reconciler] runs on a schedule next to the service, on any number of
// instances at once, or once from a job:
//
//	r, err := reconcile.New(pool, client, &reconcile.Config{Grace: 2 * time.Minute})
//	if err != nil {
//		return err
//	}
//	stop := r.Start(ctx) // every minute (Config.Spec); or rep, err := r.RunOnce(ctx)
//	defer stop()
//
// With a nil payments client it only reports (stuck records, webhook
// divergences): an operator without provider credentials can still run it.
//
// # Open intents
//
// [Reconciler.RunOnce] claims the open intents (PENDING, UNKNOWN,
// REQUIRES_ACTION) past a grace period (Config.Grace; Config.ActionGrace
// for REQUIRES_ACTION) with FOR UPDATE SKIP LOCKED and a claim that
// expires (Config.ClaimTTL), so that many instances run at once and a
// crashed one's claims lapse (payments.Operator.ClaimDue: every statement
// on the intents lives in package payments). It asks each intent's provider what exists
// for the attempt's derived references and decides, each repair in one
// transaction with its report row:
//
//   - the provider charged: complete locally (intent SUCCEEDED, ledger
//     postings, idempotency record completed with the response a retry
//     will be served). A charge waiting for the customer (3-D Secure) is
//     recorded REQUIRES_ACTION and looked at again after
//     Config.ActionGrace;
//   - the provider proves nothing was charged (it reports the charge
//     failed; a consistent lookup found nothing; a void cancelled the
//     attempt, see below): mark failed with that proof (retries get the
//     failure, never a new charge), or, with Config.Redrive NewAttempt, reopen the
//     intent under the next attempt number so that the client's next
//     retry charges with new references. Redrive is bounded: an attempt
//     reopened and never sent is not reopened again; once its checks run
//     out it fails with the proof that no attempt charged;
//   - the provider holds what the attempt cannot explain (several charges
//     for one attempt, another amount): NEEDS_REVIEW;
//   - the provider can no longer tell (a lookup past its deduplication
//     window that has no other way to find the attempt:
//     provider.ErrCannotTell): NEEDS_REVIEW at once ([KindPastProviderWindow]);
//   - no proof either way: look again later on a backoff schedule
//     (Config.Schedule), then, after Config.MaxChecks checks, flag
//     NEEDS_REVIEW with the reason and the evidence. A provider outage
//     only reschedules; a call holding the intent's key at that moment is
//     left to finish.
//
// Every decision is made on fresh proof. The intent's idempotency key is
// held (payments.Operator.Hold) from before the lookup until its proof is
// applied, so that no client retry can send the attempt again meanwhile (a
// retry then is answered "in progress"); the intent is read again under
// that lease. Applying the proof is a compare-and-set on what was
// examined: the attempt number and its send counter (every send of an
// attempt is counted, committed before it goes out). A reconciler paused
// past its lease while a retry took the key over and sent the attempt
// again finds both changed (payments.ErrChanged, a lost lease): nothing is
// applied, the intent is looked at again ("the attempt was sent again
// during the lookup"). A lookup never settles an intent whose attempt was
// sent after the lookup began.
//
// Refund intents still open are looked up with provider.RefundLooker
// (Stripe, PayPal: consistent; Adyen: its stored notifications, never
// consistent) and decided the same way; a consistent "none" fails the
// refund with that proof (it is never reopened). A provider without a
// refund lookup tells refund outcomes only by notification: the intent
// waits for it, then goes to review.
//
// # Asking the providers
//
// How each provider is asked (see docs/providers.md):
//
//   - Stripe: List on the creation window matched on metadata
//     (consistent), Search as a fallback (eventually consistent: an empty
//     answer is not proof).
//   - Adyen: the AUTHORISATION notifications the webhook receiver stored
//     (never consistent). After Config.VoidAfter without an answer, the
//     attempt is voided (provider.Voider), once: the payment by its id when
//     it is known (cancel or refund), else a technical cancel by reference.
//     A void that cancelled something settles the intent through its
//     notification. A refused one proves nothing (a captured payment
//     cannot be cancelled by reference): the intent waits for the
//     payment's AUTHORISATION, which the next lookups find, and goes to
//     NEEDS_REVIEW ([KindVoidRefused]) once its checks run out.
//   - PayPal: GET of the order when its id is known; else, inside the
//     create's 6-hour request id window, the create repeated with the same
//     request id (a probe that nothing can capture: creating an order moves
//     no money); past it, Transaction Search, consistent once its lag has
//     passed.
//
// The lookup of an open charge spans the creation windows of the
// attempt's sends, from its first send to its last plus the lease it was
// sent under, widened by the skew between the database's clock and the
// provider's (measured for Stripe: payments.Client.LookupAttempt), so that
// absence can be proven, at Stripe even among thousands of PaymentIntents
// an hour. Nothing that can move money is repeated to find out.
//
// # Final states
//
// Charges that succeeded locally (within Config.VerifyWithin, at least
// Config.Grace ago) are checked once against the provider, and again
// whenever one of their refunds settles: several charges there, missing
// there, failed there, another amount, or another refunded total than the
// refunds payonce recorded are reported, never repaired: the intent is
// final, a human decides. (Adyen's adapter cannot tell refunded totals.)
//
// Every Config.DriftEvery, the money each provider implementing
// provider.Totaler (Stripe, PayPal) moved over Config.DriftWindow, ending
// Config.DriftLag ago, is compared per currency with the ledger's entries
// for the intents created then (balance drift). Not yet covered: Adyen
// (its settlement reports are files).
//
// Every run also reports idempotency records stuck PROCESSING
// (Config.StuckAfter after their lease ended) and webhook events that named
// no local intent, contradicted a final one, announced a second charge
// (or refund) for one, or overturned a final one, which the receiver
// settled: a charge declined then succeeded, booked
// ([KindSucceededAfterDecline], [ActionCompleted], or [ActionNeedsReview]
// when the success could not be matched to the declined object), and a
// refund succeeded then failed, reversed ([KindRefundFailedAfterSuccess],
// [ActionReversed]).
//
// # Reports
//
// Each run's [Report] holds one [Item] per divergence found or repair
// made: what payonce said, what the provider said, what was done, with a
// [Kind] and an [Action] whose values never change (they are stored, and
// dashboards, alert rules and the runbook match them). Runs and items are
// stored (reconcile_runs, reconcile_items) and read back with [Runs] and
// [Items]; `payonce reconcile` and `payonce report` print them. The
// instruments are named by the Metric constants ([MetricDivergences] by
// kind and provider).
package reconcile
