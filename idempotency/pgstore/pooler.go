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
	// [ForTransactionPooler]. Everything the store runs through the pool
	// is fit for such a pooler: no session state, no session-level
	// advisory lock, no LISTEN; a claim, a completion and a transaction's
	// statements each reach one server session. The replay caches'
	// listener needs a session of its own: Config.ListenConfig.
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
// no named prepared statement (pgx's statement cache is off); each
// statement is sent as the extended protocol's unnamed statement, parsed,
// bound and executed in one round trip, with its parameter and result
// types described once per connection and cached
// (pgx.QueryExecModeCacheDescribe). A describe only reads, so it may land
// on any server session. Pass the pool to [New] with Config.Pooler =
// TransactionPooler.
//
// The price is a parse and plan of every statement on the server, which
// a named prepared statement saves: make scalebench measures it. A pooler
// that tracks protocol-level prepared statements (PgBouncer 1.21 and later
// with max_prepared_statements set) can keep pgx's default mode instead;
// use DirectConnection then.
//
//	cfg, err := pgxpool.ParseConfig(os.Getenv("PGBOUNCER_URL"))
//	pgstore.ForTransactionPooler(cfg)
//	pool, err := pgxpool.NewWithConfig(ctx, cfg)
//	store, err := pgstore.New(pool, &pgstore.Config{Pooler: pgstore.TransactionPooler})
func ForTransactionPooler(cfg *pgxpool.Config) {
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	cfg.ConnConfig.StatementCacheCapacity = 0
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
		case pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol:
			// No named statement, and a single round trip per execution
			// (DescribeExec's two could reach two server sessions).
			return nil
		default:
			return &idempotency.InvalidError{Field: "Config.Pooler", Reason: fmt.Sprintf(
				"a transaction pooler needs a pool that prepares no statements, but its DefaultQueryExecMode is %v: configure it with pgstore.ForTransactionPooler", mode)}
		}
	}
	return &idempotency.InvalidError{Field: "Config.Pooler", Reason: fmt.Sprintf("unknown pooler %d", int(p))}
}
