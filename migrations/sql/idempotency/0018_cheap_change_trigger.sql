-- The replay cache's UPDATE trigger (0016) decides what it announces with
-- the same rules, at a fraction of the cost to every completion.
--
-- PostgreSQL compiles a row trigger's WHEN condition again for every
-- statement that may fire it: it reads the condition's stored node tree
-- back from text and prepares it before the first row. 0016's condition
-- compared eight OLD columns with eight NEW ones; that preparation alone
-- made every completion (an UPDATE of status, response and expiry, so one
-- that the trigger must consider) about 20 us of server CPU dearer, a
-- third of the claim and completion's execution together (BENCHMARKS.md,
-- where a cycle's time goes), although the condition is false at its
-- first test for every completion: the record was PROCESSING.
--
-- The condition is now only that first test and the expiry; the
-- comparison of the replayed columns moves into the function, which runs
-- only for records that were finished and live: what the operator,
-- SupersedeTx or manual SQL changes. What is announced is unchanged:
-- a change of the key, the scope, the fingerprint, the status, the
-- response or the expiry of a COMPLETED or FAILED record that had not
-- expired yet; an UPDATE that changes none of them is not announced.
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

DROP TRIGGER idempotency_finished_changed ON idempotency_store;
CREATE TRIGGER idempotency_finished_changed
    AFTER UPDATE OF idempotency_key, user_id, fingerprint, status, response_code, response_body, response_raw, expires_at
    ON idempotency_store
    FOR EACH ROW
    WHEN (OLD.status <> 'PROCESSING' AND OLD.expires_at > now())
    EXECUTE FUNCTION idempotency_announce_change();
