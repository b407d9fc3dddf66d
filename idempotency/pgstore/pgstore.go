package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/migrations"
)

// Store is the idempotency store on PostgreSQL. It is safe for concurrent
// use. Create it with [New] over a pool whose database was migrated with
// package migrations.
type Store struct {
	pool     *pgxpool.Pool
	strategy ClaimStrategy
	keyring  *idempotency.Keyring
	// lastMeta is the response metadata decoded last (decodeStored).
	lastMeta atomic.Pointer[decodedMeta]
	// hits is an exponentially weighted share, in 1/1024ths, of recent
	// claims that found an existing record (ClaimAdaptive).
	hits atomic.Int64
	// claims and completions gather concurrent callers into one statement
	// (group commit); nil with Config.NoGroupCommit.
	claims      *grouper[*newClaim]
	completions *grouper[*pendingCompletion]
	heartbeats  *grouper[*pendingHeartbeat]
	// flights counts the claims', completions' and heartbeats' statements
	// in flight (group.go).
	flights atomic.Int64
	// groupedRows counts the rows that group statements committed.
	groupedRows atomic.Int64
	metrics     groupMetrics
	// pooler and listenConfig decide where WatchChanges listens.
	pooler       Pooler
	listenConfig *pgx.ConnConfig
	// instance is Config.Instance ("" for none) and incarnation this
	// process's id (0 without an instance): every lease the store takes
	// carries both (see Config.Instance).
	instance    string
	incarnation int64
	// args holds the arguments above, and the seconds of recent calls,
	// boxed once (args.go).
	args boxedArgs
	// released is how many leases of earlier incarnations New ended.
	released int
}

var (
	_ idempotency.Store     = (*Store)(nil)
	_ idempotency.Sizer     = (*Store)(nil)
	_ idempotency.Abandoner = (*Store)(nil)
	_ idempotency.Sealer    = (*Store)(nil)
)

// ClaimStrategy chooses how a claim reaches the database. Every strategy
// gives the same answers under any concurrency; they differ only in cost.
type ClaimStrategy int

const (
	// ClaimAdaptive inserts first while most recent claims are new keys
	// (the usual traffic): a plain INSERT ... ON CONFLICT DO NOTHING, and
	// ClaimOneStatement's statement only when the key exists; and it uses
	// ClaimReadFirst while most claims find an existing record (a retry
	// storm). Claims that refuse foreign keys always use ClaimOneStatement's
	// statement in the first case. The default.
	ClaimAdaptive ClaimStrategy = iota
	// ClaimOneStatement claims with one statement that reads the key and
	// inserts it when absent: one round trip for every common path. A
	// replay writes nothing, but the statement carries an INSERT, which
	// PostgreSQL prepares even when it inserts no row: a replay costs about
	// 1.5 times a plain read.
	ClaimOneStatement
	// ClaimReadFirst reads the key with a plain primary-key SELECT and
	// runs the one-statement claim only when it finds nothing: a replay
	// costs a read, a new key costs one more round trip.
	ClaimReadFirst
)

