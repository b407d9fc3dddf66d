package pgstore

// The statements pgstore runs, as SQL. Times are always the database's
// now(), never the application's clock. $1 is always the key and $2 the
// scope (user_id).

// claimSQL and readSQL return the database's now() beside the record's
// times: lease and expiry are decided by comparing values that all come
// from the database clock, never the application's.
//
// claimSQL is the one round trip of the common paths. A key that exists
// is only read (no row lock, no WAL, no commit): the INSERT runs only when
// the SELECT found nothing. A key that does not exist is inserted
// PROCESSING. Under READ COMMITTED the SELECT sees the snapshot taken at
// the start of the statement, so when a concurrent claim inserted the same
// key after that snapshot the INSERT sees the conflict (after waiting for
// that transaction) and the statement returns no row; the caller then runs
// it again and sees the committed row.
//
// A new record's lock version starts at a random value below 2^30 rather
// than 0: after a record is pruned and its key claimed again, a holder that
// stalled since before the prune must not find its old fencing token valid
// again (a collision has odds of one in a billion).
//
// With $6 (refuse foreign keys) set, a key that this scope has no record of
// but another scope has a live one is neither inserted nor revealed: the
// statement returns one row with is_foreign set, found through the primary
// key's leading column (idempotency_key) in the same round trip.
//
// A tombstone (refuse_until set: an expired record claimed under
// ExpiredRefused, without its response since the prune) is read like any
// expired record: the caller refuses it or renews it per the policy.
//
// $3 fingerprint, $4 lock timeout (s), $5 retention (s), $6 refuse foreign,
// $7 refusal horizon of the new record (s; 0: none, ExpiredIsNew), $8 and
// $9 the holder's instance name (empty: none) and incarnation (see
// releaseHeldSQL).
const claimSQL = `WITH existing AS (
    SELECT fingerprint, status, response_code, response_body, response_raw, lock_version,
           locked_until, expires_at, refuse_until, now() AS db_now, false AS is_foreign
      FROM idempotency_store
     WHERE idempotency_key = $1 AND user_id = $2
), foreign_scope AS (
    SELECT 1
      FROM idempotency_store
     WHERE $6 AND idempotency_key = $1 AND user_id <> $2
       AND (status = 'PROCESSING' OR expires_at > now())
       AND NOT EXISTS (SELECT 1 FROM existing)
     LIMIT 1
), inserted AS (
    INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, lock_version, locked_until, expires_at, refuse_for, holder_instance, holder_incarnation)
    SELECT $1, $2, $3, 'PROCESSING', floor(random() * 1073741824)::int,
           now() + make_interval(secs => $4), now() + make_interval(secs => $5), make_interval(secs => nullif($7::float8, 0)), nullif($8::text, ''), $9::int8
     WHERE NOT EXISTS (SELECT 1 FROM existing) AND NOT EXISTS (SELECT 1 FROM foreign_scope)
    ON CONFLICT (idempotency_key, user_id) DO NOTHING
    RETURNING fingerprint, status, response_code, response_body, response_raw, lock_version,
              locked_until, expires_at, refuse_until, now() AS db_now, false AS is_foreign
)
SELECT true AS is_new, * FROM inserted
UNION ALL
SELECT false, * FROM existing
UNION ALL
SELECT false, repeat('0', 64), 'PROCESSING', NULL, NULL, NULL, 0, NULL, now(), NULL, now(), true FROM foreign_scope`

// claimNewSQL is the insert-first half of an adaptive claim while most
// claims are new keys (see ClaimAdaptive): a plain INSERT that returns the
// new record's lock version, or no row when the key exists (in any state,
// in any scope's row with this key and scope), after which claimSQL reads
// it. A new key costs one lean statement instead of claimSQL's CTE; a
// replay costs one more round trip, which the adaptive strategy stops
// paying once replays are common. Never used for claims that refuse
// foreign keys: only claimSQL sees other scopes. Same values as claimSQL's
// insert (random initial lock version, database-clock times).
//
// $3 fingerprint, $4 lock timeout (s), $5 retention (s), $6 refusal
// horizon (s; 0: none), $7 and $8 the holder's instance (empty: none) and
// incarnation.
const claimNewSQL = `INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, lock_version, locked_until, expires_at, refuse_for, holder_instance, holder_incarnation)
VALUES ($1, $2, $3, 'PROCESSING', floor(random() * 1073741824)::int,
        now() + make_interval(secs => $4), now() + make_interval(secs => $5), make_interval(secs => nullif($6::float8, 0)), nullif($7::text, ''), $8::int8)
ON CONFLICT (idempotency_key, user_id) DO NOTHING
RETURNING lock_version`

