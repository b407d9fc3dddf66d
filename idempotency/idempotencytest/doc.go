// Package idempotencytest is the conformance suite that every
// [idempotency.Store] must pass ([Exercise]), with the checks of the
// transactional calls that every [idempotency.TxStore] must pass besides
// ([ExerciseTx]), and [CheckHTTP], the same promises checked from the
// outside against a protected HTTP handler.
//
// Each check asserts the promise (one execution, replays byte for byte,
// refusals that change nothing, fencing), not the store's internals.
//
// # Running it against a new Store
//
// Call [Exercise] from a test of the implementation with a function that
// returns a fresh, empty store in a [Harness] and a way to make time pass
// for its records:
//
//	func TestConformance(t *testing.T) {
//		t.Parallel()
//		idempotencytest.Exercise(t, func(t *testing.T) idempotencytest.Harness {
//			var offset atomic.Int64
//			store := memstore.New(&memstore.Config{
//				Clock:      func() time.Time { return time.Now().Add(time.Duration(offset.Load())) },
//				EvictAfter: -1,
//			})
//			return idempotencytest.Harness{
//				Store:   store,
//				Advance: func(_ testing.TB, d time.Duration) { offset.Add(int64(d)) },
//			}
//		})
//	}
//
// The function is called once per check, from that check's test, so a
// store on PostgreSQL can give each check its own schema with t.Cleanup.
// A store whose clock cannot be moved shifts its records' timestamps back
// instead: pgstore's tests do both.
//
// # Running it against a new TxStore
//
// A store that implements [idempotency.TxStore] runs [ExerciseTx] beside
// [Exercise]. Its [TxHarness] adds to the store and Advance a way for the
// checks to make writes of their own in the store's transactions and to
// count those committed, so that a check can tell whether its writes
// committed with the store's record, or neither did. pgstore's tests
// insert rows into a table of the test's schema:
//
//	idempotencytest.ExerciseTx(t, func(t *testing.T) idempotencytest.TxHarness[pgx.Tx] {
//		pool := pgtest.Pool(t)
//		if _, err := pool.Exec(context.Background(), `CREATE TABLE conformance_writes (name TEXT NOT NULL)`); err != nil {
//			t.Fatal(err)
//		}
//		return idempotencytest.TxHarness[pgx.Tx]{
//			Store:   store(t, pool), // a *pgstore.Store on pool
//			Advance: advance(pool), // moves the records' timestamps back
//			Write: func(ctx context.Context, tx pgx.Tx, name string) error {
//				_, err := tx.Exec(ctx, `INSERT INTO conformance_writes (name) VALUES ($1)`, name)
//				return err
//			},
//			Written: func(t testing.TB, name string) int { /* SELECT count(*) ... */ },
//		}
//	})
//
// An in-memory store counts a write when its transaction commits (memstore:
// (*Tx).OnCommit). TxHarness.Waiting, optional, tells the checks when a
// call is waiting for one of their transactions to end; without it, the
// checks of calls racing an open transaction find fewer faults.
//
// The checks run as sub-tests Tx/check, each in parallel on its own
// harness: ClaimTx committed or rolled back, a claim waiting for an open
// ClaimTx, CompleteTx with the writes and with a lost lease, FenceTx
// refusing a lost lease and holding off a reclaim until its transaction
// ends, SupersedeTx (commit, rollback, a holder fenced, missing and
// expired records left alone), RunTx, DoTx (concurrent duplicates wait and
// replay; a permanent error, a transient one and a panic leave no
// writes), WithTx, Leases, and bad input refused, changing nothing.
//
// # Structure
//
// Every check runs in parallel on its own harness, as a sub-test named
// group/check, so one group or one check can be run alone:
//
//	go test -run 'TestConformance/Lease/' ./idempotency/memstore
//
// The groups, one file each:
//
//   - Claim (claim.go): the first request executes once and is stored;
//     duplicates arriving together execute nothing more.
//   - Replay (replay.go): a retry replays byte for byte; the same key with
//     other fields is refused, done or in progress, changing nothing.
//   - Outcome (outcome.go): a permanent error is stored and replayed; a
//     transient error, a panic or a cancelled context release the lock; an
//     abandoned claim leaves no record.
//   - Lease (lease.go): orphan reclaim with one winner, fencing of the old
//     holder (also after its record was pruned), heartbeats (also while a
//     slow store records the outcome), a lost lease cancelling its action,
//     and a holder whose heartbeats fail cancelled, with a cause matching
//     ErrLeaseLost, before another instance can reclaim the key, its late
//     outcome not recorded. These two wrap the store: every Heartbeat
//     fails, or Complete waits for heartbeats.
//   - Expiry (expiry.go): expired records are new or refused, never
//     replayed; Prune never removes PROCESSING or unexpired records.
//   - Scope and Input (scopes.go): scopes isolated, foreign keys refused;
//     bad requests and configurations refused naming the field.
//
// Every check starts from setup (setup.go), which gives it a bundle: the
// harness, an executor on its store, a context and a count of executions.
package idempotencytest