// Config configures a Store. The zero value (or nil) means defaults.
type Config struct {
	// ClaimStrategy: ClaimAdaptive (default), ClaimOneStatement or
	// ClaimReadFirst.
	ClaimStrategy ClaimStrategy
	// Keyring, when set, seals every stored response (headers and body)
	// with AES-256-GCM under its current key, and opens them on replay,
	// on every path: Complete, CompleteTx, the Executor's Do, DoTx and
	// WithTx (see idempotency.Encrypted for the format and rotation).
	// Default nil: responses are stored as they are.
	Keyring *idempotency.Keyring
	// Pooler says what is between the pool and PostgreSQL:
	// DirectConnection (default) or TransactionPooler (PgBouncer in
	// transaction mode), which New checks the pool is configured for.
	Pooler Pooler
	// NoGroupCommit turns group commit off. By default, the new-key
	// claims, the completions and the heartbeats that callers of this
	// Store make while one of the same kind is in flight wait for it and
	// then go together: one statement, one transaction and one commit per
	// group instead of one each. Each caller still returns only once its own row is durable; a
	// caller that finds nothing in flight runs its own statement at once,
	// exactly as without group commit, and so does any caller while the
	// store's statements in flight are fewer than the pool's connections:
	// groups form only while callers outnumber connections. A group never waits behind a row held by a
	// longer transaction (see the package doc). Group commit lifts
	// throughput when callers outnumber the pool's connections
	// (BENCHMARKS.md) and costs nothing measurable otherwise.
	NoGroupCommit bool
	// ListenConfig is the connection on which the replay caches of
	// executors over this store listen for changes to finished records
	// (see [Store.WatchChanges]; one connection per executor with an
	// idempotency.ReplayCache): a PostgreSQL session, made with
	// pgx.ParseConfig, never through a transaction pooler. Default: the
	// pool's own configuration, unless Pooler is TransactionPooler; then
	// the store reports no changes, and replay caches over it fall back
	// to their MaxAge.
	ListenConfig *pgx.ConnConfig
	// Instance is the stable name of this process among the processes
	// that share the database, the one its supervisor restarts it under:
	// a StatefulSet pod's name, a systemd unit instance (worker@3), a
	// fixed worker slot. Conventionally read from the environment
	// variable PAYONCE_INSTANCE (see [InstanceEnv]). Every lease the
	// store takes records it, with a random id of this process's
	// incarnation; New then ends at once the live leases of earlier
	// incarnations of the same name (processes that crashed or were
	// killed mid-action), so that a retry finishes their keys as soon as
	// the instance is back, instead of after the lease (see "Recovery
	// after a crash" in the package doc). Two live processes must never
	// share a name: the second to start would end the first's leases, and
	// a retry could then run an action the first is still running (its
	// outcome is still refused by fencing). Stores of one process share
	// its incarnation, so a second store under the same name ends nothing
	// of the first's. At most 128 bytes of letters, digits and . _ - : @ /.
	// Default "": leases record no holder, and a crashed holder's keys
	// wait for its leases to run out (the executor's LockTimeout).
	Instance string
	// MeterProvider receives group commit's instruments:
	// idempotency.store_groups (groups sent, by kind and outcome) and
	// idempotency.store_group_rows (rows committed in groups, by kind).
	// Default: no metrics.
	MeterProvider metric.MeterProvider
}

// New returns a Store over pool. A nil cfg means defaults. It returns an
// *idempotency.InvalidError naming a bad field.
//
// New checks, with one query, that pool's schema has every version of
// the idempotency line (package migrations): a missing or older schema
// gets a *migrations.NotMigratedError (errors.Is(err,
// migrations.ErrNotMigrated)) that names the versions missing and how to
// apply them: `payonce migrate up`, or migrations.MigrateLines(ctx, pool,
// migrations.LineIdempotency). An unreachable database gets the
// database's error, after at most 30 seconds.
//
// With Config.Instance set, New also ends the live leases that earlier
// incarnations of that instance hold (one statement, bounded like the
// check; see [Store.ReleasedAtStart]).
func New(pool *pgxpool.Pool, cfg *Config) (*Store, error) {
	if pool == nil {
		return nil, &idempotency.InvalidError{Field: "pool", Reason: "nil"}
	}
	s := &Store{pool: pool}
	if cfg != nil {
		s.strategy, s.keyring = cfg.ClaimStrategy, cfg.Keyring
	}
	if s.strategy < ClaimAdaptive || s.strategy > ClaimReadFirst {
		return nil, &idempotency.InvalidError{Field: "Config.ClaimStrategy", Reason: fmt.Sprintf("unknown strategy %d", s.strategy)}
	}
	if cfg != nil {
		if err := checkPooler(cfg.Pooler, pool); err != nil {
			return nil, err
		}
		s.pooler, s.listenConfig = cfg.Pooler, listenConfigOf(cfg)
	}
	var mp metric.MeterProvider
	if cfg != nil {
		mp = cfg.MeterProvider
	}
	var err error
	if s.metrics, err = newGroupMetrics(mp); err != nil {
		return nil, err
	}
	if cfg != nil && cfg.Instance != "" {
		if err := validateInstance(cfg.Instance); err != nil {
			return nil, err
		}
		s.instance, s.incarnation = cfg.Instance, processIncarnation()
	}
	s.args = newBoxedArgs(s.instance, s.incarnation)
	if err := checkLines(pool, migrations.LineIdempotency); err != nil {
		return nil, fmt.Errorf("pgstore.New: %w", err)
	}
	if s.instance != "" {
		if s.released, err = s.releaseHeld(); err != nil {
			return nil, err
		}
	}
	if cfg == nil || !cfg.NoGroupCommit {
		// Callers run their own statements while the store's flights are
		// fewer than the pool's connections (see group.go).
		conns := int64(pool.Config().MaxConns)
		s.claims = &grouper[*newClaim]{maxFlights: 1, stall: groupStall, flush: s.flushClaims,
			inFlight: &s.flights, conns: conns}
		s.completions = &grouper[*pendingCompletion]{maxFlights: 1, stall: groupStall, flush: s.flushCompletions,
			inFlight: &s.flights, conns: conns}
		s.heartbeats = &grouper[*pendingHeartbeat]{maxFlights: 1, stall: groupStall, flush: s.flushHeartbeats,
			inFlight: &s.flights, conns: conns}
	}
	return s, nil
}

