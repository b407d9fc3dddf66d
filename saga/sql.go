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

// loadSagaSQL reads a saga, and the database's clock (statement_timestamp:
// a wait's bound is measured on it, see Call.DoneAgo).
const loadSagaSQL = `SELECT definition, fingerprint, status, current_step, input, coalesce(failed_step, ''), coalesce(reason, ''),
       created_at, updated_at, finished_at, wake_at, statement_timestamp()
  FROM sagas
 WHERE scope = $1 AND saga_key = $2`

const loadStepsSQL = `SELECT position, name, kind, status, output, coalesce(error, ''), coalesce(note, ''), attempts, compensation_attempts,
       started_at, finished_at, compensated_at, updated_at
  FROM saga_steps
 WHERE scope = $1 AND saga_key = $2
 ORDER BY position`

// transitionSQL moves one step and its saga. It runs after the fence on
// the saga's idempotency record (idempotency.TxStore.FenceTx) in the same
// transaction: only the lease's holder changes a saga, and no reclaim can
// take the record over before the transition commits. In a step's
// transaction, both run after the step's own writes, so the record's row
// lock is held only for the commit.
//
// $3 position, $4 step status, $5 output (NULL keeps it), $6 error (NULL
// clears it), $7 attempts to add, $8 compensation attempts to add, $9 saga
// status, $10 failed step (NULL keeps it), $11 reason (NULL keeps it),
// $12 note (NULL keeps it), $13 seconds until the saga's wake (NULL: not
// waiting). It returns the transaction's time, which finished_at took.
const transitionSQL = `WITH step AS (
    UPDATE saga_steps
       SET status = $4::text, output = coalesce($5::jsonb, output), error = $6::text, note = coalesce($12::text, note),
           attempts = attempts + $7::int, compensation_attempts = compensation_attempts + $8::int,
           started_at = CASE WHEN $7::int > 0 THEN coalesce(started_at, now()) ELSE started_at END,
           finished_at = CASE WHEN $4::text IN ('DONE', 'FAILED') THEN now() ELSE finished_at END,
           compensated_at = CASE WHEN $4::text = 'COMPENSATED' THEN now() ELSE compensated_at END,
           updated_at = now()
     WHERE scope = $1 AND saga_key = $2 AND position = $3
    RETURNING 1
)
UPDATE sagas
   SET status = $9::text, current_step = $3, failed_step = coalesce($10::text, failed_step),
       reason = coalesce($11::text, reason), updated_at = now(),
       wake_at = CASE WHEN $13::float8 IS NULL THEN NULL ELSE now() + make_interval(secs => $13::float8) END
 WHERE scope = $1 AND saga_key = $2 AND EXISTS (SELECT 1 FROM step)
RETURNING now()`

// finishSQL gives the saga its final status, in the transaction that
// completes its idempotency record (which fences it).
//
// $3 status.
const finishSQL = `UPDATE sagas
   SET status = $3, finished_at = coalesce(finished_at, now()), updated_at = now(), wake_at = NULL
 WHERE scope = $1 AND saga_key = $2`

// openSagasSQL lists, a page at a time, the sagas not finished and not
// waiting (a saga that waits, see Wait, is listed once its wake_at has
// passed, flagged woken), by last progress ($3, $4, $5: the last row of
// the previous page), through the open-sagas partial index, with whether
// each made no progress for $1 seconds. Their records' leases are read
// through pgstore (Store.Leases).
//
// $2 page size.
const openSagasSQL = `SELECT scope, saga_key, idempotency_key, definition, fingerprint, updated_at,
       updated_at < now() - make_interval(secs => $1), wake_at IS NOT NULL
  FROM sagas
 WHERE status IN ('RUNNING', 'COMPENSATING')
   AND (wake_at IS NULL OR wake_at <= now())
   AND (updated_at, scope, saga_key) > ($3, $4, $5)
 ORDER BY updated_at, scope, saga_key
 LIMIT $2`
