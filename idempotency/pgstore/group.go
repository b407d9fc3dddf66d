package pgstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
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
//   - While the store's statements in flight (claims and completions
//     together) are fewer than the pool's connections, a caller also runs
//     its own statement at once: callers are then no more than
//     connections, the server's own group commit (one WAL flush for the
//     commits that wait together) already shares the flush, and queueing
//     behind a flight would only add its round trip to the caller's.
//     Measured at 8 callers on 8 connections in interleaved pairs: groups
//     gave a median of 0.77 (0.62-1.33, five pairs, loaded machine) and
//     1.07 (0.97-1.16, three pairs, calmer) of the throughput of the same
//     statements sent alone (BENCHMARKS.md).
//   - Otherwise at most maxFlights (one) statements of a kind are in flight
//     at once; the callers that arrive meanwhile wait and go together in
//     the next one. A group of one runs its caller's own statement.
//   - A group's transaction sets a short lock_timeout: a row held by a
//     longer transaction (a DoTx claiming the same key, a FenceTx) makes
//     it fail and roll back instead of holding everybody up, and then each
//     caller of the group runs its own statement, as without group commit.
//     Any other error the server reports for a statement before the COMMIT
//     rolls the group back too, and each caller runs alone: one caller's
//     bad row never fails the others. The group's connection is rolled
//     back and returned to the pool, not closed: a hot key that makes many
//     groups roll back costs no reconnection (and, behind PgBouncer, no
//     new server connection).
//   - An error that may have come after the commit leaves the group's
//     outcome unknown: the connection broke, the server was shut down or
//     terminated the session (SQLSTATE classes 08, 57, 58, XX, or any
//     FATAL; a session terminated while its COMMIT waits for a synchronous
//     standby has committed), or the COMMIT itself failed. Each caller then
//     resolves its own row instead of taking the group for rolled back: a
//     claim recognises the record the group may have inserted for it by
//     the lock version it was to get, a completion recognises its outcome
//     stored under its lease; otherwise each runs its own statement.
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
	// unknown: the group may or may not have committed; the caller
	// resolves its own row.
	unknown bool
	err     error
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
	// inFlight counts the flights of every grouper of the store; below
	// conns, a caller runs its own statement whatever is in flight of its
	// kind. conns 0: never.
	inFlight *atomic.Int64
	conns    int64

	mu      sync.Mutex
	queue   []M
	flights int
}

// addFlight counts n more flights (g.mu held).
func (g *grouper[M]) addFlight(n int) {
	g.flights += n
	g.inFlight.Add(int64(n))
}

// lead gives the caller a flight of its own when one is free and nobody
// waits (true: run the statement now, then call leave), without a member:
// the common case at low concurrency allocates nothing for the group.
// Otherwise the caller builds its member and calls join.
func (g *grouper[M]) lead() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.leadLocked()
}

func (g *grouper[M]) leadLocked() bool {
	if len(g.queue) == 0 && (g.flights < g.maxFlights || g.inFlight.Load() < g.conns) {
		g.addFlight(1)
		return true
	}
	return false
}

