// Package pgstore is the idempotency store on PostgreSQL (pgx v5): the
// production [idempotency.Store].
//
// # HTTP in one call
//
// [Middleware] protects HTTP routes in one call: it checks the schema,
// builds the store and the executors (each route's lease and retention
// are its action's, [MiddlewareOptions].Actions), and returns
// idempotency.Middleware's net/http middleware, each handler in a
// transaction ([TxFromContext]) that commits with its stored response.
// [New], [NewExecutor] and idempotency.Middleware remain the composable
// path.
//
// # Schema
//
// The table idempotency_store is created by package migrations: its
// idempotency line is all the store needs (migrations.MigrateLines(ctx,
// pool, migrations.LineIdempotency); `payonce migrate up` applies every
// line, `payonce migrate print` prints them for your own tool). [New]
// checks, once, that the line is wholly applied, and refuses a missing or
// older schema with an error naming what to run. Rows are keyed by
// PRIMARY KEY (idempotency_key, user_id): the database, not the
// application, guarantees one record per key and scope.
//
// An executor with an idempotency.ReplayCache also needs the replaycache
// line (migrations.LineReplayCache): its triggers announce the changes
// made to finished records outside the claim path, which every cache must
// hear of ([Store.WatchChanges]). [NewExecutor] refuses a cache without
// it. A service without a cache leaves the line out, and its completions
// do not pay for the triggers.
//
// # Round trips and clocks
//
// A claim is one statement in the common cases: a new key is inserted
// PROCESSING; an existing key is only read (a replay writes nothing: no row
// lock, no WAL, no commit). While most claims find an existing record (a
// retry storm), the default [ClaimAdaptive] strategy reads first with a plain
// primary-key SELECT, so that a replay costs what a read costs; while most
// are new keys (normal traffic) it inserts first with a plain INSERT ...
// ON CONFLICT DO NOTHING, cheaper than the one statement that also reads;
// see [ClaimStrategy]. Taking over an orphaned record (its lease ended
// because its holder crashed or released it) is a second statement, a
// compare-and-swap on the lock version, so exactly one of many contenders
// wins. Complete, Release and Heartbeat are fenced by the lock version: a
// holder that lost its lease changes nothing and gets
// idempotency.ErrLeaseLost. Every time comparison uses the database's now():
// application clocks may be skewed without effect.
//
// # Recovery after a crash
//
// A holder killed mid-action (a crash, an OOM kill, a deploy that did not
// wait) leaves its record PROCESSING under a live lease: a retry is told
// "in progress" until the lease runs out, then takes the key over by
// compare-and-swap and runs the action again. Set Config.Instance to the
// name the process's supervisor restarts it under (a StatefulSet pod's
// name, a systemd unit instance, a fixed worker slot; conventionally the
// environment variable [InstanceEnv]), and that wait ends when the
// instance is back instead:
//
//	store, err := pgstore.New(pool, &pgstore.Config{Instance: os.Getenv(pgstore.InstanceEnv)})
//
// Every lease the store takes records the instance's name and a random id
// of the process's incarnation (migration 0017). When the instance starts
// again, [New] ends at once, in one statement, the live leases that
// earlier incarnations of its name hold: their processes are gone, so the
// first retry of each key reclaims it and finishes it. In make bench's
// recovery path (holders SIGKILLed mid-action and restarted at once; see
// BENCHMARKS.md) a retry finished each key a few hundred milliseconds
// after the kill, against the whole lease without a name.
//
// Fencing is unchanged: ending a lease does not change its lock version;
// the retry's takeover raises it, and from then on the earlier holder's
// Complete, Release and Heartbeat get idempotency.ErrLeaseLost. So a
// holder that was only paused (a stopped process, a long GC, a frozen VM)
// and comes back cannot record an outcome over the retry's. What the
// name cannot undo is an external call the paused holder makes while a
// retry runs beside it, since its own deadline has not passed: the name
// must belong to one live process at a time. Supervisors that start an
// instance again only once it exited (systemd, a StatefulSet, a process
// manager with fixed slots) give that; names copied to every replica of
// a Deployment do not. Stores of one process share its incarnation, so a
// second store under the same name ends nothing of the first's.
//
// A holder that never comes back (its host lost, the instance renamed or
// scaled away) is recovered when its lease runs out: the executor's
// LockTimeout, 30s by default. That default is kept, not shortened,
// because it is also how long a holder cut off from the database keeps
// working: it stops on its own once LockTimeout minus LeaseMargin (27s)
// passes without a confirmed heartbeat, so a database failover or network
// blip shorter than that stops no healthy action. A shorter lease
// recovers a lost host's keys sooner and stops cut-off holders sooner
// (their actions cancelled, their keys retried), at the cost of a
// heartbeat every LockTimeout/3 for every action that runs that long (an
// action shorter than that sends none); group commit sends the
// heartbeats of a process's actions together, one statement and one
// commit per group (see Group commit). With instance names, crashes and
// restarts no longer wait for the lease, so the lease only has to be
// short enough for lost hosts.
//
// # Group commit
//
// By default, a Store gathers the new-key claims, and separately the
// completions and the heartbeats, that its callers make while one of the
// same kind is in flight, and sends each group as one multi-row statement
// in one short transaction: one round trip, one plan and one commit for
// the group instead of one each. A caller returns only once the commit
// that holds its own row is done; a caller that finds nothing in flight,
// or fewer of the store's statements in flight than the pool has
// connections, runs its own statement at once (groups form only while
// callers outnumber connections); a group gives up on a row lock after
// 50 ms (a longer
// transaction holds that row) and its callers then run alone, on a
// connection the group rolled back and gave back to the pool; fencing is
// per row (a completion under a lost lease gets idempotency.ErrLeaseLost,
// the others of its group are stored). A group that may have committed
// without the client learning it (the connection broke, the server ended
// the session, the COMMIT failed) is never taken for rolled back: each
// caller finds out from its own row whether the group stored it, so that
// nobody is told "in progress" about its own claim or ErrLeaseLost about
// its own outcome. When callers outnumber the pool's
// connections, it multiplies throughput (make bench's (h) paths: 64
// callers on 8 connections, against the best other design; see
// BENCHMARKS.md). Config.NoGroupCommit turns it off; Config.MeterProvider
// counts the groups by outcome ([MetricGroups]) and their rows
// ([MetricGroupRows]). Claims and completions inside a caller's transaction
// (ClaimTx, CompleteTx, DoTx) are never grouped.
//
// # Transactions
//
// Store is the core's transaction-aware seam over pgx,
// an idempotency.TxStore[pgx.Tx]: what the inbox, cron slots, payments
// and sagas take. [Store.CompleteTx] records an outcome inside the caller's transaction, so
// that the action's own rows and the record commit together. Executor.DoTx
// ([Store.RunTx]) goes further and runs the claim, the action and the outcome in one
// transaction: one commit instead of two, and a concurrent duplicate waits
// for the commit and replays.
//
//	store, err := pgstore.New(pool, nil)
//	...
//	exec, err := pgstore.NewExecutor(store, nil)
//	...
//	res, err := exec.DoTx(ctx, req, func(ctx context.Context, tx pgx.Tx) (idempotency.Response, error) {
//		var id int64
//		err := tx.QueryRow(ctx, `INSERT INTO orders (sku) VALUES ($1) RETURNING id`, sku).Scan(&id)
//		return idempotency.Response{Code: 201, Body: []byte(fmt.Sprintf(`{"id":%d}`, id))}, err
//	})
//
// # Behind PgBouncer
//
// In transaction pooling mode, consecutive statements may run on different
// server sessions, so nothing may rest on a session: the store keeps no
// session state, takes no session-level lock, and each claim, completion
// and transaction reaches one session. The pool alone must be configured:
// [ForTransactionPooler] makes it prepare no named statements, and
// Config.Pooler = [TransactionPooler] has [New] check that it does. The
// conformance suite runs through a real PgBouncer in this mode. The one
// session-bound thing is the LISTEN of executors' replay caches
// ([Store.WatchChanges]): give it a direct connection with
// Config.ListenConfig, or those caches fall back to ReplayCache.MaxAge.
//
// # Pruning
//
// [Store.Prune] runs one statement per bounded batch, skipping rows locked
// by other pruners; PROCESSING rows are never touched. It takes expired,
// finished records through the partial index on expires_at and deletes
// them, except those claimed under idempotency.ExpiredRefused whose
// refusal horizon has not passed: those it reduces to tombstones (the
// response columns set to NULL, refuse_until set), which leave that index
// and keep refusing the key. It deletes the tombstones whose refuse_until
// has passed through their own partial index (migration 0015).
package pgstore
