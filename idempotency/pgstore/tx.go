package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/payonce/payonce/idempotency"
)

// Executor is an [idempotency.Executor] over a [Store] with, in addition,
// the one-transaction mode [Executor.DoTx].
type Executor struct {
	*idempotency.Executor
	store *Store
}

// NewExecutor returns an Executor over store. A nil cfg means defaults; it
// returns an *idempotency.InvalidError naming a bad Config field.
func NewExecutor(store *Store, cfg *idempotency.Config) (*Executor, error) {
	e, err := idempotency.New(store, cfg)
	if err != nil {
		return nil, err
	}
	return &Executor{Executor: e, store: store}, nil
}

// TxAction is the work of the one-transaction mode: its writes go through
// tx and commit together with the outcome, or not at all.
type TxAction func(ctx context.Context, tx pgx.Tx) (idempotency.Response, error)

// DoTx runs action in one transaction with the claim and the outcome: for
// actions whose effects live in the same database, so that the effects and
// the idempotency record commit together, or neither does.
//
// A new key's record is invisible to other transactions until the commit:
// a concurrent duplicate waits on its row lock and then replays the
// outcome, instead of answering "in progress". A crash before the commit
// leaves nothing, and a retry runs as new. No heartbeat is needed, since
// the row lock, not the lease, keeps duplicates out.
//
// A nil error from action commits its writes with the outcome COMPLETED. A
// [idempotency.Permanent] error rolls back the transaction, then stores the
// outcome FAILED on its own (no savepoint: the success path stays at two
// round trips besides the action's statements, the BEGIN sent with the
// claim, and the completion with the COMMIT).
// Any other error, or a panic, rolls back everything, the claim included.
//
// Errors are those of [idempotency.Executor.Do].
func (e *Executor) DoTx(ctx context.Context, req idempotency.Request, action TxAction) (res idempotency.Result, err error) {
	if err := req.Validate(); err != nil {
		return idempotency.Result{}, err
	}
	ctx, span := e.Tracer().Start(ctx, "idempotency.DoTx", trace.WithAttributes(idempotency.KeyAttributes(req.Scope, req.Key)...))
	defer func() {
		span.SetAttributes(attribute.Bool(idempotency.AttrReplayed, res.Replayed), attribute.String(idempotency.AttrStatus, string(res.Status)))
		idempotency.EndSpan(span, err)
	}()
	cfg := e.Config()
	conn, err := e.store.pool.Acquire(ctx)
	if err != nil {
		return idempotency.Result{}, translate("acquire", err)
	}
	// Release destroys the connection if a transaction is still open on it.
	defer conn.Release()
	// READ COMMITTED whatever the database's default: a claim that waited
	// on a concurrent insert must see that row when it looks again. The
	// BEGIN travels with the claim's first statement, in one round trip.
	db := &beginWithFirst{conn: conn.Conn(), opts: pgx.TxOptions{IsoLevel: pgx.ReadCommitted}}
	committed := false
	defer func() {
		if !committed && db.tx != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.FinishTimeout)
			_ = db.tx.Rollback(rctx)
			cancel()
		}
	}()

	c, err := e.store.claim(ctx, db, false, idempotency.ClaimParams{
		Scope: req.Scope, Key: req.Key, Fingerprint: req.Fingerprint,
		LockTimeout: cfg.LockTimeout, Retention: cfg.Retention, Expired: cfg.Expired,
		RefusalHorizon: cfg.RefusalHorizon, RefuseForeign: req.RefuseForeign,
	})
	if err != nil {
		return idempotency.Result{}, err
	}
	tx := db.tx
	if tx == nil { // a claim always sends a statement
		return idempotency.Result{}, errors.New("pgstore: DoTx: the claim began no transaction")
	}
	m := e.Metrics()
	m.Claim(ctx, req.Scope, c.State)
	if c.State != idempotency.ClaimAcquired && c.State != idempotency.ClaimReclaimed {
		return idempotency.Settle(c)
	}

	started := cfg.Clock()
	resp, aerr := action(ctx, tx)
	took := cfg.Clock().Sub(started)
	res = idempotency.Result{Lease: c.Lease, Reclaimed: c.State == idempotency.ClaimReclaimed}
	var perm *idempotency.PermanentError
	switch {
	case aerr == nil:
		res.Status, res.Response = idempotency.StatusCompleted, resp
		m.Action(ctx, took, "completed")
	case errors.As(aerr, &perm):
		m.Action(ctx, took, "failed")
		// Undo the action's writes and the claim, then record the failure
		// on its own. A duplicate that claimed the key in between is a
		// legitimate first execution (nothing of this one committed): its
		// outcome stands and is what this call replays.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.FinishTimeout)
		err := tx.Rollback(rctx)
		cancel()
		committed = true // nothing left to roll back
		if err != nil {
			return idempotency.Result{}, translate("rollback", err)
		}
		return e.Executor.Do(ctx, req, func(context.Context) (idempotency.Response, error) {
			return idempotency.Response{}, aerr
		})
	default:
		m.Action(ctx, took, "transient")
		return idempotency.Result{}, aerr
	}
	if err := e.store.completeAndCommit(ctx, tx, c.Lease, idempotency.Completion{Status: res.Status, Response: res.Response, Retention: cfg.Retention}); err != nil {
		return idempotency.Result{}, err
	}
	committed = true
	return res, nil
}