// join either gives the caller a flight of its own (true: run the
// statement now, then call leave) or queues it for the next group (false:
// wait on its member).
func (g *grouper[M]) join(m M) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leadLocked() {
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
		g.addFlight(-1)
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
				g.addFlight(1)
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
			g.addFlight(-1)
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

// groupOutcome is what became of a group's transaction.
type groupOutcome int

const (
	groupCommitted groupOutcome = iota
	// groupRolledBack: nothing of the group committed; its callers run
	// their own statements.
	groupRolledBack
	// groupUnknown: the group may have committed; its callers resolve
	// their own rows.
	groupUnknown
)

// sendGroup runs sql in one short transaction with a lock timeout, on a
// connection of its own, and hands each returned row to scan. It reports
// whether the group committed, was rolled back (the server refused a
// statement before the COMMIT: its callers run alone) or may have
// committed (see groupFailure), with the error in the last two cases. A
// connection left inside the failed transaction is rolled back before it
// goes back to the pool, so that the pool keeps it.
func (s *Store) sendGroup(ctx context.Context, sql string, args []any, scan func(pgx.Rows) error) (groupOutcome, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupTimeout)
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return groupRolledBack, err // nothing was sent
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SET LOCAL lock_timeout = '" + groupLockTimeout + "'")
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	br := conn.SendBatch(ctx, b)
	// The statements are pipelined: the server runs the COMMIT whatever
	// the client makes of the answers before it, so only the server's
	// refusal of an earlier statement proves that nothing committed.
	atCommit := false
	err = func() error {
		for range 2 { // BEGIN, SET LOCAL
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				atCommit = true // the server goes on to the COMMIT
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		atCommit = true
		_, err = br.Exec()
		return err
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		return groupCommitted, nil
	}
	if pc := conn.Conn().PgConn(); !pc.IsClosed() && pc.TxStatus() != 'I' {
		// Still in the failed transaction: end it here, so that the pool
		// keeps the connection (it closes one returned inside a
		// transaction). If this fails, the pool closes it.
		_, _ = conn.Exec(ctx, "ROLLBACK")
	}
	if groupFailure(err, atCommit) {
		return groupUnknown, err
	}
	return groupRolledBack, err
}

// groupFailure reports whether err, met by a group's transaction, leaves
// its outcome unknown. Only the server's refusal of a statement before the
// COMMIT proves that nothing committed, and not every refusal: a session
// that the server ends (a FATAL, operator intervention such as
// pg_terminate_backend or a shutdown: class 57) or whose connection breaks
// (class 08), or a server in trouble (classes 58 and XX), may report it
// after the commit, for instance while the COMMIT waited for a synchronous
// standby. An error that provably never reached the server leaves nothing
// to resolve.
func groupFailure(err error, atCommit bool) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return !pgconn.SafeToRetry(err)
	}
	if atCommit {
		return true
	}
	severity := pgErr.SeverityUnlocalized
	if severity == "" {
		severity = pgErr.Severity
	}
	switch severity {
	case "FATAL", "PANIC":
		return true
	}
	code := pgErr.Code
	return pgerrcode.IsConnectionException(code) || pgerrcode.IsOperatorIntervention(code) ||
		pgerrcode.IsSystemError(code) || pgerrcode.IsInternalError(code)
}

type scopedKey struct{ scope, key string }

// Group commit's instruments (Config.MeterProvider).
const (
	// MetricGroups counts group statements sent, by kind (claim,
	// complete, heartbeat) and outcome: committed; rolled_back (the server refused
	// the group, typically a row held by a longer transaction past the
	// 50 ms lock timeout, and its callers ran alone); failed (the outcome
	// was unknown: the connection broke or the server ended the session,
	// perhaps after the commit; each caller resolved its own row).
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
		"Group statements sent by group commit, by kind (claim, complete, heartbeat) and outcome (committed, rolled_back: its callers ran alone; failed: outcome unknown, its callers resolved their rows).")); err != nil {
		return g, err
	}
	if g.rows, err = m.Int64Counter(MetricGroupRows, metric.WithDescription(
		"Rows stored by committed group statements, by kind (claim, complete, heartbeat).")); err != nil {
		return g, err
	}
	g.kind, g.outcome = map[string]metric.AddOption{}, map[[2]string]metric.AddOption{}
	for _, k := range []string{"claim", "complete", "heartbeat"} {
		g.kind[k] = metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", k)))
		for _, o := range []string{"committed", "rolled_back", "failed"} {
			g.outcome[[2]string{k, o}] = metric.WithAttributeSet(attribute.NewSet(
				attribute.String("kind", k), attribute.String("outcome", o)))
		}
	}
	return g, nil
}

