package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest"
)

// What a group's callers are told when the group does not commit, or may
// have committed without saying so, and what the group leaves of its
// connection.

// wantCompleted stops the test unless key's record holds the outcome
// outcomeOf(key).
func wantCompleted(t *testing.T, store *pgstore.Store, key string) {
	t.Helper()
	rec, err := store.Get(context.Background(), "usr_group", key)
	if err != nil || rec.Status != idempotency.StatusCompleted || string(rec.Response.Body) != key {
		t.Fatalf("record %s: %s %v, want COMPLETED with its outcome", key, rec.Status, err)
	}
}

// holdFlight makes a caller of kind ("claim" or "complete") hold the
// store's one flight of that kind: it waits for a row that an open
// transaction holds, so that the callers that come next queue for one
// group (the stall is set to an hour: none of them starts a flight of its
// own). release ends the transaction and waits for that caller's answer,
// after which the queued callers go as one group.
func holdFlight(t *testing.T, pool *pgxpool.Pool, store *pgstore.Store, kind, key string) (release func()) {
	t.Helper()
	ctx := context.Background()
	store.SetGroupFlights(1)
	store.SetGroupStall(time.Hour)
	var lease idempotency.Lease
	if kind == "complete" {
		lease = mustClaim(t, store, key)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if kind == "complete" {
		err = store.FenceTx(ctx, tx, lease)
	} else {
		_, err = store.ClaimTx(ctx, tx, params(t, key))
	}
	if err != nil {
		t.Fatal(err)
	}
	answer := make(chan error, 1)
	go func() {
		if kind == "complete" {
			answer <- store.Complete(ctx, lease, outcomeOf(key))
			return
		}
		c, err := store.Claim(ctx, params(t, key))
		if err == nil && c.State != idempotency.ClaimInProgress {
			err = fmt.Errorf("claim answered %v, want in progress", c.State)
		}
		answer <- err
	}()
	waitForLockWait(t, pool, tx)
	return func() {
		t.Helper()
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := await(t, "the flight's holder", answer); err != nil {
			t.Fatalf("the flight's holder: %v", err)
		}
	}
}

// waitQueued waits until n callers wait for the next group of kind.
func waitQueued(t *testing.T, store *pgstore.Store, kind string, n int) {
	t.Helper()
	for deadline := time.Now().Add(answerWait); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if store.Queued(kind) == n {
			return
		}
	}
	t.Fatalf("%d callers queued for a %s group, want %d", store.Queued(kind), kind, n)
}

// groupCounts reads group commit's instruments: groups by kind/outcome,
// rows by kind.
func groupCounts(t *testing.T, reader *sdkmetric.ManualReader) (groups, rows map[string]int64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	groups, rows = map[string]int64{}, map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				kind, _ := dp.Attributes.Value("kind")
				outcome, _ := dp.Attributes.Value("outcome")
				switch m.Name {
				case pgstore.MetricGroups:
					groups[kind.AsString()+"/"+outcome.AsString()] += dp.Value
				case pgstore.MetricGroupRows:
					rows[kind.AsString()] += dp.Value
				}
			}
		}
	}
	return groups, rows
}

func meter() (*sdkmetric.ManualReader, *sdkmetric.MeterProvider) {
	r := sdkmetric.NewManualReader()
	return r, sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
}