// readSQL is the read-first half of a claim (see ClaimReadFirst): a plain
// primary-key SELECT of claimSQL's columns but its first and last (is_new
// and is_foreign, always false here), so that a replay costs what a read
// costs. When it finds nothing, claimSQL follows.
const readSQL = `SELECT fingerprint, status, response_code, response_body, response_raw, lock_version,
       locked_until, expires_at, refuse_until, now() AS db_now
  FROM idempotency_store
 WHERE idempotency_key = $1 AND user_id = $2`

// reclaimSQL takes over an orphaned record (PROCESSING, lease ended) by
// compare-and-swap on the lock version the claim saw: of many contenders
// exactly one updates the row; the others see no row. The version, not
// the state alone, decides: between the claim's read and this statement
// the record may have been reclaimed, completed, expired, renewed with
// another fingerprint and orphaned again, and a contender that read the
// old version must then lose. A PROCESSING record without a lease end
// (locked_until NULL, which only an UPDATE by hand leaves) counts as
// ended, as the claim and the operator's tooling read it.
//
// $3 lock version seen, $4 lock timeout (s), $5 and $6 the new holder's
// instance (empty: none) and incarnation.
const reclaimSQL = `UPDATE idempotency_store
   SET lock_version = lock_version + 1,
       locked_until = now() + make_interval(secs => $4),
       holder_instance = nullif($5::text, ''), holder_incarnation = $6::int8
 WHERE idempotency_key = $1 AND user_id = $2
   AND status NOT IN ('COMPLETED', 'FAILED') AND (locked_until IS NULL OR locked_until <= now()) AND lock_version = $3
RETURNING lock_version`

// renewSQL replaces an expired (non-PROCESSING) record, or a tombstone, by
// a new claim, by compare-and-swap like reclaimSQL. The lock version still
// grows, so a fencing token is never reused for a key. The new record
// takes the new claim's refusal horizon.
//
// $3 lock version seen, $4 fingerprint, $5 lock timeout (s), $6 retention
// (s), $7 refusal horizon (s; 0: none), $8 and $9 the new holder's
// instance (empty: none) and incarnation.
const renewSQL = `UPDATE idempotency_store
   SET fingerprint = $4, status = 'PROCESSING',
       response_code = NULL, response_body = NULL, response_raw = NULL,
       lock_version = lock_version + 1,
       locked_until = now() + make_interval(secs => $5),
       created_at = now(), completed_at = NULL,
       expires_at = now() + make_interval(secs => $6),
       refuse_for = make_interval(secs => nullif($7::float8, 0)), refuse_until = NULL,
       holder_instance = nullif($8::text, ''), holder_incarnation = $9::int8
 WHERE idempotency_key = $1 AND user_id = $2
   AND status <> 'PROCESSING' AND expires_at <= now() AND lock_version = $3
RETURNING lock_version`

// completeSQL stores the outcome for the holder of lock version $3 only:
// the record must not be finished yet (chk_status leaves PROCESSING once
// COMPLETED and FAILED are excluded).
//
// The condition is spelled as "not finished" rather than status =
// 'PROCESSING' on purpose: a statement that says status = 'PROCESSING'
// matches the predicate of the orphan-lock partial index, and the planner
// then often reads that whole index (every live claim, and every entry of
// a completed claim that vacuum has not removed yet) and filters it on the
// key, instead of the primary key's one entry. Measured on a table after
// 165,000 cycles: 31,590 buffers and 26 ms for one completion, against 3
// buffers and 0.1 ms through the primary key (BENCHMARKS.md, where a
// cycle's time goes). TestHolderPlansUseThePrimaryKey checks the plans.
//
// $4 status, $5 response code, $6 response metadata (JSONB), $7 body,
// $8 retention (s).
const completeSQL = `UPDATE idempotency_store
   SET status = $4, response_code = $5, response_body = $6, response_raw = $7,
       locked_until = NULL, completed_at = now(),
       expires_at = now() + make_interval(secs => $8)
 WHERE idempotency_key = $1 AND user_id = $2
   AND status NOT IN ('COMPLETED', 'FAILED') AND lock_version = $3`