// schemaCheckTimeout bounds the schema check of New.
const schemaCheckTimeout = 30 * time.Second

// checkLines refuses a schema without lines, once, at construction: a
// missing table would otherwise surface on the first claim as `relation
// "idempotency_store" does not exist`, and missing triggers not at all.
func checkLines(pool *pgxpool.Pool, lines ...migrations.Line) error {
	ctx, cancel := context.WithTimeout(context.Background(), schemaCheckTimeout)
	defer cancel()
	return migrations.Check(ctx, pool, lines...)
}

// Seals reports whether the store seals responses (Config.Keyring): an
// executor's replay cache then keeps nothing of it.
func (s *Store) Seals() bool { return s.keyring != nil }

// readFirst says whether the next claim reads first.
func (s *Store) readFirst() bool {
	switch s.strategy {
	case ClaimReadFirst:
		return true
	case ClaimOneStatement:
		return false
	}
	return s.hits.Load() > 512
}

// observe folds one claim's outcome into the hit share (weight 1/16). Lost
// updates under concurrency only blur an estimate.
func (s *Store) observe(found bool) {
	if s.strategy != ClaimAdaptive {
		return
	}
	h := s.hits.Load()
	var x int64
	if found {
		x = 1024
	}
	s.hits.Store(h + (x-h)/16)
}

// Pool returns the store's pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// dbtx is what both a pool and a transaction offer.
// execer is what fenced needs of a pool, a transaction or boundedPool.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// maxClaimRounds bounds the re-runs of a claim that lost a race (a
// concurrent insert after its snapshot, a compare-and-swap lost to a
// renewal). Each re-run sees a newer committed state, so two are almost
// always enough.
const maxClaimRounds = 8

// Claim implements [idempotency.Store.Claim]. The common paths (new key,
// replay, in progress, mismatch) take one round trip; a reclaim or renewal
// takes a second, a compare-and-swap.
func (s *Store) Claim(ctx context.Context, p idempotency.ClaimParams) (idempotency.Claim, error) {
	return s.claim(ctx, s.pool, true, p)
}

// ClaimTx is Claim inside the caller's transaction. A new record stays
// invisible to others until the transaction commits; a concurrent claim of
// the same key waits for that commit and then sees the outcome.
func (s *Store) ClaimTx(ctx context.Context, tx pgx.Tx, p idempotency.ClaimParams) (idempotency.Claim, error) {
	return s.claim(ctx, tx, false, p)
}

