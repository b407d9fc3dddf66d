package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/migrations"
)

// Executor is an [idempotency.TxExecutor] over a [Store]: with, besides
// Do, the one-transaction mode DoTx and the Doer WithTx.
type Executor = idempotency.TxExecutor[pgx.Tx]

// NewExecutor returns an Executor over store. A nil cfg means defaults; it
// returns an *idempotency.InvalidError naming a bad Config field.
//
// With a Config.ReplayCache (and a store that does not seal responses),
// it also checks, with one query bounded like New's, that the schema has
// the replaycache migration line, whose triggers announce the changes the
// cache must hear of: without it, a *migrations.NotMigratedError names the
// line and how to apply it (`payonce migrate up`, or
// migrations.MigrateLines(ctx, pool, migrations.LineReplayCache)).
func NewExecutor(store *Store, cfg *idempotency.Config) (*Executor, error) {
	if store != nil && cfg != nil && cfg.ReplayCache != nil && !store.Seals() {
		if err := checkLines(store.pool, migrations.LineReplayCache); err != nil {
			return nil, fmt.Errorf("pgstore.NewExecutor: Config.ReplayCache: %w", err)
		}
	}
	return idempotency.NewTx[pgx.Tx](store, cfg)
}

// rollbackTimeout bounds the rollback of a transaction whose context
// ended: the connection is destroyed if it does not answer by then.
const rollbackTimeout = 10 * time.Second

// TxAction is the work of the one-transaction mode: its writes go through
// tx and commit together with the outcome, or not at all.
type TxAction = idempotency.TxAction[pgx.Tx]

// Begin starts a transaction on the store's pool, READ COMMITTED whatever
// the database's default ([idempotency.TxStore]).
func (s *Store) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, translate("begin", err)
	}
	return tx, nil
}

// RunTx claims p in a new transaction and, when the claim is acquired or
// reclaimed, runs fn in it and commits fn's writes with the completion fn
// returns ([idempotency.TxStore.RunTx]). The success path takes two round
// trips besides fn's statements: the BEGIN travels with the claim, the
// completion with the COMMIT.
//
// A new key's record is invisible to other transactions until the commit:
// a concurrent claim waits on its row lock and then sees the outcome. The
// transaction is READ COMMITTED whatever the database's default: a claim
// that waited on a concurrent insert must see that row when it looks
// again.
func (s *Store) RunTx(ctx context.Context, p idempotency.ClaimParams,
	fn func(ctx context.Context, tx pgx.Tx, l idempotency.Lease) (idempotency.Completion, error)) (idempotency.Claim, error) {
	if err := p.Validate(); err != nil {
		return idempotency.Claim{}, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return idempotency.Claim{}, translate("acquire", err)
	}
	// Release destroys the connection if a transaction is still open on it.
	defer conn.Release()
	db := &beginWithFirst{conn: conn.Conn(), opts: pgx.TxOptions{IsoLevel: pgx.ReadCommitted}}
	committed := false
	defer func() {
		if !committed && db.tx != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			_ = db.tx.Rollback(rctx)
			cancel()
		}
	}()
	c, err := s.claim(ctx, db, false, p)
	if err != nil {
		return idempotency.Claim{}, err
	}
	tx := db.tx
	if tx == nil { // a claim always sends a statement
		return idempotency.Claim{}, errors.New("pgstore: RunTx: the claim began no transaction")
	}
	if c.State != idempotency.ClaimAcquired && c.State != idempotency.ClaimReclaimed {
		return c, nil
	}
	done, err := fn(ctx, tx, c.Lease)
	if err != nil {
		return c, err
	}
	if err := s.completeAndCommit(ctx, tx, c.Lease, done); err != nil {
		return c, err
	}
	committed = true
	return c, nil
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

// TxFromContext returns the transaction of an action run by the Doer of
// [Executor.WithTx] ([idempotency.TxFromContext] for pgx.Tx): the action's
// writes through it commit together with the outcome.
func TxFromContext(ctx context.Context) (pgx.Tx, bool) {
	return idempotency.TxFromContext[pgx.Tx](ctx)
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

var _ idempotency.TxStore[pgx.Tx] = (*Store)(nil)