// completeGuardedSQL is completeSQL for a pipeline that commits right
// after it: it fails (division by zero) when it matched no row, so that the
// pipeline stops before its COMMIT.
const completeGuardedSQL = `WITH done AS (` + completeSQL + `
RETURNING 1)
SELECT 1 / count(*)::int FROM done`

// The statements below that act on one holder's record (reclaim, release,
// fence, abandon, heartbeat) say "not finished" rather than status =
// 'PROCESSING' for the reason completeSQL gives: the primary key, not the
// orphan-lock index. TestHolderPlansUseThePrimaryKey checks their plans.

// releaseSQL ends the holder's lease now and keeps the record PROCESSING,
// so that a retry reclaims it and re-drives the action.
const releaseSQL = `UPDATE idempotency_store
   SET locked_until = now()
 WHERE idempotency_key = $1 AND user_id = $2
   AND status NOT IN ('COMPLETED', 'FAILED') AND lock_version = $3`

// fenceSQL locks the holder's record FOR SHARE until the transaction
// ends (see Store.FenceTx).
const fenceSQL = `SELECT 1 FROM idempotency_store
 WHERE idempotency_key = $1 AND user_id = $2
   AND status NOT IN ('COMPLETED', 'FAILED') AND lock_version = $3
   FOR SHARE`

// abandonSQL deletes a claim that must not proceed, for its holder only.
const abandonSQL = `DELETE FROM idempotency_store
 WHERE idempotency_key = $1 AND user_id = $2
   AND status NOT IN ('COMPLETED', 'FAILED') AND lock_version = $3`

// limitSQL counts one new key for scope $1 in the current fixed window of
// $2 seconds (aligned on the epoch, by the database clock) unless the count
// already reached $3. It returns whether the key was counted and the
// seconds left in the window. One statement; the per-scope counter row is
// locked only for the instant of this autocommit statement.
const limitSQL = `WITH w AS (
    SELECT date_bin(make_interval(secs => $2), now(), timestamptz 'epoch') AS start
), counted AS (
    INSERT INTO idempotency_rate_limits AS r (user_id, window_start, keys_created)
    SELECT $1, w.start, 1 FROM w
    ON CONFLICT (user_id, window_start) DO UPDATE SET keys_created = r.keys_created + 1
     WHERE r.keys_created < $3
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM counted),
       extract(epoch FROM (SELECT start FROM w) + make_interval(secs => $2) - now())::float8`

// limitCleanupSQL drops counters of windows that ended long ago.
const limitCleanupSQL = `DELETE FROM idempotency_rate_limits WHERE window_start < now() - make_interval(secs => $1)`

// releaseHeldSQL ends at once the live leases that earlier incarnations
// of instance $1 hold (any incarnation but $2, this process's), as
// releaseSQL ends one: those processes are gone (the instance runs again
// under its name), so a retry reclaims their keys at once instead of
// waiting for the leases to run out. The lock version does not change
// here: the reclaim raises it, which fences off anything of the old holder
// from the moment another holder exists, and not before (a holder that was
// only stalled and records its outcome before any retry comes leaves the
// one outcome there is). The leases are found through
// idx_idempotency_orphan_locks (live PROCESSING records: the actions in
// flight). A row locked by an open transaction (a session of the dead
// process that the server has not yet seen die) is skipped rather than
// waited for: its lease runs out as before. It returns how many leases it
// ended.
const releaseHeldSQL = `WITH held AS (
    SELECT idempotency_key, user_id
      FROM idempotency_store
     WHERE status = 'PROCESSING' AND locked_until > now()
       AND holder_instance = $1 AND holder_incarnation <> $2
       FOR UPDATE SKIP LOCKED
), released AS (
    UPDATE idempotency_store AS s
       SET locked_until = now()
      FROM held AS h
     WHERE s.idempotency_key = h.idempotency_key AND s.user_id = h.user_id
    RETURNING 1
)
SELECT count(*) FROM released`

