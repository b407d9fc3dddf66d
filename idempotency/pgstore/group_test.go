package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest"
)

func groupStore(t *testing.T) bundle {
	t.Helper()
	b := setup(t)
	// One flight of each kind: every caller that arrives while one is in
	// flight waits for the next group.
	b.store.SetGroupFlights(1)
	return b
}

func params(t *testing.T, key string) idempotency.ClaimParams {
	return idempotency.ClaimParams{Scope: "usr_group", Key: key, Fingerprint: mustFP(t, key),
		LockTimeout: time.Minute, Retention: time.Hour}
}

// Many goroutines, on distinct keys and on a few shared ones, through the
// executor: each key's action runs once, every answer for a key is the
// same, nothing is left PROCESSING, and the store did gather callers into
// groups.
func TestGroupCommitOneExecutionPerKey(t *testing.T) {
	t.Parallel()
	b := groupStore(t)
	exec, err := pgstore.NewExecutor(b.store, &idempotency.Config{LockTimeout: time.Minute, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const workers, rounds, shared = 48, 20, 4
	var runs sync.Map // key -> *atomic.Int64
	var answers sync.Map
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*2)
	do := func(key string) {
		req := idempotency.Request{Scope: "usr_group", Key: key, Fingerprint: mustFP(t, key)}
		res, err := exec.Do(context.Background(), req, func(context.Context) (idempotency.Response, error) {
			n, _ := runs.LoadOrStore(key, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			return idempotency.Response{Code: 201, Body: []byte(key)}, nil
		})
		var inProgress *idempotency.InProgressError
		switch {
		case errors.As(err, &inProgress):
			return
		case err != nil:
			errs <- fmt.Errorf("%s: %w", key, err)
			return
		}
		if prev, loaded := answers.LoadOrStore(key, string(res.Response.Body)); loaded && prev != string(res.Response.Body) {
			errs <- fmt.Errorf("%s answered %q and %q", key, prev, res.Response.Body)
		}
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				do(fmt.Sprintf("distinct-%d-%d", w, r))
				do(fmt.Sprintf("shared-%d", (w+r)%shared))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	count := 0
	runs.Range(func(k, n any) bool {
		count++
		if got := n.(*atomic.Int64).Load(); got != 1 {
			t.Errorf("key %s: action ran %d times, want 1", k, got)
		}
		return true
	})
	if want := workers*rounds + shared; count != want {
		t.Errorf("%d keys ran their action, want %d", count, want)
	}
	var open int
	if err := b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM idempotency_store WHERE status <> 'COMPLETED'`).Scan(&open); err != nil || open != 0 {
		t.Errorf("%d records not completed (%v)", open, err)
	}
	if b.store.GroupedRows() == 0 {
		t.Error("no claim or completion went in a group: the test proves nothing")
	}
}

// A row held by a long transaction (a DoTx's uncommitted claim of the
// same key, a FenceTx's lock) holds up the caller of that row only: the
// others, queued behind it or in its group, finish while the transaction
// is still open.
func TestGroupCommitNotHeldUpByALongTransaction(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"claim", "complete"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := groupStore(t)
			ctx := context.Background()
			// Leases to complete, taken before the long transaction.
			leases := make([]idempotency.Lease, 32)
			for i := range leases {
				c, err := b.store.Claim(ctx, params(t, fmt.Sprintf("other-%d", i)))
				if err != nil || c.State != idempotency.ClaimAcquired {
					t.Fatalf("claim: %+v, %v", c, err)
				}
				leases[i] = c.Lease
			}
			held, err := b.store.Claim(ctx, params(t, "held"))
			if err != nil {
				t.Fatal(err)
			}
			tx, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if kind == "claim" {
				c, err := b.store.ClaimTx(ctx, tx, params(t, "in-tx"))
				if err != nil || c.State != idempotency.ClaimAcquired {
					t.Fatalf("ClaimTx: %+v, %v", c, err)
				}
			} else if err := b.store.FenceTx(ctx, tx, held.Lease); err != nil {
				t.Fatal(err)
			}
			blocked := make(chan error, 1)
			go func() {
				if kind == "claim" {
					c, err := b.store.Claim(ctx, params(t, "in-tx"))
					if err == nil && c.State != idempotency.ClaimInProgress {
						err = fmt.Errorf("claim of the key the transaction holds: %v, want in progress", c.State)
					}
					blocked <- err
					return
				}
				blocked <- b.store.Complete(ctx, held.Lease, idempotency.Completion{Status: idempotency.StatusCompleted, Retention: time.Hour})
			}()
			waitForLockWait(t, b.pool, tx)

			others := make(chan error, len(leases))
			for i, l := range leases {
				go func() {
					if kind == "claim" {
						c, err := b.store.Claim(ctx, params(t, fmt.Sprintf("new-%d", i)))
						if err == nil && c.State != idempotency.ClaimAcquired {
							err = fmt.Errorf("claim of a new key: %v", c.State)
						}
						others <- err
						return
					}
					others <- b.store.Complete(ctx, l, idempotency.Completion{Status: idempotency.StatusCompleted, Retention: time.Hour})
				}()
			}
			deadline := time.After(30 * time.Second)
			for range leases {
				select {
				case err := <-others:
					if err != nil {
						t.Error(err)
					}
				case <-deadline:
					t.Fatal("callers of other keys are still waiting behind the open transaction")
				}
			}
			select {
			case err := <-blocked:
				t.Fatalf("the caller of the held row returned while the transaction is open: %v", err)
			default:
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-blocked; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// waitForLockWait waits until a session waits for a lock that tx holds.
func waitForLockWait(t *testing.T, pool *pgxpool.Pool, tx pgx.Tx) {
	t.Helper()
	blockedBy(t, pool, tx)
}

// In one group, a completion under a lease that was lost stores nothing
// and answers ErrLeaseLost; the others of its group are stored.
func TestGroupCommitFencesEachRow(t *testing.T) {
	t.Parallel()
	b := groupStore(t)
	ctx := context.Background()
	const n = 64
	leases := make([]idempotency.Lease, n)
	for i := range leases {
		c, err := b.store.Claim(ctx, params(t, fmt.Sprintf("k-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = c.Lease
	}
	for i := 0; i < n; i += 4 {
		leases[i].Version-- // a holder whose lease was taken over
	}
	before := b.store.GroupedRows()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, l := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.store.Complete(ctx, l, idempotency.Completion{Status: idempotency.StatusCompleted,
				Response: idempotency.Response{Code: 200, Body: []byte(l.Key)}, Retention: time.Hour})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		rec, gerr := b.store.Get(ctx, "usr_group", leases[i].Key)
		if gerr != nil {
			t.Fatal(gerr)
		}
		if i%4 == 0 {
			if !errors.Is(err, idempotency.ErrLeaseLost) || rec.Status != idempotency.StatusProcessing {
				t.Errorf("stale lease %d: %v, record %s; want ErrLeaseLost and PROCESSING", i, err, rec.Status)
			}
			continue
		}
		if err != nil || rec.Status != idempotency.StatusCompleted || string(rec.Response.Body) != leases[i].Key {
			t.Errorf("lease %d: %v, record %s %q", i, err, rec.Status, rec.Response.Body)
		}
	}
	if b.store.GroupedRows() == before {
		t.Error("no completion went in a group: the test proves nothing")
	}
}

// Group statements carry every kind of outcome (headers, no headers, an
// empty body, binary bytes, FAILED) exactly as a caller's own statement
// would, whatever the pool's exec mode and through PgBouncer in
// transaction mode.
func TestGroupCommitExecModes(t *testing.T) {
	t.Parallel()
	modes := map[string]pgx.QueryExecMode{
		"CacheStatement": pgx.QueryExecModeCacheStatement, "CacheDescribe": pgx.QueryExecModeCacheDescribe,
		"Exec": pgx.QueryExecModeExec, "SimpleProtocol": pgx.QueryExecModeSimpleProtocol,
	}
	for _, name := range []string{"CacheStatement", "CacheDescribe", "Exec", "SimpleProtocol", "PgBouncer"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var pool *pgxpool.Pool
			cfg := &pgstore.Config{}
			if name == "PgBouncer" {
				pool, cfg.Pooler = pgtest.BouncerPool(t), pgstore.TransactionPooler
			} else {
				pc, err := pgxpool.ParseConfig(pgtest.MigratedURL(t))
				if err != nil {
					t.Fatal(err)
				}
				pc.ConnConfig.DefaultQueryExecMode, pc.MaxConns = modes[name], 8
				if pool, err = pgxpool.NewWithConfig(context.Background(), pc); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(pool.Close)
			}
			store := mustStore(t, pool, cfg)
			store.SetGroupFlights(1)
			ctx := context.Background()
			const workers, perWorker = 24, 6
			want := map[string]idempotency.Completion{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perWorker {
						key := fmt.Sprintf("mode-%d-%d", w, i)
						c, err := store.Claim(ctx, params(t, key))
						if err != nil || c.State != idempotency.ClaimAcquired {
							t.Errorf("claim %s: %+v, %v", key, c, err)
							return
						}
						done := idempotency.Completion{Status: idempotency.StatusCompleted, Retention: time.Hour}
						switch i % 3 {
						case 0:
							done.Response = idempotency.Response{Code: 201, Body: []byte(`{"id":"` + key + `", "n": 1}`),
								Header: http.Header{"Content-Type": {"application/json"}, "X-Key": {key, "second"}}}
						case 1:
							done.Response = idempotency.Response{Code: 204}
						case 2:
							done.Status = idempotency.StatusFailed
							done.Response = idempotency.Response{Code: 402, Body: []byte{0, 1, 2, 0xff, '\''}}
						}
						mu.Lock()
						want[key] = done
						mu.Unlock()
						if err := store.Complete(ctx, c.Lease, done); err != nil {
							t.Errorf("complete %s: %v", key, err)
						}
					}
				}()
			}
			wg.Wait()
			for key, done := range want {
				rec, err := store.Get(ctx, "usr_group", key)
				if err != nil {
					t.Fatal(err)
				}
				got := rec.Response
				if rec.Status != done.Status || got == nil || got.Code != done.Response.Code ||
					!bytes.Equal(got.Body, done.Response.Body) || !reflect.DeepEqual(got.Header, done.Response.Header) {
					t.Errorf("%s: stored %s %+v, want %s %+v", key, rec.Status, got, done.Status, done.Response)
				}
			}
			if store.GroupedRows() == 0 {
				t.Error("no claim or completion went in a group: the test proves nothing")
			}
		})
	}
}

// The instruments count what group commit did. A group that meets a row
// held by a longer transaction is counted rolled_back, and its callers
// still get their answers: here the one flight is held by a caller
// waiting for one open transaction, two callers queue behind it, and after
// the stall they go as a group that meets another open transaction's row.
func TestGroupCommitMetrics(t *testing.T) {
	t.Parallel()
	reader, mp := meter()
	pool := pgtest.PoolURL(t, pgtest.MigratedURL(t))
	store := mustStore(t, pool, &pgstore.Config{MeterProvider: mp})
	store.SetGroupFlights(1)
	ctx := context.Background()

	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 {
				c, err := store.Claim(ctx, params(t, fmt.Sprintf("load-%d-%d", w, i)))
				if err == nil {
					err = store.Complete(ctx, c.Lease, idempotency.Completion{Status: idempotency.StatusCompleted, Retention: time.Hour})
				}
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()

	holders := make([]pgx.Tx, 2)
	for i, key := range []string{"held-1", "held-2"} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := store.ClaimTx(ctx, tx, params(t, key)); err != nil {
			t.Fatal(err)
		}
		holders[i] = tx
	}
	answers := make(chan idempotency.ClaimState, 3)
	claim := func(key string) {
		c, err := store.Claim(ctx, params(t, key))
		if err != nil {
			t.Error(err)
		}
		answers <- c.State
	}
	go claim("held-2") // takes the flight and waits for holders[1]
	waitForLockWait(t, pool, holders[1])
	// Both queue well before the first of them stalls.
	store.SetGroupStall(time.Second)
	go claim("held-1")
	go claim("free")
	if got := <-answers; got != idempotency.ClaimAcquired {
		t.Fatalf("the free key's claim: %v, want acquired while the transactions are open", got)
	}
	for _, tx := range holders {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if got := <-answers; got != idempotency.ClaimInProgress {
			t.Errorf("a held key's claim: %v, want in progress", got)
		}
	}

	groups, rows := groupCounts(t, reader)
	for _, kind := range []string{"claim", "complete"} {
		if n := groups[kind+"/committed"]; n == 0 || rows[kind] < 2*n {
			t.Errorf("%s: %d committed groups with %d rows; want groups of two rows or more", kind, n, rows[kind])
		}
	}
	if rows["claim"]+rows["complete"] != store.GroupedRows() {
		t.Errorf("rows counted %v, stored %d", rows, store.GroupedRows())
	}
	if groups["claim/rolled_back"] == 0 {
		t.Errorf("groups %v: the group that met the open transaction's row was not counted rolled_back", groups)
	}
}

// Groups form only while callers outnumber the pool's connections: as many
// callers as connections run their own statements (the server shares the
// WAL flush of commits that wait together), and callers beyond the pool's
// size are gathered into groups, with the store's defaults.
func TestGroupCommitOnlyWhenConnectionsRunOut(t *testing.T) {
	t.Parallel()
	url := pgtest.MigratedURL(t)
	run := func(t *testing.T, conns int32, callers int) int64 {
		pc, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		pc.MaxConns = conns
		pool, err := pgxpool.NewWithConfig(context.Background(), pc)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		store := mustStore(t, pool, nil)
		ctx := context.Background()
		var wg sync.WaitGroup
		for w := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 40 {
					key := fmt.Sprintf("spare-%d-%d-%d", conns, w, i)
					c, err := store.Claim(ctx, params(t, key))
					if err != nil || c.State != idempotency.ClaimAcquired {
						t.Errorf("claim %s: %+v, %v", key, c, err)
						return
					}
					if err := store.Complete(ctx, c.Lease, idempotency.Completion{Status: idempotency.StatusCompleted,
						Response: idempotency.Response{Code: 200}, Retention: time.Hour}); err != nil {
						t.Errorf("complete %s: %v", key, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return store.GroupedRows()
	}
	if n := run(t, 8, 8); n != 0 {
		t.Errorf("8 callers on 8 connections: %d rows went in groups, want none (no more callers than connections)", n)
	}
	if n := run(t, 2, 16); n == 0 {
		t.Error("16 callers on 2 connections: no group formed")
	}
}
