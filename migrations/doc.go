// Package migrations holds payonce's database schema as embedded, numbered
// SQL files, grouped in lines, and the migrator that applies them.
//
// # Lines
//
// Each component's tables form a line, so that an application migrates
// only what it uses (River's migrator does the same):
//
//   - [LineIdempotency]: the idempotency core (pgstore, inbox, cronslot):
//     idempotency_store, idempotency_rate_limits, operator_audit.
//   - [LineLedger]: the ledger's accounts, entries, postings and snapshots.
//   - [LinePayments]: payment_intents, webhook_events and the reconciler's
//     runs and items; it needs LineIdempotency and LineLedger.
//   - [LineSaga]: sagas and saga_steps; it needs LineIdempotency.
//   - [LineReplayCache]: the triggers on idempotency_store that announce
//     changes to finished records, which an executor's replay cache
//     (idempotency.ReplayCache) over pgstore needs; it needs
//     LineIdempotency. A service without a replay cache leaves it out and
//     its completions do not pay for the triggers.
//
// A service that only protects its own endpoints, queue consumers or cron
// jobs migrates the core alone:
//
//	_, err := migrations.MigrateLines(ctx, pool, migrations.LineIdempotency)
//
// [MigrateLines] also applies the lines a line needs, and a line can be
// added later: migrating [LinePayments] a year on applies the ledger's and
// the payments' versions, whatever versions of the core were applied in
// between. [Migrate] applies every line, as `payonce migrate up` does;
// [MigrateLines] the lines named, as `payonce migrate up --line` does.
//
// # Versions
//
// Versions are numbered in one sequence across the lines, in the order
// they were written (sql/<line>/NNNN_name.sql); each line holds some of
// them. Each version is applied in its own transaction together with its
// row in the payonce_migrations table, so a version is either wholly
// applied and recorded or not at all. A line's versions are applied in
// version order; the lines' tables do not refer to each other's, so the
// versions of different lines may be applied in any interleaving, and
// yield the same schema. One line acts on another's table: replaycache
// puts its triggers on idempotency_store. Its version (0020) comes after
// the idempotency version that took those triggers out of the core line
// (0019), which leaves them alone once 0020 is recorded, so the
// interleavings still yield the same schema.
//
// The numbers are those of the single sequence that payonce used before
// the lines, and payonce_migrations is unchanged: a database migrated
// then is already migrated now, and one migrated to some version of it
// (0012, say) gets the versions after it from [Migrate], or those of its
// lines from [MigrateLines].
//
// Migrating is safe when several processes start at once: each
// transaction first takes an advisory lock scoped to the current schema,
// so concurrent migrators queue, and every one but the first finds the
// version already recorded and skips it.
//
// # Checking
//
// [Check] reports whether lines are wholly applied, in one query. The
// constructors check what they need once, when they are called:
// pgstore.New checks LineIdempotency and payments.New LinePayments. A
// missing or older schema is then refused with a [*NotMigratedError]
// (matching [ErrNotMigrated]) that names the missing versions and the
// command to run, instead of a later `relation "idempotency_store" does
// not exist`. The check reads payonce_migrations, so the application's
// role needs SELECT on it. [Status] and [StatusLines] list versions and
// whether each is applied.
//
// # Your own migration tool
//
// Teams that run their own migration tool can take the SQL from [SQL] or
// [SQLLines] (or `payonce migrate print`) instead of calling [Migrate]:
// each version records itself in payonce_migrations, which the checks
// read.
//
// # Schemas
//
// The schema is created in the connection's current schema (the first
// entry of search_path), so one database can hold several isolated copies.
package migrations