// rollBackCompletionGroup sends two completions as one group: one of a
// row that an open transaction holds (a DoTx that reclaimed the record
// after its lease ended) and one of a free row. The group gives up on the
// held row and rolls back: neither caller may be told it was stored by the
// group. The free row's caller stores it on its own while the transaction
// is open; the held row's caller waits for the transaction and is told
// ErrLeaseLost when it committed (takeOver), or stores its outcome when
// it rolled back.
func rollBackCompletionGroup(t *testing.T, pool *pgxpool.Pool, store *pgstore.Store, round string, takeOver bool) {
	t.Helper()
	ctx := context.Background()
	held, free := mustClaim(t, store, "held-"+round), mustClaim(t, store, "free-"+round)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE idempotency_store SET locked_until = now() - interval '1 second'
		WHERE idempotency_key = $1`, held.Key); err != nil {
		t.Fatal(err)
	}
	took, err := store.ClaimTx(ctx, tx, params(t, held.Key))
	if err != nil || took.State != idempotency.ClaimReclaimed {
		t.Fatalf("the transaction's reclaim: %v %v", took.State, err)
	}

	release := holdFlight(t, pool, store, "complete", "flight-"+round)
	heldDone, freeDone := make(chan error, 1), make(chan error, 1)
	go func() { heldDone <- store.Complete(ctx, held, outcomeOf(held.Key)) }()
	go func() { freeDone <- store.Complete(ctx, free, outcomeOf(free.Key)) }()
	waitQueued(t, store, "complete", 2)
	release()

	if err := await(t, "the free row's completion", freeDone); err != nil {
		t.Fatalf("the free row's completion: %v, want stored while the transaction is open", err)
	}
	wantCompleted(t, store, free.Key)
	// The group is over; the held row's caller now waits on its own.
	waitForLockWait(t, pool, tx)
	select {
	case err := <-heldDone:
		t.Fatalf("the held row's completion answered %v while the transaction holding the row is open", err)
	default:
	}
	if !takeOver {
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if err := await(t, "the held row's completion", heldDone); err != nil {
			t.Fatalf("the held row's completion after the transaction rolled back: %v, want stored", err)
		}
		wantCompleted(t, store, held.Key)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := await(t, "the held row's completion", heldDone); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("the held row's completion after the transaction took the lease: %v, want ErrLeaseLost", err)
	}
	rec, err := store.Get(ctx, "usr_group", held.Key)
	if err != nil || rec.Status != idempotency.StatusProcessing || rec.LockVersion != took.Lease.Version {
		t.Fatalf("held record: %s at version %d (%v), want PROCESSING under the transaction's lease %d",
			rec.Status, rec.LockVersion, err, took.Lease.Version)
	}
}

// A completion group that meets a row held by an open transaction rolls
// back, and tells none of its callers "stored": each gets the answer of
// its own statement, and each row ends as that answer says.
func TestGroupCommitRolledBackCompletion(t *testing.T) {
	t.Parallel()
	for name, takeOver := range map[string]bool{"TakenOver": true, "GivenBack": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			reader, mp := meter()
			b := setupWith(t, &pgstore.Config{MeterProvider: mp})
			rollBackCompletionGroup(t, b.pool, b.store, "0", takeOver)
			if groups, _ := groupCounts(t, reader); groups["complete/rolled_back"] != 1 {
				t.Errorf("groups %v: want the one completion group rolled back", groups)
			}
		})
	}
}

// A rolled-back group gives its connection back to the pool alive, also
// through PgBouncer: the pool closes none, so it opens none to replace
// them (and PgBouncer keeps its server connection).
func TestGroupCommitRollbackKeepsConnection(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Direct", "PgBouncer"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			reader, mp := meter()
			cfg := &pgstore.Config{MeterProvider: mp}
			var pool *pgxpool.Pool
			if name == "PgBouncer" {
				pool, cfg.Pooler = pgtest.BouncerPool(t), pgstore.TransactionPooler
			} else {
				pool = pgtest.PoolURL(t, pgtest.MigratedURL(t))
			}
			store := mustStore(t, pool, cfg)
			const rounds = 4
			for i := range rounds {
				rollBackCompletionGroup(t, pool, store, strconv.Itoa(i), i%2 == 0)
			}
			if groups, _ := groupCounts(t, reader); groups["complete/rolled_back"] != rounds {
				t.Fatalf("groups %v: want %d completion groups rolled back", groups, rounds)
			}
			st := pool.Stat()
			if closed := st.NewConnsCount() - int64(st.TotalConns()); closed != 0 {
				t.Errorf("the pool closed %d of the %d connections it opened across %d rolled-back groups; want none",
					closed, st.NewConnsCount(), rounds)
			}
		})
	}
}

// A group whose transaction ends in an error that may have come after the
// commit is not taken for rolled back: each caller resolves its own row.
// The server commits the group and then ends its session (its FATAL takes
// the place of the COMMIT's answer, as when a session is terminated while
// its COMMIT waits for a synchronous standby), or the connection breaks
// after the commit: every claim is acquired under the lease the group
// stored for it (not "in progress": nobody else holds it), every
// completion is stored (not ErrLeaseLost). The server ends the session
// during the COMMIT, before it committed: every caller's row is stored by
// its own statement.
func TestGroupCommitUnknownOutcome(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"claim", "complete"} {
		for _, end := range []string{"TerminatedAfterCommit", "LostAfterCommit", "TerminatedBeforeCommit"} {
			t.Run(kind+"/"+end, func(t *testing.T) {
				t.Parallel()
				unknownOutcome(t, kind, end)
			})
		}
	}
}

func unknownOutcome(t *testing.T, kind, end string) {
	ctx := context.Background()
	b := setup(t)
	proxy, pool := newWireProxy(t, b.url)
	reader, mp := meter()
	store := mustStore(t, pool, &pgstore.Config{MeterProvider: mp})
	keys := []string{"stall-a", "stall-b"}
	var leases []idempotency.Lease
	if kind == "complete" {
		for _, k := range keys {
			leases = append(leases, mustClaim(t, store, k))
		}
	}
	var stall pgx.Tx
	if end == "TerminatedBeforeCommit" {
		stall = stallCommits(t, b.pool)
	}

	release := holdFlight(t, b.pool, store, kind, "flight")
	answers := make([]chan result, len(keys))
	for i, k := range keys {
		answers[i] = make(chan result, 1)
		go func() {
			if kind == "claim" {
				c, err := store.Claim(ctx, params(t, k))
				answers[i] <- result{c, err}
				return
			}
			answers[i] <- result{err: store.Complete(ctx, leases[i], outcomeOf(k))}
		}()
	}
	waitQueued(t, store, kind, len(keys))
	if stall == nil {
		proxy.arm()
	}
	release()

	if stall != nil {
		// The group's session waits in its COMMIT, which has not committed.
		terminate(t, b.pool, blockedBy(t, b.pool, stall))
		if err := stall.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	} else {
		held := await(t, "the group's COMMIT", proxy.held)
		// The server committed the group: its rows are there.
		for _, k := range keys {
			var status string
			if err := b.pool.QueryRow(ctx, `SELECT status FROM idempotency_store WHERE idempotency_key = $1`, k).Scan(&status); err != nil {
				t.Fatalf("%s after the group's commit: %v", k, err)
			}
			if want := map[string]string{"claim": "PROCESSING", "complete": "COMPLETED"}[kind]; status != want {
				t.Fatalf("%s after the group's commit: %s, want %s", k, status, want)
			}
		}
		if end == "TerminatedAfterCommit" {
			terminate(t, b.pool, held.pid)
		} else {
			held.cut()
		}
	}

	for i, k := range keys {
		r := await(t, k, answers[i])
		if r.err != nil {
			t.Fatalf("%s %s: %v", kind, k, r.err)
		}
		if kind == "claim" {
			if r.claim.State != idempotency.ClaimAcquired {
				t.Fatalf("claim %s: %v, want acquired (the record is this caller's)", k, r.claim.State)
			}
			rec, err := store.Get(ctx, "usr_group", k)
			if err != nil || rec.Status != idempotency.StatusProcessing || rec.LockVersion != r.claim.Lease.Version {
				t.Fatalf("record %s: %s at version %d (%v), want PROCESSING under the claim's lease %d",
					k, rec.Status, rec.LockVersion, err, r.claim.Lease.Version)
			}
			if err := store.Complete(ctx, r.claim.Lease, outcomeOf(k)); err != nil {
				t.Fatalf("complete %s under the claim's lease: %v", k, err)
			}
		}
		wantCompleted(t, store, k)
	}
	if groups, _ := groupCounts(t, reader); groups[kind+"/failed"] != 1 {
		t.Errorf("groups %v: want the one %s group counted failed (outcome unknown)", groups, kind)
	}
}

// stallCommits makes every commit that wrote a record whose key starts
// with "stall-" wait, inside its COMMIT and before committing, until the
// returned transaction ends: a deferred trigger takes a lock that the
// transaction holds.
func stallCommits(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	var b [8]byte
	_, _ = rand.Read(b[:])
	lock := int64(binary.BigEndian.Uint64(b[:]) >> 1) // advisory locks are per database: one of its own
	_, err := pool.Exec(ctx, fmt.Sprintf(`
CREATE FUNCTION stall_commit() RETURNS trigger LANGUAGE plpgsql SET lock_timeout = 0 AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(%d);
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER stall_commit AFTER INSERT OR UPDATE ON idempotency_store
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.idempotency_key LIKE 'stall-%%') EXECUTE FUNCTION stall_commit();`, lock))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lock); err != nil {
		t.Fatal(err)
	}
	return tx
}

// blockedBy waits until a session waits for a lock that tx holds, and
// returns its pid.
func blockedBy(t *testing.T, pool *pgxpool.Pool, tx pgx.Tx) uint32 {
	t.Helper()
	ctx := context.Background()
	var holder int32
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(answerWait); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var pid int32
		err := pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)) LIMIT 1`, holder).Scan(&pid)
		if err == nil {
			return uint32(pid)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
	}
	t.Fatal("nobody waits for the transaction's lock")
	return 0
}

// terminate ends a server session, as an operator's pg_terminate_backend
// or a fast shutdown does.
func terminate(t *testing.T, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), `SELECT pg_terminate_backend($1)`, int32(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate session %d: %v %v", pid, ok, err)
	}
}