// record counts one group of kind that stored rows (when committed).
func (s *Store) record(ctx context.Context, kind string, rows int, o groupOutcome) {
	outcome := "committed"
	switch o {
	case groupRolledBack:
		outcome = "rolled_back"
	case groupUnknown:
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
	key, scope, fp       string
	lockS, retS, refuseS float64
	// try is the lock version the group inserts the key with, drawn like
	// claimNewSQL's (below 2^30): a record found at it after a group of
	// unknown outcome is this caller's claim.
	try int64
	// Set by the group: inserted (at version try), or not inserted (the
	// key exists).
	inserted bool
}

// claimNewGroupSQL is claimNewSQL for many keys: the same values per row,
// but for the initial lock version, which each caller draws.
const claimNewGroupSQL = `INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, lock_version, locked_until, expires_at, refuse_for, holder_instance, holder_incarnation)
SELECT c.k, c.u, c.f, 'PROCESSING', c.v,
       now() + make_interval(secs => c.l), now() + make_interval(secs => c.r), make_interval(secs => nullif(c.h, 0)), nullif($8::text, ''), $9::int8
  FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::float8[], $6::int8[], $7::float8[]) AS c(k, u, f, l, r, v, h)
ON CONFLICT (idempotency_key, user_id) DO NOTHING
RETURNING idempotency_key, user_id`

// newKey is what the insert-first half of a claim found.
type newKey int

const (
	keyExists   newKey = iota // not inserted: the key exists
	keyInserted               // inserted at the version returned
	// keyUnknown: a group that may have inserted the key at the version
	// returned ended in an unknown outcome; the claim reads the key and a
	// PROCESSING record at that version is its own.
	keyUnknown
)

// claimNew runs the insert-first claim.
func (s *Store) claimNew(ctx context.Context, db dbtx, pooled bool, p idempotency.ClaimParams, lockS, retS, refuseS float64) (int64, newKey, error) {
	if !pooled || s.claims == nil {
		return s.claimNewAlone(ctx, db, p.Key, p.Scope, string(p.Fingerprint), lockS, retS, refuseS)
	}
	if s.claims.lead() {
		defer s.claims.leave()
		return s.claimNewAlone(ctx, db, p.Key, p.Scope, string(p.Fingerprint), lockS, retS, refuseS)
	}
	c := &newClaim{member: member{ctx: ctx, done: make(chan struct{})},
		key: p.Key, scope: p.Scope, fp: string(p.Fingerprint), lockS: lockS, retS: retS, refuseS: refuseS,
		try: rand.Int64N(1 << 30)}
	if s.claims.join(c) {
		defer s.claims.leave()
		return s.claimNewAlone(ctx, db, c.key, c.scope, c.fp, lockS, retS, refuseS)
	}
	if err := s.claims.wait(c); err != nil {
		return 0, keyExists, translate("claim", err)
	}
	switch {
	case c.err != nil:
		return 0, keyExists, translate("claim", c.err)
	case c.unknown:
		return c.try, keyUnknown, nil
	case c.alone:
		return s.claimNewAlone(ctx, db, c.key, c.scope, c.fp, lockS, retS, refuseS)
	case c.inserted:
		return c.try, keyInserted, nil
	}
	return 0, keyExists, nil
}

func (s *Store) claimNewAlone(ctx context.Context, db dbtx, key, scope, fp string, lockS, retS, refuseS float64) (int64, newKey, error) {
	var v versionRow
	err := db.QueryRow(ctx, claimNewSQL, key, scope, fp, s.args.seconds.arg(lockS), s.args.seconds.arg(retS), s.args.seconds.arg(refuseS),
		s.args.instance, s.args.incarnation).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, keyExists, nil
	}
	if err != nil {
		return 0, keyExists, translate("claim", err)
	}
	return int64(v.v), keyInserted, nil
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
	var locks, rets, refuses []float64
	var tries []int64
	for _, c := range batch {
		k := scopedKey{c.scope, c.key}
		if _, dup := byKey[k]; dup {
			c.alone = true // its own statement sees the earlier member's row
			continue
		}
		byKey[k] = c
		keys, scopes, fps = append(keys, c.key), append(scopes, c.scope), append(fps, c.fp)
		locks, rets, tries = append(locks, c.lockS), append(rets, c.retS), append(tries, c.try)
		refuses = append(refuses, c.refuseS)
	}
	var k scopedKey
	outcome, _ := s.sendGroup(batch[0].ctx, claimNewGroupSQL, []any{keys, scopes, fps, locks, rets, tries, refuses, s.instance, s.incarnation}, func(rows pgx.Rows) error {
		if err := rows.Scan(&k.key, &k.scope); err != nil {
			return err
		}
		if c := byKey[k]; c != nil {
			c.inserted = true
		}
		return nil
	})
	for _, c := range byKey {
		switch outcome {
		case groupRolledBack:
			c.alone, c.inserted = true, false
		case groupUnknown:
			c.unknown, c.inserted = true, false
		}
	}
	s.record(batch[0].ctx, "claim", len(byKey), outcome)
}