// heartbeatSQL extends the holder's lease to $4 seconds from now.
const heartbeatSQL = `UPDATE idempotency_store
   SET locked_until = now() + make_interval(secs => $4)
 WHERE idempotency_key = $1 AND user_id = $2
   AND status NOT IN ('COMPLETED', 'FAILED') AND lock_version = $3`

const getSQL = `SELECT fingerprint, status, response_code, response_body, response_raw, lock_version,
       locked_until, created_at, completed_at, expires_at, refuse_until
  FROM idempotency_store
 WHERE idempotency_key = $1 AND user_id = $2`

// pruneSQL prunes one bounded batch of at most $1 records and returns how
// many it pruned. First the expired, finished records, oldest expiry first,
// through the partial index idx_idempotency_expires_live (tombstones are not
// in it): each is deleted, unless it was claimed under ExpiredRefused and
// its refusal horizon (refuse_for) has not passed since its expiry; that
// one becomes a tombstone: its response is deleted and refuse_until set,
// which takes it out of that index. Then, with what is left of the batch,
// the tombstones whose refuse_until has passed are deleted, through
// idx_idempotency_tombstones. Rows locked by a concurrent pruner (or a
// claim renewing an expired record) are skipped, so several pruners run at
// once without waiting on each other. PROCESSING rows are never selected.
// The two sets are disjoint (refuse_until NULL or not), so no row is
// changed twice.
//
// $1 batch size.
const pruneSQL = `WITH expired AS (
    SELECT idempotency_key, user_id, expires_at + refuse_for > now() AS refused
      FROM idempotency_store
     WHERE status <> 'PROCESSING' AND refuse_until IS NULL AND expires_at <= now()
     ORDER BY expires_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED
), past_horizon AS (
    SELECT idempotency_key, user_id
      FROM idempotency_store
     WHERE status <> 'PROCESSING' AND refuse_until <= now()
     ORDER BY refuse_until
     LIMIT $1 - (SELECT count(*) FROM expired)
       FOR UPDATE SKIP LOCKED
), tombstoned AS (
    UPDATE idempotency_store AS s
       SET response_code = NULL, response_body = NULL, response_raw = NULL,
           refuse_until = s.expires_at + s.refuse_for
      FROM expired AS e
     WHERE e.refused AND s.idempotency_key = e.idempotency_key AND s.user_id = e.user_id
    RETURNING 1
), deleted AS (
    DELETE FROM idempotency_store
     WHERE (idempotency_key, user_id) IN (
            SELECT idempotency_key, user_id FROM expired WHERE refused IS NOT TRUE
            UNION ALL
            SELECT idempotency_key, user_id FROM past_horizon)
    RETURNING 1
)
SELECT (SELECT count(*) FROM tombstoned) + (SELECT count(*) FROM deleted)`

// approxSizeSQL reads the planner's row estimate of the table in the
// current schema (-1 before its first ANALYZE, read as 0).
const approxSizeSQL = `SELECT reltuples::float8 FROM pg_class WHERE oid = 'idempotency_store'::regclass`

// Statements returns the SQL that pgstore runs, by name, for audits and
// for benchmarks that must run exactly the same statements (make bench
// drives pgbench with them).
func Statements() map[string]string {
	return map[string]string{
		"claim": claimSQL, "claim_new": claimNewSQL, "claim_new_group": claimNewGroupSQL, "complete_group": completeGroupSQL, "heartbeat_group": heartbeatGroupSQL, "read": readSQL, "reclaim": reclaimSQL, "renew": renewSQL, "complete": completeSQL,
		"release": releaseSQL, "release_held": releaseHeldSQL, "abandon": abandonSQL, "fence": fenceSQL, "limit": limitSQL, "heartbeat": heartbeatSQL, "get": getSQL, "prune": pruneSQL,
	}
}