func (s *Store) claim(ctx context.Context, db dbtx, pooled bool, p idempotency.ClaimParams) (idempotency.Claim, error) {
	if err := p.Validate(); err != nil {
		return idempotency.Claim{}, err
	}
	lockS, retS, refuseS := p.LockTimeout.Seconds(), p.Retention.Seconds(), p.RefuseFor().Seconds()
	readFirst := s.readFirst()
	// mine, when set, is the lock version a group of unknown outcome may
	// have inserted the key with for this claim: a PROCESSING record at it
	// is this claim's own.
	var mine *int64
	if !readFirst && s.strategy == ClaimAdaptive && !p.RefuseForeign {
		// Mostly new keys: the lean insert first; a key that exists goes
		// on below (claimSQL reads it).
		v, found, err := s.claimNew(ctx, db, pooled, p, lockS, retS, refuseS)
		if err != nil {
			return idempotency.Claim{}, err
		}
		switch found {
		case keyInserted:
			s.observe(false)
			return idempotency.Claim{State: idempotency.ClaimAcquired,
				Lease: idempotency.Lease{Scope: p.Scope, Key: p.Key, Version: v}}, nil
		case keyUnknown:
			mine = &v
		}
	}
	for round := 0; round < maxClaimRounds; round++ {
		row := new(claimRow) // scanned whole, by its ScanRow (scanrow.go)
		err := pgx.ErrNoRows
		if readFirst {
			err = db.QueryRow(ctx, readSQL, p.Key, p.Scope).Scan(row)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return idempotency.Claim{}, translate("claim", err)
			}
		}
		if errors.Is(err, pgx.ErrNoRows) {
			err = db.QueryRow(ctx, claimSQL, p.Key, p.Scope, string(p.Fingerprint), lockS, retS, p.RefuseForeign, refuseS, s.instance, s.incarnation).Scan(row)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			continue // lost the insert race to a claim that committed after our snapshot
		}
		if err != nil {
			return idempotency.Claim{}, translate("claim", err)
		}
		isNew, fp, status, code, meta, raw, version := row.isNew, row.fp, row.status, row.code, row.meta, row.raw, row.version
		lockedUntil, expiresAt, refuseUntil, dbNow := row.lockedUntil, row.expiresAt, row.refuseUntil, row.dbNow
		if row.isForeign {
			return idempotency.Claim{State: idempotency.ClaimForeign}, nil
		}
		s.observe(!isNew)
		// A tombstone counts as expired even if the database clock went
		// back since the prune made it: it has no response to replay.
		expired := !expiresAt.After(dbNow) || refuseUntil != nil
		lockEnded := lockedUntil == nil || !lockedUntil.After(dbNow)
		lease := idempotency.Lease{Scope: p.Scope, Key: p.Key, Version: version}
		if isNew {
			return idempotency.Claim{State: idempotency.ClaimAcquired, Lease: lease}, nil
		}
		rec := idempotency.Record{Scope: p.Scope, Key: p.Key, Status: idempotency.Status(status), LockVersion: version}
		// An expired record (or tombstone) is never replayed and never
		// blocks: it is replaced or refused whatever its fingerprint.
		if expired && rec.Status != idempotency.StatusProcessing {
			if p.Expired == idempotency.ExpiredRefused {
				return idempotency.Claim{State: idempotency.ClaimExpired}, nil
			}
			var v int64
			err := db.QueryRow(ctx, renewSQL, p.Key, p.Scope, version, string(p.Fingerprint), lockS, retS, refuseS, s.instance, s.incarnation).Scan(&v)
			if errors.Is(err, pgx.ErrNoRows) {
				continue // someone else renewed or pruned it first: look again
			}
			if err != nil {
				return idempotency.Claim{}, translate("renew", err)
			}
			lease.Version = v
			return idempotency.Claim{State: idempotency.ClaimAcquired, Lease: lease}, nil
		}
		if !idempotency.Fingerprint(fp).Equal(p.Fingerprint) {
			return idempotency.Claim{State: idempotency.ClaimMismatch}, nil
		}
		switch rec.Status {
		case idempotency.StatusCompleted, idempotency.StatusFailed:
			resp, err := s.decodeResponse(p.Scope, p.Key, rec.Status, code, meta, raw)
			if err != nil {
				return idempotency.Claim{}, err
			}
			rec.Response, rec.ExpiresAt = &resp, expiresAt
			return idempotency.Claim{State: idempotency.ClaimReplay, Record: rec, StoreNow: dbNow}, nil
		}
		if !lockEnded && mine != nil && version == *mine {
			// The group committed this claim after all.
			return idempotency.Claim{State: idempotency.ClaimAcquired, Lease: lease}, nil
		}
		if !lockEnded {
			return idempotency.Claim{State: idempotency.ClaimInProgress, Record: rec,
				RetryAfter: lockedUntil.Sub(dbNow)}, nil
		}
		var v int64
		err = db.QueryRow(ctx, reclaimSQL, p.Key, p.Scope, version, lockS, s.instance, s.incarnation).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			// Another contender won the compare-and-swap (or finished in
			// the meantime): look again to report its live lease or its
			// outcome.
			continue
		}
		if err != nil {
			return idempotency.Claim{}, translate("reclaim", err)
		}
		lease.Version = v
		return idempotency.Claim{State: idempotency.ClaimReclaimed, Lease: lease}, nil
	}
	return idempotency.Claim{}, fmt.Errorf("pgstore: claim: no stable answer after %d rounds (heavy contention on one key)", maxClaimRounds)
}