// pendingCompletion is one caller's completion in a group.
type pendingCompletion struct {
	member
	completionRow
	matched bool
}

func (c *pendingCompletion) fencedRow() (scopedKey, *bool) {
	return scopedKey{c.scope, c.key}, &c.matched
}

// completeGroupSQL is completeSQL for many leases: each row is updated for
// the holder of its lock version only. Its condition on the status is
// completeSQL's, for the same reason (the primary key, not the orphan-lock
// index).
const completeGroupSQL = `UPDATE idempotency_store AS s
   SET status = c.st, response_code = c.code, response_body = c.meta::jsonb, response_raw = c.body,
       locked_until = NULL, completed_at = now(),
       expires_at = now() + make_interval(secs => c.r)
  FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::int4[], $6::text[], $7::bytea[], $8::float8[])
       AS c(k, u, v, st, code, meta, body, r)
 WHERE s.idempotency_key = c.k AND s.user_id = c.u
   AND s.status NOT IN ('COMPLETED', 'FAILED') AND s.lock_version = c.v
RETURNING s.idempotency_key, s.user_id`

// completeGrouped stores one outcome through the completion group.
func (s *Store) completeGrouped(ctx context.Context, row completionRow) error {
	if s.completions.lead() {
		defer s.completions.leave()
		return fenced(ctx, boundedPool{s.pool}, "complete", completeSQL, row.args()...)
	}
	c := &pendingCompletion{member: member{ctx: ctx, done: make(chan struct{})}, completionRow: row}
	return joinFenced(s.completions, c, "complete",
		func() error { return fenced(ctx, boundedPool{s.pool}, "complete", completeSQL, row.args()...) },
		func() error { return s.completeAfterUnknown(ctx, row) })
}

// outcomeVersionSQL reads whether a record is finished, and at which lock
// version.
const outcomeVersionSQL = `SELECT status <> 'PROCESSING', lock_version FROM idempotency_store
 WHERE idempotency_key = $1 AND user_id = $2`

// completeAfterUnknown stores an outcome whose group may have stored it
// already: the caller's own statement, and when that finds the lease lost,
// a record finished at the lease's version holds this outcome (only the
// lease's holder finishes a record at its version, and nothing but a new
// lease changes the version).
func (s *Store) completeAfterUnknown(ctx context.Context, row completionRow) error {
	err := fenced(ctx, s.pool, "complete", completeSQL, row.args()...)
	if !errors.Is(err, idempotency.ErrLeaseLost) {
		return err
	}
	var finished bool
	var v int64
	switch rerr := s.pool.QueryRow(ctx, outcomeVersionSQL, row.key, row.scope).Scan(&finished, &v); {
	case errors.Is(rerr, pgx.ErrNoRows):
		return idempotency.ErrLeaseLost
	case rerr != nil:
		return translate("complete", rerr)
	case finished && v == row.version:
		return nil
	}
	return idempotency.ErrLeaseLost
}

// flushCompletions sends one group of completions.
func (s *Store) flushCompletions(batch []*pendingCompletion) {
	flushFenced(s, "complete", completeGroupSQL, batch, func(rows []*pendingCompletion) []any {
		keys, scopes, statuses := make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows))
		versions, codes := make([]int64, len(rows)), make([]int32, len(rows))
		metas, bodies, rets := make([]*string, len(rows)), make([][]byte, len(rows)), make([]float64, len(rows))
		for i, c := range rows {
			keys[i], scopes[i], versions[i] = c.key, c.scope, c.version
			statuses[i], codes[i], metas[i] = c.status, c.code, c.meta
			bodies[i], rets[i] = c.body, c.retS
		}
		return []any{keys, scopes, versions, statuses, codes, metas, bodies, rets}
	})
}
