package saga

// The statements package saga runs. $1 is the saga's scope and $2 its key
// wherever both appear. Times are the database's now().

// createSQL records a new saga and its steps (PENDING), or nothing when
// the saga exists.
//
// $3 idempotency key, $4 definition, $5 fingerprint, $6 input (JSON),
// $7 step names, $8 step kinds.
const createSQL = `WITH saga AS (
    INSERT INTO sagas (scope, saga_key, idempotency_key, definition, fingerprint, input)
    VALUES ($1, $2, $3, $4, $5, $6::jsonb)
    ON CONFLICT (scope, saga_key) DO NOTHING
    RETURNING 1
)
INSERT INTO saga_steps (scope, saga_key, position, name, kind)
SELECT $1, $2, t.ord - 1, t.name, t.kind
  FROM unnest($7::text[], $8::text[]) WITH ORDINALITY AS t(name, kind, ord)
 WHERE EXISTS (SELECT 1 FROM saga)`

const loadSagaSQL = `SELECT definition, fingerprint, status, current_step, input, coalesce(failed_step, ''), coalesce(reason, ''),
       created_at, updated_at, finished_at
  FROM sagas
 WHERE scope = $1 AND saga_key = $2`

const loadStepsSQL = `SELECT position, name, kind, status, output, coalesce(error, ''), attempts, compensation_attempts,
       started_at, finished_at, compensated_at, updated_at
  FROM saga_steps
 WHERE scope = $1 AND saga_key = $2
 ORDER BY position`

// transitionSQL moves one step and its saga, for the holder of the
// saga's idempotency record's lease only: the fence locks the record FOR
// SHARE when it is PROCESSING under lock version $4, so that no reclaim
// can take the record over before this transaction ends; when the lease
// was lost, nothing is changed and no row is returned. In a step's
// transaction, it runs after the step's own writes, so the record's row
// lock is held only for the commit.
//
// $3 idempotency key, $4 lock version, $5 position, $6 step status,
// $7 output (NULL keeps it), $8 error (NULL clears it), $9 attempts to
// add, $10 compensation attempts to add, $11 saga status, $12 failed step
// (NULL keeps it), $13 reason (NULL keeps it).
const transitionSQL = `WITH fence AS (
    SELECT 1 FROM idempotency_store
     WHERE idempotency_key = $3 AND user_id = $1 AND status = 'PROCESSING' AND lock_version = $4
       FOR SHARE
), step AS (
    UPDATE saga_steps
       SET status = $6::text, output = coalesce($7::jsonb, output), error = $8::text,
           attempts = attempts + $9::int, compensation_attempts = compensation_attempts + $10::int,
           started_at = CASE WHEN $9::int > 0 THEN coalesce(started_at, now()) ELSE started_at END,
           finished_at = CASE WHEN $6::text IN ('DONE', 'FAILED') THEN now() ELSE finished_at END,
           compensated_at = CASE WHEN $6::text = 'COMPENSATED' THEN now() ELSE compensated_at END,
           updated_at = now()
     WHERE scope = $1 AND saga_key = $2 AND position = $5 AND EXISTS (SELECT 1 FROM fence)
    RETURNING 1
)
UPDATE sagas
   SET status = $11::text, current_step = $5, failed_step = coalesce($12::text, failed_step),
       reason = coalesce($13::text, reason), updated_at = now()
 WHERE scope = $1 AND saga_key = $2 AND EXISTS (SELECT 1 FROM step)
RETURNING 1`

// finishSQL gives the saga its final status, in the transaction that
// completes its idempotency record (which fences it).
//
// $3 status.
const finishSQL = `UPDATE sagas
   SET status = $3, finished_at = coalesce(finished_at, now()), updated_at = now()
 WHERE scope = $1 AND saga_key = $2`

// stuckSQL lists sagas not finished whose idempotency record's lease has
// ended (their holder crashed or released them: a step's outcome is
// unknown), whose record is missing, or that made no progress for a
// while (a holder still heartbeating but stuck: reported, then left to
// it while its lease lives). Oldest progress first.
//
// $1 stuck after (s), $2 batch.
const stuckSQL = `SELECT s.scope, s.saga_key, s.idempotency_key, s.definition, s.fingerprint
  FROM sagas s
  LEFT JOIN idempotency_store r ON r.idempotency_key = s.idempotency_key AND r.user_id = s.scope
 WHERE s.status IN ('RUNNING', 'COMPENSATING')
   AND (s.updated_at < now() - make_interval(secs => $1)
        OR r.idempotency_key IS NULL
        OR (r.status = 'PROCESSING' AND r.locked_until <= now()))
 ORDER BY s.updated_at
 LIMIT $2`
