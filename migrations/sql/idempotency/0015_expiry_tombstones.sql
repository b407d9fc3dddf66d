-- Expired keys stay refused after the prune (idempotency.ExpiredRefused).
-- A claim under ExpiredRefused records how long past its expiry its record
-- must keep refusing the key: refuse_for, the executor's
-- Config.RefusalHorizon (30 days by default). Under ExpiredIsNew, the
-- default, it is NULL and the prune deletes the record when it expires, as
-- before. When a record with refuse_for expires, the prune reduces it to a
-- tombstone: the response (response_code, response_body, response_raw)
-- is deleted, and refuse_until = expires_at + refuse_for. Scope, key,
-- fingerprint, status, lock_version and the times stay: the key is still
-- refused, and a renewal under ExpiredIsNew still raises the lock version,
-- so a fencing token never repeats. A later prune deletes the tombstone
-- once refuse_until has passed.
--
-- Both columns are NULL for existing rows: adding them rewrites nothing.
ALTER TABLE idempotency_store
    ADD COLUMN refuse_for   INTERVAL,
    ADD COLUMN refuse_until TIMESTAMPTZ;

-- Tombstones leave the expiry index, so that a prune batch never walks
-- over a month of them to find what expired since the last batch; their
-- own index orders them by the end of their horizon. The expiry index is
-- built anew under another name. On a large table, build it beforehand
-- without blocking claims, and this migration keeps it:
--   CREATE INDEX CONCURRENTLY idx_idempotency_expires_live ON idempotency_store (expires_at)
--       WHERE status <> 'PROCESSING' AND refuse_until IS NULL;
CREATE INDEX IF NOT EXISTS idx_idempotency_expires_live ON idempotency_store (expires_at)
    WHERE status <> 'PROCESSING' AND refuse_until IS NULL;
DROP INDEX idx_idempotency_expires;
CREATE INDEX idx_idempotency_tombstones ON idempotency_store (refuse_until)
    WHERE refuse_until IS NOT NULL;
