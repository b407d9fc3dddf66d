package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"strings"
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

// countedStore counts the claims that reach the database; the store's
// other methods (WatchChanges among them) are its own.
type countedStore struct {
	*pgstore.Store
	claims atomic.Int64
}

func (s *countedStore) Claim(ctx context.Context, p idempotency.ClaimParams) (idempotency.Claim, error) {
	s.claims.Add(1)
	return s.Store.Claim(ctx, p)
}

// instance is one process of an application: its own pool, store and
// executor with a replay cache, on a database shared with the others.
type instance struct {
	name   string
	store  *countedStore
	exec   *idempotency.Executor
	events chan idempotency.ReplayCacheEvent
	// app is the application_name of its connections, listener included.
	app string
}

// testScope returns a scope of this test only: the change channel is the
// database's, and other tests' schemas announce their changes on it too.
func testScope(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "usr_" + hex.EncodeToString(b[:])
}

// newInstance starts an instance on url whose cache is told of changes to
// scope's records. listen, when set, adjusts Config.ListenConfig (nil:
// the listener connects as the pool does). It returns once the cache's
// listener has confirmed it listens.
func newInstance(t *testing.T, url, name, scope string, rc idempotency.ReplayCache, listen func(*pgx.ConnConfig)) *instance {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	in := &instance{name: name, app: "payonce_test_" + name + "_" + hex.EncodeToString(b[:]),
		events: make(chan idempotency.ReplayCacheEvent, 1000)}
	cfg.ConnConfig.RuntimeParams["application_name"] = in.app
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var scfg pgstore.Config
	if listen != nil {
		scfg.ListenConfig = cfg.ConnConfig.Copy()
		listen(scfg.ListenConfig)
	}
	in.store = &countedStore{Store: mustStore(t, pool, &scfg)}
	if rc.MaxAge == 0 {
		rc.MaxAge = time.Hour // no entry ends while the test runs, however slowly
	}
	if rc.SyncInterval == 0 {
		rc.SyncInterval = time.Hour // no confirmation lapses either: the reports alone are tested
	}
	rc.Observe = func(ev idempotency.ReplayCacheEvent) {
		if ev.Kind != idempotency.CacheInvalidated || ev.Scope == scope {
			in.events <- ev
		}
	}
	in.exec, err = idempotency.New(in.store, &idempotency.Config{Retention: time.Hour, ReplayCache: &rc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.exec.Close() })
	in.await(t, "its listener's first confirmation", func(ev idempotency.ReplayCacheEvent) bool {
		return ev.Kind == idempotency.CacheSynced
	})
	return in
}

// await returns the instance's first cache event that matches, failing
// the test if none comes within a minute.
func (in *instance) await(t *testing.T, what string, match func(idempotency.ReplayCacheEvent) bool) idempotency.ReplayCacheEvent {
	t.Helper()
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for {
		select {
		case ev := <-in.events:
			if match(ev) {
				return ev
			}
		case <-timeout.C:
			t.Fatalf("%s: no %s within a minute", in.name, what)
		}
	}
}

// awaitInvalidated waits for the instance's cache to drop key's entry.
func (in *instance) awaitInvalidated(t *testing.T, scope, key string) {
	t.Helper()
	in.await(t, "invalidation of the record", func(ev idempotency.ReplayCacheEvent) bool {
		return ev.Kind == idempotency.CacheInvalidated && ev.Scope == scope && ev.KeySHA256 == idempotency.KeySHA256(key)
	})
}

// runs counts the executions of actions across instances.
type runs struct {
	mu   sync.Mutex
	n    int
	next func(n int) (idempotency.Response, error)
}

func (r *runs) action(context.Context) (idempotency.Response, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	return r.next(r.n)
}

func (r *runs) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// do runs req through the instance and reports how many claims reached
// the database, with the answer's status and body.
func (in *instance) do(t *testing.T, req idempotency.Request, r *runs) (claims int64, res idempotency.Result, err error) {
	t.Helper()
	before := in.store.claims.Load()
	res, err = in.exec.Do(context.Background(), req, r.action)
	return in.store.claims.Load() - before, res, err
}

