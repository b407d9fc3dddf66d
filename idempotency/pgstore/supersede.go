package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
)

// supersedeSQL replaces the outcome of a record in progress, or finished
// and not expired, whoever holds it: the lock version grows, so that the
// lease of a holder (and any fencing token handed out before) is lost and
// its completion matches no row. An expired record is left alone: it is
// never revived, the next request with its key is a new one.
//
// $3 status, $4 response code, $5 response metadata (JSONB), $6 body,
// $7 retention (s).
const supersedeSQL = `UPDATE idempotency_store
   SET status = $3, response_code = $4, response_body = $5, response_raw = $6,
       lock_version = lock_version + 1, locked_until = NULL, completed_at = now(),
       expires_at = now() + make_interval(secs => $7)
 WHERE idempotency_key = $1 AND user_id = $2
   AND (status = 'PROCESSING' OR expires_at > now())`

// SupersedeTx replaces, inside the caller's transaction, the outcome of the
// record of (scope, key) with c: for an action whose recorded outcome the
// world overturned afterwards (a payment recorded declined that the
// provider then charged, a refund recorded succeeded that the provider
// then failed), so that every later request with the key gets the outcome
// that is true now instead of the one first recorded.
//
// It applies to a record that is finished and not expired, or in
// progress. The fingerprint is kept; the lock version grows, so a holder
// of the record's lease loses it: its completion returns
// idempotency.ErrLeaseLost and changes nothing (its transaction rolls
// back), and its heartbeats fail. It reports whether a record was
// replaced: false when there is none, or it expired (an expired record is
// never revived).
//
// Executors' replay caches (idempotency.ReplayCache) learn of the new
// outcome as the transaction commits (the replaycache line's trigger
// announces it, see
// [Store.WatchChanges]) and stop replaying the old one. With
// Config.Keyring the new response is sealed like any other.
//
// Errors: *idempotency.InvalidError for a bad scope, key or completion;
// *Error from the database.
func (s *Store) SupersedeTx(ctx context.Context, tx pgx.Tx, scope, key string, c idempotency.Completion) (bool, error) {
	if err := idempotency.ValidateScope(scope); err != nil {
		return false, err
	}
	if err := idempotency.ValidateKey(key); err != nil {
		return false, err
	}
	row, err := s.completionRow(idempotency.Lease{Scope: scope, Key: key}, c)
	if err != nil {
		return false, err
	}
	var meta any
	if row.meta != nil {
		meta = *row.meta
	}
	tag, err := tx.Exec(ctx, supersedeSQL, key, scope, row.status, row.code, meta, row.body, row.retS)
	if err != nil {
		return false, translate("supersede", err)
	}
	return tag.RowsAffected() == 1, nil
}