// claimRow is a row of claimSQL (all its columns) or readSQL (all but the
// first and the last), scanned into one value: one allocation for the
// row, where a variable per column escaped to the heap one by one.
type claimRow struct {
	isNew, isForeign bool
	fp, status       string
	code             *int32
	meta, raw        []byte
	version          int64
	lockedUntil      *time.Time
	refuseUntil      *time.Time
	expiresAt, dbNow time.Time
	// destBuf holds dest's destinations: pointers into the row itself,
	// so the row and its destinations are one allocation.
	destBuf [12]any
}

// dest returns claimSQL's scan destinations, in its column order.
func (r *claimRow) dest() []any {
	r.destBuf = [12]any{&r.isNew, &r.fp, &r.status, &r.code, &r.meta, &r.raw, &r.version, &r.lockedUntil, &r.expiresAt, &r.refuseUntil, &r.dbNow, &r.isForeign}
	return r.destBuf[:]
}

// responseMeta is what response_body holds: the parts of a response that
// are not its body.
type responseMeta struct {
	Header http.Header `json:"header,omitempty"`
}

// encodeResponse returns the response metadata's JSON, byte for byte what
// json.Marshal(responseMeta{Header: r.Header}) gives, without its
// reflection: every completion encodes its headers, and in the bench's
// claim+complete cycle json.Marshal was about 4 % of the client's CPU.
// Header names and values of plain printable ASCII (most of them) are
// written as they are; any other string goes through json.Marshal.
func encodeResponse(r idempotency.Response) (meta []byte, err error) {
	if len(r.Header) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(r.Header))
	for name := range r.Header {
		names = append(names, name)
	}
	slices.Sort(names)
	b := append(make([]byte, 0, 64), `{"header":{`...)
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendJSONString(b, name); err != nil {
			return nil, err
		}
		b = append(b, ':')
		values := r.Header[name]
		if values == nil {
			b = append(b, "null"...)
			continue
		}
		b = append(b, '[')
		for j, v := range values {
			if j > 0 {
				b = append(b, ',')
			}
			if b, err = appendJSONString(b, v); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	return append(b, "}}"...), nil
}

// appendJSONString appends s as json.Marshal encodes it.
func appendJSONString(b []byte, s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		// json.Marshal escapes control characters, quotes and backslashes, and (for
		// HTML) '<', '>' and '&'; it also rewrites invalid UTF-8.
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, err := json.Marshal(s)
			return append(b, q...), err
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), nil
}

// decodeResponse rebuilds a stored response, opening it when sealed.
func (s *Store) decodeResponse(scope, key string, status idempotency.Status, code *int32, meta, raw []byte) (idempotency.Response, error) {
	r, err := s.decodeStored(code, meta, raw)
	if err != nil || s.keyring == nil {
		return r, err
	}
	return s.keyring.Open(scope, key, status, r)
}

// decodedMeta is one response metadata's JSON and the headers it holds.
type decodedMeta struct {
	json   string
	header http.Header
}

func (s *Store) decodeStored(code *int32, meta, raw []byte) (idempotency.Response, error) {
	var r idempotency.Response
	if code != nil {
		r.Code = int(*code)
	}
	if len(meta) > 0 {
		// Most replays of a service carry the same few headers: the last
		// metadata decoded is kept, and the same bytes get a copy of its
		// headers (a decode costs about ten times the copy).
		if last := s.lastMeta.Load(); last != nil && last.json == string(meta) {
			r.Header = last.header.Clone()
		} else {
			var m responseMeta
			if err := json.Unmarshal(meta, &m); err != nil {
				return r, fmt.Errorf("pgstore: stored response metadata is not valid: %w", err)
			}
			r.Header = m.Header
			s.lastMeta.Store(&decodedMeta{json: string(meta), header: m.Header.Clone()})
		}
	}
	r.Body = raw
	return r, nil
}

// Complete implements [idempotency.Store.Complete].
func (s *Store) Complete(ctx context.Context, l idempotency.Lease, c idempotency.Completion) error {
	if s.completions != nil {
		row, err := s.completionRow(l, c)
		if err != nil {
			return err
		}
		return s.completeGrouped(ctx, row)
	}
	return s.complete(ctx, s.pool, l, c)
}

