package pgstore

import (
	"context"

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

func (h *pendingHeartbeat) fencedRow() (scopedKey, *bool) {
	return scopedKey{h.scope, h.key}, &h.matched
}

// heartbeatGrouped extends one lease through the heartbeat group.
func (s *Store) heartbeatGrouped(ctx context.Context, l idempotency.Lease, secs float64) error {
	if s.heartbeats.lead() {
		defer s.heartbeats.leave()
		return fenced(ctx, s.pool, "heartbeat", heartbeatSQL, l.Key, l.Scope, l.Version, secs)
	}
	h := &pendingHeartbeat{member: member{ctx: ctx, done: make(chan struct{})},
		key: l.Key, scope: l.Scope, version: l.Version, secs: secs}
	alone := func() error {
		return fenced(ctx, s.pool, "heartbeat", heartbeatSQL, l.Key, l.Scope, l.Version, secs)
	}
	return joinFenced(s.heartbeats, h, "heartbeat", alone, alone)
}

// flushHeartbeats sends one group of heartbeats.
func (s *Store) flushHeartbeats(batch []*pendingHeartbeat) {
	flushFenced(s, "heartbeat", heartbeatGroupSQL, batch, func(rows []*pendingHeartbeat) []any {
		keys, scopes := make([]string, len(rows)), make([]string, len(rows))
		versions, secs := make([]int64, len(rows)), make([]float64, len(rows))
		for i, h := range rows {
			keys[i], scopes[i], versions[i], secs[i] = h.key, h.scope, h.version, h.secs
		}
		return []any{keys, scopes, versions, secs}
	})
}
