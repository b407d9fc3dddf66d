package pgstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/payonce/payonce/idempotency"
)

// Group commit (on unless Config.NoGroupCommit).
//
// A claim of a new key and a completion each cost one autocommit statement,
// hence one commit, which waits for a WAL flush. When many goroutines of one
// process claim and complete at once, the store sends what is waiting as
// one statement of many rows in one short transaction: one round trip, one
// plan, one commit and one WAL flush for the whole group, where the server
// would otherwise parse, plan, execute and commit each of them (the way
// job queues complete jobs in batches). Nothing else changes:
//
//   - A caller returns only after the transaction that holds its row has
//     committed: a claim is durable before the action runs, an outcome is
//     durable before Do returns.
//   - A caller that finds a flight free and nobody waiting runs its own
//     statement at once, the same statement as without group commit: a
//     lone caller pays nothing and waits for nobody.
//   - At most maxFlights (one) statements of a kind are in flight at once;
//     the callers that arrive meanwhile wait and go together in the next
//     one. A group of one runs its caller's own statement.
//   - A group's transaction sets a short lock_timeout: a row held by a
//     longer transaction (a DoTx claiming the same key, a FenceTx) makes
//     it fail and roll back instead of holding everybody up, and then each
//     caller of the group runs its own statement, as without group commit.
//     Any other error the server reports rolls the group back too, and each
//     caller runs alone: one caller's bad row never fails the others.
//   - An error that leaves the outcome unknown (the connection broke) is
//     each caller's error, as it would be for its own statement.
//   - A caller queued for longer than groupStall starts one more flight:
//     a flight held by a caller that waits for a row lock (running alone,
//     with no lock timeout) holds up nobody else for long.
//   - A caller whose context ends while it waits returns at once; its row
//     is left out of a group that has not started yet. A group already in
//     flight may still commit it, as a statement cancelled too late does:
//     a claim is then a lease nobody holds, which runs out and is
//     reclaimed; a completion is stored.

// groupLockTimeout bounds how long a group's statement waits for a row
// lock before it gives up and its callers run alone.
const groupLockTimeout = "50ms"

// groupMaxRows bounds the rows of one group statement.
const groupMaxRows = 256

// groupStall is how long a caller waits for a flight before it starts one
// more: a flight held by a statement that waits for a row lock (a caller
// running alone) must not hold up the callers queued behind it.
const groupStall = 50 * time.Millisecond

// groupTimeout bounds one group's round trip when no caller is left to
// wait for it.
const groupTimeout = time.Minute

// member is one caller's part of a group.
type member struct {
	ctx  context.Context
	done chan struct{}
	// alone: the group committed nothing for this caller (it was rolled
	// back, or the caller shared its key with an earlier member); the
	// caller runs its own statement.
	alone bool
	err   error
}

func (m *member) finish() { close(m.done) }

func (m *member) base() *member { return m }

// groupMember is what a grouper gathers: a pointer to a struct that embeds
// member.
type groupMember interface {
	comparable
	base() *member
}

// grouper gathers the callers of one kind of statement.
type grouper[M groupMember] struct {
	maxFlights int
	stall      time.Duration // groupStall
	flush      func(batch []M)

	mu      sync.Mutex
	queue   []M
	flights int
}

// join either gives the caller a flight of its own (true: run the
// statement now, then call leave) or queues it for the next group (false:
// wait on its member).
func (g *grouper[M]) join(m M) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.flights < g.maxFlights && len(g.queue) == 0 {
		g.flights++
		return true
	}
	g.queue = append(g.queue, m)
	return false
}

// leave ends a flight: when callers are waiting, the flight goes on in the
// background with them as a group, so that the caller who held it returns
// now.
func (g *grouper[M]) leave() {
	g.mu.Lock()
	waiting := len(g.queue) > 0
	if !waiting {
		g.flights--
	}
	g.mu.Unlock()
	if waiting {
		go g.drain()
	}
}

// wait waits until the member's group finished or its context ended. A
// member still queued after groupStall starts one more flight.
func (g *grouper[M]) wait(m M) error {
	b := m.base()
	stall := time.NewTimer(g.stall)
	defer stall.Stop()
	for {
		select {
		case <-b.done:
			return nil
		case <-b.ctx.Done():
			return b.ctx.Err()
		case <-stall.C:
			g.mu.Lock()
			queued := slices.Contains(g.queue, m)
			if queued {
				g.flights++
			}
			g.mu.Unlock()
			if queued {
				go g.drain()
			}
		}
	}
}

// drain sends groups until nobody waits, then ends its flight.
func (g *grouper[M]) drain() {
	for {
		g.mu.Lock()
		if len(g.queue) == 0 {
			g.flights--
			g.mu.Unlock()
			return
		}
		n := min(len(g.queue), groupMaxRows)
		batch := make([]M, 0, n)
		for _, m := range g.queue[:n] {
			if b := m.base(); b.ctx.Err() != nil {
				b.err = b.ctx.Err()
				b.finish()
				continue
			}
			batch = append(batch, m)
		}
		g.queue = append(g.queue[:0], g.queue[n:]...)
		g.mu.Unlock()
		switch len(batch) {
		case 0:
		case 1:
			b := batch[0].base()
			b.alone = true
			b.finish()
		default:
			g.flush(batch)
		}
	}
}

