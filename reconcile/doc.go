// Package reconcile brings payonce's local state, its ledger and the
// payment providers back into agreement after partial failures: a crash
// after the provider charged but before the local commit, a response lost
// in a timeout, a webhook that never came.
//
// [Reconciler.RunOnce] claims the open intents (PENDING, UNKNOWN,
// REQUIRES_ACTION) past a grace period (FOR UPDATE SKIP LOCKED, with a
// claim that expires, so that many instances run at once and a crashed
// one's claims lapse), asks each intent's provider what exists for its
// derived references, and repairs, each repair in one transaction with
// its report row:
//
//   - the provider charged: complete locally (intent SUCCEEDED, ledger
//     postings, idempotency record completed with the response a retry
//     will be served);
//   - the provider proves nothing was charged (a consistent lookup found
//     nothing; a charge failed; a technical cancel voided the attempt):
//     mark failed with that proof (retries get the failure, never a new
//     charge), or, with Config.Redrive, reopen the intent under the next
//     attempt number so the next retry charges with new references;
//   - no proof either way: look again later on a backoff schedule
//     (Config.Schedule), then flag NEEDS_REVIEW with the reason and the
//     evidence. A provider outage only reschedules.
//
// How each provider is asked (see PROVIDERS.md): Stripe by List on the
// creation window matched on metadata (consistent), Search as a fallback
// (eventually consistent: an empty answer is not proof); Adyen from the
// AUTHORISATION notifications the webhook receiver stored, else, after
// Config.VoidAfter, a technical cancel by reference whose
// TECHNICAL_CANCEL notification settles the intent; PayPal by GET of the
// order when its id is known, else by repeating the create with the same
// request id inside the 6-hour window (creating an order moves no money).
// A create is never replayed to find out.
//
// Every run also reports idempotency records stuck PROCESSING and
// webhook events that named no local intent or contradicted a final one.
// Runs and items are stored (reconcile_runs, reconcile_items) and read
// back with [Runs] and [Items]; `payonce reconcile` and `payonce report`
// print them.
//
// Charges that succeeded locally are checked once against the provider
// (Config.VerifyWithin), and again whenever one of their refunds settles:
// missing there, failed there, another amount, or another refunded total
// than the refunds payonce recorded are reported (Adyen's adapter cannot
// tell its refunded totals).
//
// Every Config.DriftEvery, the money each provider implementing
// payments.Totaler (Stripe, PayPal) moved over a period is compared per currency
// with the ledger's entries for the intents created then (balance drift).
//
// Refund intents still open are looked up with payments.RefundLooker
// (Stripe, PayPal: consistent; Adyen: its stored notifications). Not yet
// covered: totals for Adyen (its settlement reports are files).
package reconcile
