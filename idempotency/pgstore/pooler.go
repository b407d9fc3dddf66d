package pgstore

import (
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
)

// Pooler says what stands between the store's pool and PostgreSQL.
type Pooler int

const (
	// DirectConnection: the pool's connections are PostgreSQL sessions
	// (or a pooler in session mode). The default.
	DirectConnection Pooler = iota
	// TransactionPooler: a pooler in transaction mode (PgBouncer's
	// pool_mode=transaction, and poolers like it): each transaction, and
	// each statement outside one, may run on another server session. A
	// statement prepared on one session is unknown to the next, so the
	// pool must not prepare named statements: configure it with
	// [ForTransactionPooler]. Everything the store runs is fit for such a
	// pooler: no session state, no session-level advisory lock, no
	// LISTEN; a claim, a completion and a transaction's statements each
	// reach one server session.
	TransactionPooler
)

func (p Pooler) String() string {
	switch p {
	case DirectConnection:
		return "DirectConnection"
	case TransactionPooler:
		return "TransactionPooler"
	}
	return fmt.Sprintf("Pooler(%d)", int(p))
}

// ForTransactionPooler configures cfg for a pooler in transaction mode:
// every statement is sent with the extended protocol's unnamed statement
// in one round trip (pgx.QueryExecModeExec), so that nothing depends on a
// statement prepared on another server session, and pgx's statement and
// description caches are off. Pass the pool to [New] with
// Config.Pooler = TransactionPooler.
//
//	cfg, err := pgxpool.ParseConfig(os.Getenv("PGBOUNCER_URL"))
//	pgstore.ForTransactionPooler(cfg)
//	pool, err := pgxpool.NewWithConfig(ctx, cfg)
//	store, err := pgstore.New(pool, &pgstore.Config{Pooler: pgstore.TransactionPooler})
func ForTransactionPooler(cfg *pgxpool.Config) {
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.ConnConfig.StatementCacheCapacity = 0
	cfg.ConnConfig.DescriptionCacheCapacity = 0
}

// checkPooler refuses a pool that prepares statements behind a
// transaction pooler: its statements would fail, now and then, with
// "prepared statement does not exist" on another server session.
func checkPooler(p Pooler, pool *pgxpool.Pool) error {
	switch p {
	case DirectConnection:
		return nil
	case TransactionPooler:
		switch mode := pool.Config().ConnConfig.DefaultQueryExecMode; mode {
		case pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol:
			return nil
		default:
			return &idempotency.InvalidError{Field: "Config.Pooler", Reason: fmt.Sprintf(
				"a transaction pooler needs a pool that prepares no statements, but its DefaultQueryExecMode is %v: configure it with pgstore.ForTransactionPooler", mode)}
		}
	}
	return &idempotency.InvalidError{Field: "Config.Pooler", Reason: fmt.Sprintf("unknown pooler %d", int(p))}
}