// CompleteTx is Complete inside the caller's transaction, so that the
// action's own rows and the outcome commit together. The fencing holds: if
// the lease was lost, it returns ErrLeaseLost and the caller must roll back.
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, l idempotency.Lease, c idempotency.Completion) error {
	return s.complete(ctx, tx, l, c)
}

func (s *Store) complete(ctx context.Context, db dbtx, l idempotency.Lease, c idempotency.Completion) error {
	row, err := s.completionRow(l, c)
	if err != nil {
		return err
	}
	return fenced(ctx, db, "complete", completeSQL, row.args()...)
}

// completionRow is one completion as the database stores it.
type completionRow struct {
	key, scope string
	version    int64
	status     string
	code       int32
	// meta is the response metadata's JSON, nil for NULL. It goes to the
	// JSONB column as text: the one encoding that every exec mode reads as
	// JSON, including pgx.QueryExecModeExec, which takes a []byte for bytea.
	meta *string
	body []byte // never nil
	retS float64
	// ret is retS boxed, from the store's boxedArgs.
	ret any
}

// The statuses a completion stores, as completeSQL's argument.
var argCompleted, argFailed any = string(idempotency.StatusCompleted), string(idempotency.StatusFailed)

// args returns completeSQL's arguments.
func (r completionRow) args() []any {
	var meta any
	if r.meta != nil {
		meta = *r.meta
	}
	status := any(r.status)
	switch r.status { // boxed once, not per call
	case string(idempotency.StatusCompleted):
		status = argCompleted
	case string(idempotency.StatusFailed):
		status = argFailed
	}
	ret := r.ret
	if ret == nil {
		ret = r.retS
	}
	return []any{r.key, r.scope, r.version, status, r.code, meta, r.body, ret}
}

// completionRow validates a completion, seals its response when the store
// has a keyring, and returns the row to store.
func (s *Store) completionRow(l idempotency.Lease, c idempotency.Completion) (completionRow, error) {
	if c.Status != idempotency.StatusCompleted && c.Status != idempotency.StatusFailed {
		return completionRow{}, &idempotency.InvalidError{Field: "Completion.Status", Reason: fmt.Sprintf("must be COMPLETED or FAILED, got %q", c.Status)}
	}
	if c.Retention <= 0 {
		return completionRow{}, &idempotency.InvalidError{Field: "Completion.Retention", Reason: "must be positive"}
	}
	if s.keyring != nil {
		sealed, err := s.keyring.Seal(l.Scope, l.Key, c.Status, c.Response)
		if err != nil {
			return completionRow{}, err
		}
		c.Response = sealed
	}
	meta, err := encodeResponse(c.Response)
	if err != nil {
		return completionRow{}, &idempotency.InvalidError{Field: "Response.Header", Reason: err.Error()}
	}
	body := c.Response.Body
	if body == nil {
		body = []byte{}
	}
	r := completionRow{key: l.Key, scope: l.Scope, version: l.Version, status: string(c.Status),
		code: int32(c.Response.Code), body: body, retS: c.Retention.Seconds()}
	r.ret = s.args.seconds.arg(r.retS)
	if meta != nil {
		m := string(meta)
		r.meta = &m
	}
	return r, nil
}

// Release implements [idempotency.Store.Release].
func (s *Store) Release(ctx context.Context, l idempotency.Lease) error {
	return fenced(ctx, s.pool, "release", releaseSQL, l.Key, l.Scope, l.Version)
}

// Abandon implements [idempotency.Abandoner].
func (s *Store) Abandon(ctx context.Context, l idempotency.Lease) error {
	return fenced(ctx, s.pool, "abandon", abandonSQL, l.Key, l.Scope, l.Version)
}

// Heartbeat implements [idempotency.Store.Heartbeat].
func (s *Store) Heartbeat(ctx context.Context, l idempotency.Lease, d time.Duration) error {
	if d <= 0 {
		return &idempotency.InvalidError{Field: "d", Reason: "heartbeat extension must be positive"}
	}
	if s.heartbeats != nil {
		return s.heartbeatGrouped(ctx, l, d.Seconds())
	}
	return fenced(ctx, s.pool, "heartbeat", heartbeatSQL, l.Key, l.Scope, l.Version, d.Seconds())
}