// wantReplay runs req and stops the test unless it was a replay of body
// that took claims claims.
func (in *instance) wantReplay(t *testing.T, what string, req idempotency.Request, r *runs, claims int64, body string) {
	t.Helper()
	n, res, err := in.do(t, req, r)
	var failed *idempotency.FailedError
	if (err != nil && !errors.As(err, &failed)) || !res.Replayed || string(res.Response.Body) != body || n != claims {
		t.Fatalf("%s, %s: %d claims, %+v %v; want a replay of %q with %d claims", in.name, what, n, res, err, body, claims)
	}
}

// Two instances cache a finished record's replay; the record is then
// changed outside the claim path: deleted by the runbook's SQL, superseded
// by SupersedeTx, erased. Both instances learn of it as it commits, and
// answer what the database now holds.
func TestReplayCacheLearnsOfChanges(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// first is the first run's outcome, recorded with firstBody.
		first     func(n int) (idempotency.Response, error)
		firstBody string
		// change changes the record of (scope, key) by hand or by the store.
		change func(t *testing.T, b bundle, scope, key string)
		// runsAfter is how many runs there were in all once both instances
		// asked again; after is what they were answered.
		runsAfter int
		after     string
	}{{
		name: "RunbookDeletesAFailure",
		first: func(int) (idempotency.Response, error) {
			return idempotency.Response{}, idempotency.Permanent(errors.New("unknown sku"), idempotency.Response{Code: 422, Body: []byte("unknown sku")})
		},
		firstBody: "unknown sku",
		// docs/runbook.md, "Process a poison message again": audited, FAILED
		// only, in one transaction.
		change: func(t *testing.T, b bundle, scope, key string) {
			err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(context.Background(), `INSERT INTO operator_audit (actor, command, scope, key_sha256, detail)
SELECT current_user, 'forget poison message', user_id, encode(sha256(convert_to(idempotency_key, 'UTF8')), 'hex'),
       jsonb_build_object('reason', 'INC-2001: sku book-99 created', 'response_code', response_code)
  FROM idempotency_store
 WHERE user_id = $1 AND idempotency_key = $2 AND status = 'FAILED'`, scope, key); err != nil {
					return err
				}
				tag, err := tx.Exec(context.Background(), `DELETE FROM idempotency_store WHERE user_id = $1 AND idempotency_key = $2 AND status = 'FAILED'`, scope, key)
				if err == nil && tag.RowsAffected() != 1 {
					err = errors.New(tag.String())
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		},
		runsAfter: 2, after: "run 2",
	}, {
		name: "Supersede",
		first: func(int) (idempotency.Response, error) {
			return idempotency.Response{}, idempotency.Permanent(errors.New("declined"), idempotency.Response{Code: 402, Body: []byte("declined")})
		},
		firstBody: "declined",
		change: func(t *testing.T, b bundle, scope, key string) {
			if !supersede(t, b, scope, key, completion(idempotency.StatusCompleted, "charged after all")) {
				t.Fatal("nothing superseded")
			}
		},
		runsAfter: 1, after: "charged after all",
	}, {
		name: "ErasureBlanksTheResponse",
		first: func(int) (idempotency.Response, error) {
			return idempotency.Response{Code: 201, Body: []byte("jane@example.com")}, nil
		},
		firstBody: "jane@example.com",
		// The record stays, so that the key is still not run again; what
		// it said is gone.
		change: func(t *testing.T, b bundle, scope, _ string) {
			if _, err := b.pool.Exec(context.Background(), `UPDATE idempotency_store
   SET response_code = 410, response_body = NULL, response_raw = ''::bytea
 WHERE user_id = $1 AND status <> 'PROCESSING'`, scope); err != nil {
				t.Fatal(err)
			}
		},
		runsAfter: 1, after: "",
	}, {
		name: "ErasureDeletesTheScope",
		first: func(int) (idempotency.Response, error) {
			return idempotency.Response{Code: 201, Body: []byte("jane@example.com")}, nil
		},
		firstBody: "jane@example.com",
		change: func(t *testing.T, b bundle, scope, _ string) {
			if _, err := b.pool.Exec(context.Background(), `DELETE FROM idempotency_store WHERE user_id = $1`, scope); err != nil {
				t.Fatal(err)
			}
		},
		runsAfter: 2, after: "run 2",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			scope := testScope(t)
			req := idempotency.Request{Scope: scope, Key: scope + "_charge_k1", Fingerprint: mustFP(t, "k1")}
			a := newInstance(t, b.url, "A", scope, idempotency.ReplayCache{}, nil)
			c := newInstance(t, b.url, "B", scope, idempotency.ReplayCache{}, nil)
			r := &runs{next: func(n int) (idempotency.Response, error) {
				if n == 1 {
					return tc.first(n)
				}
				return idempotency.Response{Code: 201, Body: []byte("run " + string(rune('0'+n)))}, nil
			}}
			if _, _, err := a.do(t, req, r); err != nil && !errors.Is(err, idempotency.ErrFailed) {
				t.Fatal(err)
			}
			for _, in := range []*instance{a, c} {
				in.wantReplay(t, "filling", req, r, 1, tc.firstBody)
				in.wantReplay(t, "cached", req, r, 0, tc.firstBody)
			}

			tc.change(t, b, req.Scope, req.Key)
			a.awaitInvalidated(t, req.Scope, req.Key)
			c.awaitInvalidated(t, req.Scope, req.Key)

			for _, in := range []*instance{a, c} {
				n, res, err := in.do(t, req, r)
				if err != nil || n != 1 || string(res.Response.Body) != tc.after {
					t.Fatalf("%s after the change: %d claims, %+v %v; want %q from the database", in.name, n, res, err, tc.after)
				}
			}
			if got := r.count(); got != tc.runsAfter {
				t.Fatalf("%d runs, want %d", got, tc.runsAfter)
			}
			// The new answer is cached in its turn (B replayed it from the
			// database in every case).
			c.wantReplay(t, "cached again", req, r, 0, tc.after)
		})
	}
}

