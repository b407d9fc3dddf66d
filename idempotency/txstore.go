package idempotency

import (
	"context"
	"time"
)

// Tx is a transaction of a [TxStore]'s database, as the seam needs it:
// something to commit or roll back. pgx.Tx is one (pgstore);
// *memstore.Tx is memstore's.
type Tx interface {
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// TxStore is the transaction-aware store seam, generic over the
// transaction type TTx of the store's database (as River's driver is): a
// [Store] whose records can also be written inside a transaction of the
// caller's, so that a record and the caller's own writes commit together,
// or neither does. pgstore.Store is a TxStore[pgx.Tx]; memstore.Store is a
// TxStore[*memstore.Tx], a stand-in for tests of code that takes the seam.
// The products built on the core (idempotency/inbox, idempotency/cronslot,
// payments, saga) take a TxStore, never a concrete store; [TxExecutor] runs
// actions over one.
//
// A record written in a transaction is the transaction's until it ends:
// other transactions and the plain Store methods do not see it, and a
// claim of its key by anyone else waits for the transaction to end, then
// acts on what it committed (nothing, after a rollback). Every
// implementation must pass the transactional checks of the conformance
// suite (idempotencytest.ExerciseTx) besides the others.
type TxStore[TTx Tx] interface {
	Store

	// Begin starts a transaction of the store's database, for the *Tx
	// methods and the caller's own writes.
	Begin(ctx context.Context) (TTx, error)
	// ClaimTx is [Store.Claim] inside tx: the claim commits or rolls back
	// with tx, and until then holds the key against every other claim.
	ClaimTx(ctx context.Context, tx TTx, p ClaimParams) (Claim, error)
	// CompleteTx is [Store.Complete] inside tx: the outcome is recorded
	// when tx commits, with the caller's writes. ErrLeaseLost when the
	// lease is not the record's current one; tx must then be rolled back.
	CompleteTx(ctx context.Context, tx TTx, l Lease, c Completion) error
	// FenceTx checks in tx that l still holds its record's lease, and
	// keeps it held until tx ends: no reclaim can take the record over
	// before tx commits or rolls back. Run it last in a transaction whose
	// writes must only commit for the lease's holder. ErrLeaseLost when
	// the lease was lost; tx must then be rolled back.
	FenceTx(ctx context.Context, tx TTx, l Lease) error
	// SupersedeTx replaces inside tx the outcome of the record of
	// (scope, key), in progress or finished and not expired, whoever
	// holds it: for an outcome the world overturned afterwards. The lock
	// version grows, so a holder's lease is lost. It reports whether a
	// record was replaced (false: none, or expired, which is never
	// revived).
	SupersedeTx(ctx context.Context, tx TTx, scope, key string, c Completion) (bool, error)
	// RunTx is the one-transaction mode's step: it claims p in a new
	// transaction and, when the claim is acquired or reclaimed, runs fn
	// in that transaction, then records the completion fn returns and
	// commits, fn's writes with it. Any other claim is returned as it is,
	// with the transaction rolled back and fn not run. An error of fn
	// rolls everything back, the claim included, and is returned with the
	// claim. A store may save round trips here (pgstore sends the BEGIN
	// with the claim and the completion with the COMMIT).
	RunTx(ctx context.Context, p ClaimParams, fn func(ctx context.Context, tx TTx, l Lease) (Completion, error)) (Claim, error)
	// Leases reads the leases of the named records, with the store's
	// clock beside each: what a job driving its own rows (a saga's
	// recovery) needs to tell a live holder from a crashed one. A record
	// that does not exist is absent from the map.
	Leases(ctx context.Context, refs []RecordRef) (map[RecordRef]LeaseState, error)
}

// RecordRef names one record.
type RecordRef struct{ Scope, Key string }

// LeaseState is what a store tells of a record's lease, as an operator is
// shown it before releasing it, or a recovery job reads it.
type LeaseState struct {
	Scope, Key string
	Status     Status
	// LockVersion is the fencing token of the record's last holder.
	LockVersion int64
	CreatedAt   time.Time
	// LockedUntil is when the lease ends or ended; nil when the record
	// holds none.
	LockedUntil *time.Time
	// DatabaseNow is the store's clock when the record was read (the
	// database's, for pgstore).
	DatabaseNow time.Time
}

// Live reports whether the lease had not ended when the record was read:
// its holder may still be executing.
func (l LeaseState) Live() bool { return l.LockedUntil != nil && l.LockedUntil.After(l.DatabaseNow) }
