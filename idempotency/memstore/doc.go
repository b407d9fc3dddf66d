/*
Package memstore is an [idempotency.Store] held in memory: for a single
process, for tests, and as the reference model of the store's semantics.
It behaves like pgstore, the production store on PostgreSQL, except that
records do not survive the process and are not shared between processes.
Where several processes must not run an action twice, use pgstore.

	store := memstore.New(nil) // time.Now, unlimited, expired records evicted after an hour
	claim, err := store.Claim(ctx, idempotency.ClaimParams{
		Scope:       "usr_7fQ9x",
		Key:         key,
		Fingerprint: fp,
		LockTimeout: 30 * time.Second,
		Retention:   24 * time.Hour,
	})

# Records and leases

A claim of a new key creates a PROCESSING record at lock version 0 and
hands the caller a [idempotency.Lease]. (Once the store has deleted records,
new ones start above every deleted record's version instead, so a key that
is deleted and claimed again never repeats a fencing token.) Only the holder of the record's
current lock version can complete, release or extend it; every other call
gets [idempotency.ErrLeaseLost] and changes nothing. A lease whose time ran
out still completes as long as nobody reclaimed the record: the version,
not the clock, decides (fencing).

A claim of an existing key compares fingerprints in constant time and
replays a COMPLETED or FAILED record, reports a PROCESSING one as in
progress while its lease is live, and takes it over with the next lock
version once the lease has ended (an orphan, or a released lease).
[Store.Claim] lists the exact order.

# Time

All decisions use [Config.Clock] (time.Now by default), the store's own
clock, as pgstore uses the database's. Tests inject a fake clock to step
through leases and expiries.

PROCESSING records never expire. A COMPLETED or FAILED record expires at
its ExpiresAt; from then on it is never replayed: a claim renews it as a
new request (the next lock version, the new fingerprint) or refuses it,
per [idempotency.ClaimParams].Expired. A record claimed under
ExpiredRefused outlives its pruning as a tombstone, without its response,
that refuses its key until its refusal horizon has passed (see
[idempotency.ExpiredRefused]); then it is deleted like any other.

# Memory

Expired records are evicted as time passes: each operation first deletes up
to 64 of the records that expired at least [Config.EvictAfter] ago, soonest
first (a min-heap by expiry, O(log n) per record). As a claim adds at most
one record, eviction keeps up with any traffic, and no single call pays for a
whole backlog. A long-running process therefore holds its live records,
those expired within EvictAfter and the tombstones of ExpiredRefused, not
every key it ever saw. [Config.MaxRecords] puts a hard bound on the count: a
full store refuses new keys with [idempotency.ErrStoreFull] rather than
evict a live record or a tombstone.

Until it is evicted, an expired record is visible as an unpruned row of
pgstore is: a claim renews or refuses it per the expiry policy, and
[Store.Prune] deletes it. Tests that jump the clock far past expiry and still
expect a refusal or a prune count, as the conformance suite does, set
EvictAfter to a negative value: only Prune deletes then, exactly as with
pgstore.

# Transactions

A Store is an [idempotency.TxStore] over *[Tx], as pgstore is one over
pgx.Tx, so that code taking the seam (idempotency/inbox,
idempotency/cronslot, the TxExecutor's DoTx and WithTx) runs on it in
tests. [Store.Begin] starts a transaction; ClaimTx, CompleteTx, FenceTx
and SupersedeTx write in it; [Tx.OnCommit] registers the test's own
writes, which run when it commits, after its records are applied and
before the claims waiting for its keys go on. [Store.RunTx] is the
one-transaction mode's step:

	claim, err := store.RunTx(ctx, params, func(ctx context.Context, tx *memstore.Tx, l idempotency.Lease) (idempotency.Completion, error) {
		tx.OnCommit(func() { charged.Add(1) }) // the test's own write, committed with the record
		return idempotency.Completion{Status: idempotency.StatusCompleted, Response: resp, Retention: 24 * time.Hour}, nil
	})

Transactions behave as pgstore's do under READ COMMITTED, with the row
locks its statements take:

  - A record written in a transaction is the transaction's own until it
    commits: Get, Leases, claims and other transactions see the committed
    record (none, for a new key), the transaction its own writes. A
    rollback discards them all.
  - A transaction holds the key of every record it wrote, and of every
    lease it fenced, until it ends. A call that would write a held key (a
    claim that would create, renew or reclaim its record; a completion,
    release, heartbeat or abandonment; another transaction's write or
    supersession) waits for the transaction to end, or for its own ctx,
    then decides again on what was committed: after a rollback, the claim
    of a new key acquires it; after a commit, it gets in progress or the
    replay. A call that only reads (a claim answered by a replay, in
    progress or a mismatch; Get; Leases) never waits. Fences of several
    transactions share a key, as FOR SHARE does.
  - A commit applies the records as the direct calls would: expiry,
    eviction, the scopes of RefuseForeign, and MaxRecords, which counts a
    transaction's new keys from its claim on. Lock versions never repeat,
    not even those a rolled-back transaction handed out.
  - A transaction whose wait would close a cycle (it waits for a key held
    by a transaction that waits, directly or not, for one of its own)
    fails at once with [ErrDeadlock] instead of hanging, and is aborted:
    its writes discarded, its keys released, every later call but
    Rollback refused. Take keys in one order to avoid it. A ctx that ends
    while a transaction's call waits aborts it too. A direct call that
    waits for a transaction its own goroutine keeps open cannot be
    detected: it waits until its ctx ends.

# Concurrency

A Store is safe for concurrent use; one mutex serialises its operations, so
each is atomic, and a call waiting for a transaction holds no lock
meanwhile. Records returned are copies, down to the response's header and
body: changing them does not change the store.
*/
package memstore