// gatedDialer connects the listener through connections the test can cut
// silently (a partition: what the listener sends is lost, nothing comes
// back) and whose new connections it can hold back.
type gatedDialer struct {
	mu   sync.Mutex
	open chan struct{} // closed while dials may proceed
	// dialing receives a value when a dial waits at the gate.
	dialing chan struct{}
	last    *cuttable
}

func newGatedDialer() *gatedDialer {
	g := &gatedDialer{open: make(chan struct{}), dialing: make(chan struct{}, 16)}
	close(g.open)
	return g
}

func (g *gatedDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
	default:
		g.dialing <- struct{}{}
		select {
		case <-open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cc := &cuttable{Conn: c}
	g.mu.Lock()
	g.last = cc
	g.mu.Unlock()
	return cc, nil
}

// hold makes later dials wait until release.
func (g *gatedDialer) hold() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedDialer) release() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

func (g *gatedDialer) current() *cuttable {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last
}

// cuttable is a connection whose writes can be made to vanish.
type cuttable struct {
	net.Conn
	cut atomic.Bool
}

func (c *cuttable) Write(b []byte) (int, error) {
	if c.cut.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// A listener whose connection the server terminates (pg_terminate_backend)
// flushes its cache, which serves nothing until the listener has
// reconnected: any change meanwhile went unseen.
func TestReplayCacheListenerTerminated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	scope := testScope(t)
	req := idempotency.Request{Scope: scope, Key: scope + "_charge_k1", Fingerprint: mustFP(t, "k1")}
	gate := newGatedDialer()
	var listenerApp string
	in := newInstance(t, b.url, "A", scope, idempotency.ReplayCache{}, func(c *pgx.ConnConfig) {
		listenerApp = c.RuntimeParams["application_name"] + "_listener"
		c.RuntimeParams["application_name"] = listenerApp
		c.DialFunc = gate.dial
	})
	r := &runs{next: func(int) (idempotency.Response, error) {
		return idempotency.Response{Code: 201, Body: []byte("done")}, nil
	}}
	if _, _, err := in.do(t, req, r); err != nil {
		t.Fatal(err)
	}
	in.wantReplay(t, "filling", req, r, 1, "done")
	in.wantReplay(t, "cached", req, r, 0, "done")

	gate.hold()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
 WHERE application_name = $1`, listenerApp).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminated %d listeners: %v", n, err)
	}
	in.await(t, "flush for the lost connection", func(ev idempotency.ReplayCacheEvent) bool {
		return ev.Kind == idempotency.CacheFlushed && ev.Err != nil
	})
	<-gate.dialing // the listener is reconnecting, and held
	in.wantReplay(t, "while reconnecting", req, r, 1, "done")
	in.wantReplay(t, "while reconnecting, again", req, r, 1, "done")

	gate.release()
	in.await(t, "confirmation of the new connection", func(ev idempotency.ReplayCacheEvent) bool {
		return ev.Kind == idempotency.CacheSynced
	})
	in.wantReplay(t, "filling again", req, r, 1, "done")
	in.wantReplay(t, "cached again", req, r, 0, "done")
}

// A listener whose connection dies silently (a partition: no error, no
// answer) finds out by its ping, unanswered within SyncInterval: it
// flushes the cache and listens on a new connection.
func TestReplayCacheListenerPartitioned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	scope := testScope(t)
	gate := newGatedDialer()
	in := newInstance(t, b.url, "A", scope, idempotency.ReplayCache{SyncInterval: 500 * time.Millisecond},
		func(c *pgx.ConnConfig) { c.DialFunc = gate.dial })
	cut := gate.current()
	cut.cut.Store(true)
	in.await(t, "flush for the silent connection", func(ev idempotency.ReplayCacheEvent) bool {
		return ev.Kind == idempotency.CacheFlushed && ev.Err != nil
	})
	in.await(t, "confirmation of a new connection", func(ev idempotency.ReplayCacheEvent) bool {
		return ev.Kind == idempotency.CacheSynced && gate.current() != cut
	})
}

// listenChanges returns a connection that listens on the change channel.
func listenChanges(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "LISTEN "+pgstore.ChangesChannel); err != nil {
		t.Fatal(err)
	}
	return conn
}

// announcement is a change channel's payload.
type announcement struct {
	Scope     string `json:"scope"`
	KeySHA256 string `json:"key_sha256"`
}

// nextAnnouncement returns the next payload on conn that match accepts
// (the channel is the database's: other tests' schemas announce on it too).
func nextAnnouncement(t *testing.T, conn *pgx.Conn, match func(payload string, a announcement) bool) announcement {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("no announcement: %v", err)
		}
		var a announcement
		if err := json.Unmarshal([]byte(n.Payload), &a); err != nil {
			t.Fatalf("announcement %q: %v", n.Payload, err)
		}
		if match(n.Payload, a) {
			return a
		}
	}
}

// The change channel names a record by its scope and its key's hash, never
// the key; expired records and records in progress announce nothing,
// whatever is done to them, and neither does an update that changes
// nothing a replay answers.
func TestChangeAnnouncements(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	scope := testScope(t)
	conn := listenChanges(t, b.url)
	key := func(k string) string { return scope + "_charge_" + k }
	finish := func(k string, status idempotency.Status) {
		t.Helper()
		cl, err := b.store.Claim(ctx, idempotency.ClaimParams{Scope: scope, Key: key(k), Fingerprint: mustFP(t, k),
			LockTimeout: time.Minute, Retention: time.Hour})
		if err != nil || cl.State != idempotency.ClaimAcquired {
			t.Fatalf("claim %s: %+v %v", k, cl, err)
		}
		if status != idempotency.StatusProcessing {
			if err := b.store.Complete(ctx, cl.Lease, completion(status, "body of "+k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := b.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Silent: a record in progress (heartbeat, delete), an update that
	// changes nothing, an expired record (updated, pruned).
	finish("busy", idempotency.StatusProcessing)
	exec(`UPDATE idempotency_store SET locked_until = now() + interval '1 minute' WHERE idempotency_key = $1`, key("busy"))
	exec(`DELETE FROM idempotency_store WHERE idempotency_key = $1`, key("busy"))
	finish("same", idempotency.StatusCompleted)
	exec(`UPDATE idempotency_store SET status = status WHERE idempotency_key = $1`, key("same"))
	exec(`UPDATE idempotency_store SET completed_at = now(), lock_version = lock_version + 1 WHERE idempotency_key = $1`, key("same"))
	finish("old", idempotency.StatusCompleted)
	exec(`UPDATE idempotency_store SET expires_at = now() - interval '1 second' WHERE idempotency_key = $1`, key("old")) // announced: its expiry moved
	exec(`UPDATE idempotency_store SET response_raw = NULL WHERE idempotency_key = $1`, key("old"))                      // expired by now: silent
	if n, err := b.store.Prune(ctx, 100); err != nil || n != 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	// Announced: a finished, unexpired record deleted.
	finish("gone", idempotency.StatusFailed)
	exec(`DELETE FROM idempotency_store WHERE idempotency_key = $1`, key("gone"))

	// Announced: each finished record changed by one statement that also
	// updates a record in progress and one it leaves as it was.
	finish("pair1", idempotency.StatusCompleted)
	finish("pair2", idempotency.StatusFailed)
	finish("pairbusy", idempotency.StatusProcessing)
	finish("pairsame", idempotency.StatusCompleted)
	exec(`UPDATE idempotency_store SET response_code = CASE WHEN idempotency_key = $4 THEN response_code ELSE 299 END
		WHERE idempotency_key IN ($1, $2, $3, $4)`, key("pair1"), key("pair2"), key("pairbusy"), key("pairsame"))
	// A last announced change: anything announced in between would come
	// before it.
	finish("last", idempotency.StatusCompleted)
	exec(`DELETE FROM idempotency_store WHERE idempotency_key = $1`, key("last"))

	for i, want := range []string{key("old"), key("gone")} {
		a := nextAnnouncement(t, conn, func(payload string, a announcement) bool {
			if strings.Contains(payload, scope+"_") {
				t.Fatalf("an announcement holds a key: %s", payload)
			}
			return a.Scope == scope
		})
		if a.KeySHA256 != idempotency.KeySHA256(want) {
			t.Fatalf("announcement %d: %+v, want the record of %s", i, a, want)
		}
	}
	pair := map[string]bool{idempotency.KeySHA256(key("pair1")): true, idempotency.KeySHA256(key("pair2")): true}
	for range 2 {
		a := nextAnnouncement(t, conn, func(_ string, a announcement) bool { return a.Scope == scope })
		if !pair[a.KeySHA256] {
			t.Fatalf("announcement %+v: want pair1 and pair2 (in either order), each once", a)
		}
		delete(pair, a.KeySHA256)
	}
	if a := nextAnnouncement(t, conn, func(_ string, a announcement) bool { return a.Scope == scope }); a.KeySHA256 != idempotency.KeySHA256(key("last")) {
		t.Fatalf("announcement %+v after the pair: want only the last record's", a)
	}
}

// A TRUNCATE announces a change to every record, and the caches forget
// everything (not parallel: every cache of the database hears it).
func TestChangeAnnouncementOfATruncate(t *testing.T) {
	b := setup(t)
	conn := listenChanges(t, b.url)
	scope := testScope(t)
	req := idempotency.Request{Scope: scope, Key: scope + "_charge_k1", Fingerprint: mustFP(t, "k1")}
	in := newInstance(t, b.url, "A", scope, idempotency.ReplayCache{}, nil)
	r := &runs{next: func(n int) (idempotency.Response, error) {
		return idempotency.Response{Code: 201, Body: []byte("run " + string(rune('0'+n)))}, nil
	}}
	if _, _, err := in.do(t, req, r); err != nil {
		t.Fatal(err)
	}
	in.wantReplay(t, "filling", req, r, 1, "run 1")
	in.wantReplay(t, "cached", req, r, 0, "run 1")
	if _, err := b.pool.Exec(context.Background(), `TRUNCATE idempotency_store`); err != nil {
		t.Fatal(err)
	}
	nextAnnouncement(t, conn, func(payload string, _ announcement) bool { return payload == "{}" })
	in.await(t, "flush for the TRUNCATE", func(ev idempotency.ReplayCacheEvent) bool {
		return ev.Kind == idempotency.CacheFlushed && ev.Err == nil
	})
	if n, res, err := in.do(t, req, r); err != nil || n != 1 || res.Replayed || r.count() != 2 {
		t.Fatalf("after the TRUNCATE: %d claims, %+v %v, %d runs", n, res, err, r.count())
	}
}

// Behind a transaction pooler without a direct connection to listen on,
// the store reports no changes: replay caches over it are bounded by
// MaxAge alone.
func TestWatchChangesBehindATransactionPooler(t *testing.T) {
	t.Parallel()
	store := mustStore(t, pgtest.BouncerPool(t), &pgstore.Config{Pooler: pgstore.TransactionPooler})
	err := store.WatchChanges(context.Background(), idempotency.WatchParams{SyncInterval: time.Second})
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "Config.ListenConfig") {
		t.Fatalf("err = %v, want errors.ErrUnsupported naming Config.ListenConfig", err)
	}
}
