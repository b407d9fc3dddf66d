// Package ledger is payonce's double-entry ledger on PostgreSQL: every
// movement of money is an [Entry] of two or more [Posting]s that sum to
// zero per currency, entries are never changed or deleted, and each entry
// has a unique key so a retried action posts it once.
//
// Amounts are [money.Money] in Go and NUMERIC in the database; nothing is
// ever a float.
//
// # Chart of accounts
//
// An [Account] is identified by a code and a currency; the same code exists
// once per currency it is used in ([Ledger.EnsureAccount] opens one).
// Postings are signed: positive amounts are debits, negative ones credits,
// and an account's balance is the sum of its postings. Payments uses:
//
//	code                  balance                           moved by
//	provider:<name>       money held at that provider       + charges, - refunds
//	                      (ProviderCash("stripe"))
//	customer:payments     minus the total charged           - charges
//	                      (CustomerPayments)
//	customer:refunds      the total refunded                + refunds
//	                      (CustomerRefunds)
//
// [ChartAccounts] lists them for a provider and currency. Other codes (fees,
// payouts, ...) can be added freely: 1 to 200 ASCII letters, digits and
// "_.:/@-", the first a letter or digit ([ValidCode]).
//
// # Recording a charge and a refund
//
// Payments posts inside the transaction that marks the payment intent
// succeeded and completes the idempotency record, so all three commit
// together or not at all. The entry's key is the action's idempotency key
// and its step names the step of that action:
//
//	// at start-up, for each provider and currency in use
//	for _, a := range ledger.ChartAccounts("stripe", money.EUR) {
//		if _, err := l.EnsureAccount(ctx, a); err != nil { ... }
//	}
//
//	// the charge succeeded at the provider
//	entry, err := ledger.ChargeEntry(idempotencyKey, "stripe", amount)
//	...
//	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		// ... intent -> SUCCEEDED, idempotency record -> COMPLETED ...
//		_, err := l.PostTx(ctx, tx, entry)
//		return err
//	})
//
//	// later, a refund (its own idempotency key)
//	entry, err = ledger.RefundEntry(refundKey, "stripe", refundAmount)
//	...
//	_, err = l.PostTx(ctx, tx, entry)
//
// A charge of 25.00 EUR debits provider:stripe 25.00 and credits
// customer:payments 25.00; a refund of 5.50 EUR debits customer:refunds
// 5.50 and credits provider:stripe 5.50, leaving 19.50 EUR at Stripe.
// A refund the provider fails after it succeeded is reversed by
// [RefundReversalEntry] under the refund's key (step "refund_reversal"):
// the refund's entry stays, and the books return to 25.00 EUR at Stripe.
// See the package example.
//
// # Keys, replays and conflicts
//
// [PostParams] Key and Step identify the entry. Posting them again with the
// same postings (same accounts, currencies and amounts, in any order) writes
// nothing and returns the original entry with [PostResult].Replayed set;
// this is what a retried action does, and concurrent posts of one key yield
// exactly one entry (the unique constraint decides; the losers compare
// postings). Posting them with different postings is refused with
// [ErrKeyConflict]. A mistake is corrected by a new entry, for instance the
// [Reversal] of the wrong one.
//
// # What the database enforces
//
// The schema (migrations 0002_ledger.sql) refuses, whoever writes:
//   - an entry whose postings do not sum to zero in each currency, or that
//     has fewer than two postings (deferred constraint triggers, checked at
//     commit and again for any posting added after SET CONSTRAINTS);
//   - a posting to an account that does not exist, in a currency other
//     than the account's, with more decimals than the currency's minor
//     unit, or of zero;
//   - a posting added to an entry committed earlier;
//   - UPDATE, DELETE and TRUNCATE of accounts, entries and postings.
//
// Entry times and transaction ids are set by the database. [Ledger.Post]
// checks the same rules first, so that bad input gets an error naming the
// field and nothing is written; the triggers are the guarantee.
//
// # Balances and hot accounts
//
// Every charge debits the same provider account, so no posting updates an
// account row: a per-account balance row would serialise all charges of a
// currency on one row lock. Postings are only appended, and a balance is
//
//	latest snapshot of the account + sum of its postings after it
//
// A snapshot is the sum of the account's postings written by transactions
// whose id is below the xmin of a database snapshot: all of those had
// committed or aborted, so the sum is final, and no late commit can slip
// in behind it. The postings "after it" are those with a transaction id at
// or above that xmin, read through an (account, xid) index. Snapshots are
// inserted, never updated, and are computed by the database from the
// postings, so they cannot be forged.
//
// [Ledger.Balance] records a new snapshot when it had to sum more than
// Config.SnapshotEvery postings (default 500), so a read costs at most
// about that many index entries whatever the account's history: under a
// millisecond for an account with a million postings (see
// BENCHMARKS-ledger.md). The first read of an account never read before
// sums its whole history once. A transaction that writes and stays open
// for long holds the cluster's xmin back, and with it new snapshots;
// reads stay exact but grow slower until it ends.
//
// [Ledger.BalanceAt] sums the postings of entries posted at or before a
// time, from whichever end of the account's history is closer.
// [Ledger.Entries] lists an account's entries in order, with their
// postings, a page at a time.
//
// # Errors
//
// Refusals are sentinels ([ErrUnbalanced], [ErrUnknownAccount],
// [ErrWrongCurrency], [ErrKeyConflict], [ErrTooFewPostings],
// [ErrInvalidParams], [ErrAppendOnly]) matched with [errors.Is]; the ones
// that carry data are pointer types ([UnbalancedError], [AccountError],
// [KeyConflictError], [ParamError]). Database errors are translated here;
// [IsRetryable] tells a transient conflict between transactions.
package ledger
