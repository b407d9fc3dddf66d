-- The replay cache's change announcements (line replaycache; it needs the
-- idempotency line). Executors keep finished records in an in-process
-- replay cache (idempotency.ReplayCache). A finished record may still
-- change before it expires, outside the claim path: the runbook deletes a
-- FAILED record so that it can run again, an erasure request deletes or
-- blanks records, pgstore's SupersedeTx rewrites an outcome the world
-- overturned. Each such change of a COMPLETED or FAILED record that has
-- not expired yet is announced on the channel payonce_idempotency_changed
-- when its transaction commits, whoever makes it (manual SQL included),
-- and every executor's cache listening there forgets the record.
--
-- These are the function and triggers of 0016 as 0018 left them; 0019
-- took them out of the idempotency line, so that services without a
-- replay cache do not pay for them.
--
-- The payload is JSON: {"scope": user_id, "key_sha256": SHA-256 of the key
-- in lowercase hex}, as operator_audit stores it; never the key itself. A
-- TRUNCATE announces {} (every record).
--
-- A change is one to what a replay answers: the key, the scope, the
-- fingerprint, the status, the response or the expiry. The hot path sends
-- nothing: claims, completions and releases change PROCESSING records; the
-- pruner deletes and a renewal replaces expired ones, and so does anything
-- else done to an expired record. An UPDATE that changes none of those
-- columns is not announced. Heartbeats, releases and reclaims set none of
-- them, so the trigger is not even considered for them. A completion sets
-- them, so it pays the WHEN test: PostgreSQL reads a row trigger's WHEN
-- back from text and prepares it for every statement that may fire it,
-- which is why the condition is only the record's status and expiry, and
-- the comparison of the replayed columns is in the function, which runs
-- only for records that were finished and live.
CREATE OR REPLACE FUNCTION idempotency_announce_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('payonce_idempotency_changed', '{}');
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE'
       AND (OLD.idempotency_key, OLD.user_id, OLD.fingerprint, OLD.status, OLD.response_code,
            OLD.response_body, OLD.response_raw, OLD.expires_at)
           IS NOT DISTINCT FROM
           (NEW.idempotency_key, NEW.user_id, NEW.fingerprint, NEW.status, NEW.response_code,
            NEW.response_body, NEW.response_raw, NEW.expires_at) THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify('payonce_idempotency_changed', json_build_object(
        'scope', OLD.user_id,
        'key_sha256', encode(sha256(convert_to(OLD.idempotency_key, 'UTF8')), 'hex'))::text);
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS idempotency_finished_deleted ON idempotency_store;
CREATE TRIGGER idempotency_finished_deleted AFTER DELETE ON idempotency_store
    FOR EACH ROW
    WHEN (OLD.status IN ('COMPLETED', 'FAILED') AND OLD.expires_at > now())
    EXECUTE FUNCTION idempotency_announce_change();
DROP TRIGGER IF EXISTS idempotency_finished_changed ON idempotency_store;
CREATE TRIGGER idempotency_finished_changed
    AFTER UPDATE OF idempotency_key, user_id, fingerprint, status, response_code, response_body, response_raw, expires_at
    ON idempotency_store
    FOR EACH ROW
    WHEN (OLD.status <> 'PROCESSING' AND OLD.expires_at > now())
    EXECUTE FUNCTION idempotency_announce_change();
DROP TRIGGER IF EXISTS idempotency_truncated ON idempotency_store;
CREATE TRIGGER idempotency_truncated AFTER TRUNCATE ON idempotency_store
    FOR EACH STATEMENT EXECUTE FUNCTION idempotency_announce_change();