// boundedPool runs a statement whose context ends only at its deadline
// (idempotency.EndsOnlyAtDeadline: the executor's completions, bounded by
// FinishTimeout) on a connection of pool within that deadline, through
// the connection's own deadline, not through the context: pgx watches a
// context that can end with a callback registered for every statement (a
// handful of allocations, and a lock that every completion of the
// executor shares, since they share their deadlines), where the
// connection's deadline costs two updates of a runtime timer. A statement
// past its deadline fails as it would with the context: the connection is
// closed, and the error matches context.DeadlineExceeded. Its context's
// values still reach pgx (its tracer). Any other context (a caller's of
// Store.Complete, which may cancel it) goes to pgx as it is.
type boundedPool struct{ pool *pgxpool.Pool }

func (b boundedPool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	deadline, ok := ctx.Deadline()
	if !ok || !idempotency.EndsOnlyAtDeadline(ctx) {
		return b.pool.Exec(ctx, sql, args...)
	}
	c, err := b.pool.Acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer c.Release()
	nc := c.Conn().PgConn().Conn()
	if nc.SetDeadline(deadline) != nil {
		return c.Exec(ctx, sql, args...)
	}
	// Before the connection goes back to the pool, whatever the error (a
	// server's error leaves it usable). Past the deadline pgx closed it,
	// and the pool drops it.
	defer nc.SetDeadline(time.Time{})
	tag, err := c.Exec(context.WithoutCancel(ctx), sql, args...)
	if err != nil && !time.Now().Before(deadline) {
		// The connection's deadline and the context's end at the same
		// instant; the context's timer may not have fired yet.
		err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return tag, err
}

func fenced(ctx context.Context, db execer, op, sql string, args ...any) error {
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return translate(op, err)
	}
	if tag.RowsAffected() == 0 {
		return idempotency.ErrLeaseLost
	}
	return nil
}

// Get implements [idempotency.Store.Get].
func (s *Store) Get(ctx context.Context, scope, key string) (idempotency.Record, error) {
	var (
		fp, status               string
		code                     *int32
		meta, raw                []byte
		version                  int64
		lockedUntil, completedAt *time.Time
		refuseUntil              *time.Time
		createdAt, expiresAt     time.Time
	)
	err := s.pool.QueryRow(ctx, getSQL, key, scope).Scan(&fp, &status, &code, &meta, &raw, &version,
		&lockedUntil, &createdAt, &completedAt, &expiresAt, &refuseUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	if err != nil {
		return idempotency.Record{}, translate("get", err)
	}
	rec := idempotency.Record{Scope: scope, Key: key, Fingerprint: idempotency.Fingerprint(fp),
		Status: idempotency.Status(status), LockVersion: version, CreatedAt: createdAt, ExpiresAt: expiresAt}
	if lockedUntil != nil {
		rec.LockedUntil = *lockedUntil
	}
	if completedAt != nil {
		rec.CompletedAt = *completedAt
	}
	if refuseUntil != nil { // a tombstone: its response was pruned
		rec.RefuseUntil = *refuseUntil
		return rec, nil
	}
	if rec.Status != idempotency.StatusProcessing {
		resp, err := s.decodeResponse(scope, key, rec.Status, code, meta, raw)
		if err != nil {
			return idempotency.Record{}, err
		}
		rec.Response = &resp
	}
	return rec, nil
}

// ApproxSize estimates the records in the store from the planner's
// statistics (pg_class.reltuples, kept current by autovacuum): no table
// scan, whatever the table's size. It implements [idempotency.Sizer].
func (s *Store) ApproxSize(ctx context.Context) (int64, error) {
	var n float64
	if err := s.pool.QueryRow(ctx, approxSizeSQL).Scan(&n); err != nil {
		return 0, translate("size", err)
	}
	return int64(max(n, 0)), nil
}

// Prune implements [idempotency.Store.Prune]: one bounded batch, one
// statement. It deletes expired records, or reduces those claimed under
// idempotency.ExpiredRefused to tombstones (their response deleted) until
// their refusal horizon has passed, and deletes the tombstones whose
// horizon has passed. It returns how many records it deleted or reduced.
func (s *Store) Prune(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, &idempotency.InvalidError{Field: "limit", Reason: fmt.Sprintf("must be positive, got %d", limit)}
	}
	var n int64
	if err := s.pool.QueryRow(ctx, pruneSQL, limit).Scan(&n); err != nil {
		return 0, translate("prune", err)
	}
	return int(n), nil
}