// sendGroup runs sql in one short transaction with a lock timeout and
// hands each returned row to scan. It reports whether the server refused
// the group (rolled back: its callers run alone) or the error that leaves
// the outcome unknown.
func (s *Store) sendGroup(ctx context.Context, sql string, args []any, scan func(pgx.Rows) error) (rolledBack bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupTimeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SET LOCAL lock_timeout = '" + groupLockTimeout + "'")
	q := b.Queue(sql, args...)
	q.Query(func(rows pgx.Rows) error {
		for rows.Next() {
			if err := scan(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	b.Queue("COMMIT")
	err = s.pool.SendBatch(ctx, b).Close()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return true, nil
	}
	return false, err
}

type scopedKey struct{ scope, key string }

// Group commit's instruments (Config.MeterProvider).
const (
	// MetricGroups counts group statements sent, by kind (claim,
	// complete) and outcome: committed; rolled_back (the server refused
	// the group, typically a row held by a longer transaction past the
	// 50 ms lock timeout, and its callers ran alone); failed (the outcome
	// is unknown, each caller got the error).
	MetricGroups = "idempotency.store_groups"
	// MetricGroupRows counts the rows that committed groups stored, by
	// kind: divided by the committed groups, the mean group size.
	MetricGroupRows = "idempotency.store_group_rows"
)

type groupMetrics struct {
	groups, rows metric.Int64Counter
	// attribute sets, built once: by kind, and by kind and outcome.
	kind    map[string]metric.AddOption
	outcome map[[2]string]metric.AddOption
}

func newGroupMetrics(mp metric.MeterProvider) (groupMetrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/payonce/payonce/idempotency/pgstore")
	var g groupMetrics
	var err error
	if g.groups, err = m.Int64Counter(MetricGroups, metric.WithDescription(
		"Group statements sent by group commit, by kind (claim, complete) and outcome (committed, rolled_back: its callers ran alone; failed: outcome unknown).")); err != nil {
		return g, err
	}
	if g.rows, err = m.Int64Counter(MetricGroupRows, metric.WithDescription(
		"Rows stored by committed group statements, by kind (claim, complete).")); err != nil {
		return g, err
	}
	g.kind, g.outcome = map[string]metric.AddOption{}, map[[2]string]metric.AddOption{}
	for _, k := range []string{"claim", "complete"} {
		g.kind[k] = metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", k)))
		for _, o := range []string{"committed", "rolled_back", "failed"} {
			g.outcome[[2]string{k, o}] = metric.WithAttributeSet(attribute.NewSet(
				attribute.String("kind", k), attribute.String("outcome", o)))
		}
	}
	return g, nil
}

// record counts one group of kind that stored rows (when committed).
func (s *Store) record(ctx context.Context, kind string, rows int, rolledBack bool, err error) {
	outcome := "committed"
	switch {
	case rolledBack:
		outcome = "rolled_back"
	case err != nil:
		outcome = "failed"
	}
	ctx = context.WithoutCancel(ctx)
	s.metrics.groups.Add(ctx, 1, s.metrics.outcome[[2]string{kind, outcome}])
	if outcome == "committed" {
		s.groupedRows.Add(int64(rows))
		s.metrics.rows.Add(ctx, int64(rows), s.metrics.kind[kind])
	}
}

// newClaim is one caller's insert-first claim (claimNewSQL) in a group.
type newClaim struct {
	member
	key, scope, fp string
	lockS, retS    float64
	// Set by the group: inserted with this lock version, or not inserted
	// (the key exists).
	inserted bool
	version  int64
}

// claimNewGroupSQL is claimNewSQL for many keys: the same values per row.
const claimNewGroupSQL = `INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, lock_version, locked_until, expires_at)
SELECT c.k, c.u, c.f, 'PROCESSING', floor(random() * 1073741824)::int,
       now() + make_interval(secs => c.l), now() + make_interval(secs => c.r)
  FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::float8[]) AS c(k, u, f, l, r)
ON CONFLICT (idempotency_key, user_id) DO NOTHING
RETURNING idempotency_key, user_id, lock_version`

// claimNew runs the insert-first claim: the version and true when it
// inserted the key, false when the key exists.
func (s *Store) claimNew(ctx context.Context, db dbtx, pooled bool, p idempotency.ClaimParams, lockS, retS float64) (int64, bool, error) {
	if !pooled || s.claims == nil {
		return claimNewAlone(ctx, db, p.Key, p.Scope, string(p.Fingerprint), lockS, retS)
	}
	c := &newClaim{member: member{ctx: ctx, done: make(chan struct{})},
		key: p.Key, scope: p.Scope, fp: string(p.Fingerprint), lockS: lockS, retS: retS}
	if s.claims.join(c) {
		defer s.claims.leave()
		return claimNewAlone(ctx, db, c.key, c.scope, c.fp, lockS, retS)
	}
	if err := s.claims.wait(c); err != nil {
		return 0, false, translate("claim", err)
	}
	switch {
	case c.err != nil:
		return 0, false, translate("claim", c.err)
	case c.alone:
		return claimNewAlone(ctx, db, c.key, c.scope, c.fp, lockS, retS)
	}
	return c.version, c.inserted, nil
}

func claimNewAlone(ctx context.Context, db dbtx, key, scope, fp string, lockS, retS float64) (int64, bool, error) {
	var v int64
	err := db.QueryRow(ctx, claimNewSQL, key, scope, fp, lockS, retS).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, translate("claim", err)
	}
	return v, true, nil
}

// flushClaims sends one group of new-key claims.
func (s *Store) flushClaims(batch []*newClaim) {
	defer func() {
		for _, c := range batch {
			c.finish()
		}
	}()
	byKey := make(map[scopedKey]*newClaim, len(batch))
	var keys, scopes, fps []string
	var locks, rets []float64
	for _, c := range batch {
		k := scopedKey{c.scope, c.key}
		if _, dup := byKey[k]; dup {
			c.alone = true // its own statement sees the earlier member's row
			continue
		}
		byKey[k] = c
		keys, scopes, fps = append(keys, c.key), append(scopes, c.scope), append(fps, c.fp)
		locks, rets = append(locks, c.lockS), append(rets, c.retS)
	}
	var k scopedKey
	var v int64
	rolledBack, err := s.sendGroup(batch[0].ctx, claimNewGroupSQL, []any{keys, scopes, fps, locks, rets}, func(rows pgx.Rows) error {
		if err := rows.Scan(&k.key, &k.scope, &v); err != nil {
			return err
		}
		if c := byKey[k]; c != nil {
			c.inserted, c.version = true, v
		}
		return nil
	})
	for _, c := range byKey {
		switch {
		case rolledBack:
			c.alone, c.inserted = true, false
		case err != nil:
			c.err = err
		}
	}
	s.record(batch[0].ctx, "claim", len(byKey), rolledBack, err)
}

// pendingCompletion is one caller's completion in a group.
type pendingCompletion struct {
	member
	completionRow
	matched bool
}

// completeGroupSQL is completeSQL for many leases: each row is updated for
// the holder of its lock version only.
const completeGroupSQL = `UPDATE idempotency_store AS s
   SET status = c.st, response_code = c.code, response_body = c.meta::jsonb, response_raw = c.body,
       locked_until = NULL, completed_at = now(),
       expires_at = now() + make_interval(secs => c.r)
  FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::int4[], $6::text[], $7::bytea[], $8::float8[])
       AS c(k, u, v, st, code, meta, body, r)
 WHERE s.idempotency_key = c.k AND s.user_id = c.u
   AND s.status = 'PROCESSING' AND s.lock_version = c.v
RETURNING s.idempotency_key, s.user_id`

// completeGrouped stores one outcome through the completion group.
func (s *Store) completeGrouped(ctx context.Context, row completionRow) error {
	c := &pendingCompletion{member: member{ctx: ctx, done: make(chan struct{})}, completionRow: row}
	if s.completions.join(c) {
		defer s.completions.leave()
		return fenced(ctx, s.pool, "complete", completeSQL, row.args()...)
	}
	if err := s.completions.wait(c); err != nil {
		return translate("complete", err)
	}
	switch {
	case c.err != nil:
		return translate("complete", c.err)
	case c.alone:
		return fenced(ctx, s.pool, "complete", completeSQL, row.args()...)
	case !c.matched:
		return idempotency.ErrLeaseLost
	}
	return nil
}

// flushCompletions sends one group of completions.
func (s *Store) flushCompletions(batch []*pendingCompletion) {
	defer func() {
		for _, c := range batch {
			c.finish()
		}
	}()
	byKey := make(map[scopedKey]*pendingCompletion, len(batch))
	var keys, scopes, statuses []string
	var versions []int64
	var codes []int32
	var metas []*string
	var bodies [][]byte
	var rets []float64
	for _, c := range batch {
		k := scopedKey{c.scope, c.key}
		if _, dup := byKey[k]; dup {
			c.alone = true
			continue
		}
		byKey[k] = c
		keys, scopes, versions = append(keys, c.key), append(scopes, c.scope), append(versions, c.version)
		statuses, codes, metas = append(statuses, c.status), append(codes, c.code), append(metas, c.meta)
		bodies, rets = append(bodies, c.body), append(rets, c.retS)
	}
	var k scopedKey
	rolledBack, err := s.sendGroup(batch[0].ctx, completeGroupSQL,
		[]any{keys, scopes, versions, statuses, codes, metas, bodies, rets}, func(rows pgx.Rows) error {
			if err := rows.Scan(&k.key, &k.scope); err != nil {
				return err
			}
			if c := byKey[k]; c != nil {
				c.matched = true
			}
			return nil
		})
	for _, c := range byKey {
		switch {
		case rolledBack:
			c.alone, c.matched = true, false
		case err != nil:
			c.err = err
		}
	}
	s.record(batch[0].ctx, "complete", len(byKey), rolledBack, err)
}