// beginWithFirst is the claim's dbtx in DoTx: its first statement is sent
// in one batch after the BEGIN (pgx's Batch.BeginTx), saving the round
// trip of a BEGIN of its own; later statements run in the transaction
// begun, tx.
type beginWithFirst struct {
	conn *pgx.Conn
	opts pgx.TxOptions
	tx   pgx.Tx
}

// first sends BEGIN and sql in one batch and reads the BEGIN's result.
// The caller reads sql's result, then closes the batch.
func (b *beginWithFirst) first(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	batch := &pgx.Batch{}
	batch.BeginTx(b.opts)
	batch.Queue(sql, args...)
	br := b.conn.SendBatch(ctx, batch)
	// The transaction, available at once so that DoTx rolls it back
	// whatever happens next; closed by Close if the BEGIN failed.
	b.tx = br.Tx()
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

// closeBatch closes br and returns err, or the error of Close when there
// was none (or only "no rows", which a broken batch must not pass for).
func closeBatch(br pgx.BatchResults, err error) error {
	if cerr := br.Close(); cerr != nil && (err == nil || errors.Is(err, pgx.ErrNoRows)) {
		return cerr
	}
	return err
}

func (b *beginWithFirst) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if b.tx != nil {
		return b.tx.Exec(ctx, sql, args...)
	}
	br, err := b.first(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	return tag, closeBatch(br, err)
}

func (b *beginWithFirst) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if b.tx != nil {
		return b.tx.QueryRow(ctx, sql, args...)
	}
	return firstRow{b: b, ctx: ctx, sql: sql, args: args}
}

// firstRow sends the batch when scanned, as pgx's rows report their error
// at Scan.
type firstRow struct {
	b    *beginWithFirst
	ctx  context.Context
	sql  string
	args []any
}

func (r firstRow) Scan(dest ...any) error {
	br, err := r.b.first(r.ctx, r.sql, r.args)
	if err != nil {
		return err
	}
	return closeBatch(br, br.QueryRow().Scan(dest...))
}

// completeAndCommit sends the completion and the COMMIT in one round trip.
// The completion is guarded: should it match no row (the lease lost, which
// the claim's row lock makes impossible here), it fails with a division by
// zero, the pipeline stops before the COMMIT, and the transaction is rolled
// back with the action's writes.
func (s *Store) completeAndCommit(ctx context.Context, tx pgx.Tx, l idempotency.Lease, c idempotency.Completion) error {
	row, err := s.completionRow(l, c)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(completeGuardedSQL, row.args()...)
	b.Queue("COMMIT")
	br := tx.SendBatch(ctx, b)
	var one int
	if err := br.QueryRow().Scan(&one); err != nil {
		br.Close()
		if isDivisionByZero(err) {
			return fmt.Errorf("idempotency: outcome not recorded: %w", idempotency.ErrLeaseLost)
		}
		return translate("complete", err)
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return translate("commit", err)
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("pgstore: commit: the transaction was rolled back (%s)", tag)
	}
	return nil
}

type txKey struct{}

// TxFromContext returns the transaction of an action run by the Doer of
// [Executor.WithTx]: the action's writes through it commit together with
// the outcome.
func TxFromContext(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

// WithTx returns a Doer that claims like Do (the claim commits at once, so
// duplicates see "in progress" and a crashed holder's lease runs out), and
// runs the action in a transaction, available from [TxFromContext], in
// which the outcome is recorded (CompleteTx) and committed with the
// action's writes. A crash before that commit leaves no writes and an
// orphaned claim that a retry takes over after the lock timeout.
//
// A [idempotency.Permanent] error rolls the action's writes back and stores
// the failure; any other error rolls them back and releases the key.
func (e *Executor) WithTx() idempotency.Doer { return txDoer{e} }

type txDoer struct{ e *Executor }

func (d txDoer) Do(ctx context.Context, req idempotency.Request, action idempotency.Action) (idempotency.Result, error) {
	return d.e.Do(ctx, req, func(ctx context.Context) (idempotency.Response, error) {
		lease, ok := idempotency.LeaseFromContext(ctx)
		if !ok {
			return idempotency.Response{}, errors.New("pgstore: no lease in the action's context")
		}
		var resp idempotency.Response
		var aerr error
		err := pgx.BeginFunc(ctx, d.e.store.pool, func(tx pgx.Tx) error {
			resp, aerr = action(context.WithValue(ctx, txKey{}, tx))
			if aerr != nil {
				return aerr // roll back the action's writes
			}
			return d.e.store.CompleteTx(ctx, tx, lease, idempotency.Completion{
				Status: idempotency.StatusCompleted, Response: resp, Retention: d.e.Config().Retention})
		})
		switch {
		case aerr != nil:
			return resp, aerr // the executor stores a permanent failure or releases the key
		case err != nil:
			return idempotency.Response{}, err
		}
		return resp, idempotency.Recorded(idempotency.StatusCompleted, resp)
	})
}

// FenceTx checks in tx that l still holds its record's lease and keeps it
// held until tx ends: the record, PROCESSING under l's lock version, is
// locked FOR SHARE, so no reclaim (which updates the row) can take it
// over before tx commits or rolls back, while other fences of the same
// holder are not blocked. Run it last in a transaction whose writes must
// only commit for the lease's holder (a saga's step and its transition),
// so that the row lock is held for the commit only.
//
// It returns idempotency.ErrLeaseLost when the lease was lost (the record
// was reclaimed, completed, released or abandoned), and then tx must be
// rolled back.
func (s *Store) FenceTx(ctx context.Context, tx pgx.Tx, l idempotency.Lease) error {
	return fenced(ctx, tx, "fence", fenceSQL, l.Key, l.Scope, l.Version)
}
