package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
)

// Heartbeats go through group commit too (unless Config.NoGroupCommit):
// with short leases, every action that runs longer than a heartbeat
// interval renews its lease several times, and the heartbeats of a busy
// process's actions then go together as one statement and one commit per
// group, as claims and completions do. Fencing is per row: a heartbeat
// under a lost lease gets idempotency.ErrLeaseLost, the others of its
// group are renewed. A group of unknown outcome costs nothing to resolve:
// each of its callers sends its own heartbeat again, which extends the
// lease from now whether or not the group did.

// pendingHeartbeat is one caller's heartbeat in a group.
type pendingHeartbeat struct {
	member
	key, scope string
	version    int64
	secs       float64
	matched    bool
}

// heartbeatGroupSQL is heartbeatSQL for many leases: each is extended for
// the holder of its lock version only.
const heartbeatGroupSQL = `UPDATE idempotency_store AS s
   SET locked_until = now() + make_interval(secs => c.d)
  FROM unnest($1::text[], $2::text[], $3::int8[], $4::float8[]) AS c(k, u, v, d)
 WHERE s.idempotency_key = c.k AND s.user_id = c.u
   AND s.status NOT IN ('COMPLETED', 'FAILED') AND s.lock_version = c.v
RETURNING s.idempotency_key, s.user_id`

// heartbeatGrouped extends one lease through the heartbeat group.
func (s *Store) heartbeatGrouped(ctx context.Context, l idempotency.Lease, secs float64) error {
	h := &pendingHeartbeat{member: member{ctx: ctx, done: make(chan struct{})},
		key: l.Key, scope: l.Scope, version: l.Version, secs: secs}
	alone := func() error {
		return fenced(ctx, s.pool, "heartbeat", heartbeatSQL, l.Key, l.Scope, l.Version, secs)
	}
	if s.heartbeats.join(h) {
		defer s.heartbeats.leave()
		return alone()
	}
	if err := s.heartbeats.wait(h); err != nil {
		return translate("heartbeat", err)
	}
	switch {
	case h.err != nil:
		return translate("heartbeat", h.err)
	case h.alone, h.unknown:
		return alone()
	case !h.matched:
		return idempotency.ErrLeaseLost
	}
	return nil
}

// flushHeartbeats sends one group of heartbeats.
func (s *Store) flushHeartbeats(batch []*pendingHeartbeat) {
	defer func() {
		for _, h := range batch {
			h.finish()
		}
	}()
	byKey := make(map[scopedKey]*pendingHeartbeat, len(batch))
	var keys, scopes []string
	var versions []int64
	var secs []float64
	for _, h := range batch {
		k := scopedKey{h.scope, h.key}
		if _, dup := byKey[k]; dup {
			h.alone = true
			continue
		}
		byKey[k] = h
		keys, scopes = append(keys, h.key), append(scopes, h.scope)
		versions, secs = append(versions, h.version), append(secs, h.secs)
	}
	var k scopedKey
	outcome, _ := s.sendGroup(batch[0].ctx, heartbeatGroupSQL, []any{keys, scopes, versions, secs}, func(rows pgx.Rows) error {
		if err := rows.Scan(&k.key, &k.scope); err != nil {
			return err
		}
		if h := byKey[k]; h != nil {
			h.matched = true
		}
		return nil
	})
	for _, h := range byKey {
		switch outcome {
		case groupRolledBack:
			h.alone, h.matched = true, false
		case groupUnknown:
			h.unknown, h.matched = true, false
		}
	}
	s.record(batch[0].ctx, "heartbeat", len(byKey), outcome)
}
