package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/payonce/payonce/idempotency"
)

// ChangesChannel is the channel on which the database announces changes
// to finished, unexpired records (the triggers of the replaycache
// migration line, [migrations.LineReplayCache]): a delete, or an update
// of what a replay answers (key, scope, fingerprint, status, response,
// expiry), by the store (SupersedeTx) or by hand. The payload is
// JSON, {"scope": ..., "key_sha256": ...}, or {} for a TRUNCATE.
const ChangesChannel = "payonce_idempotency_changed"

var _ idempotency.ChangeWatcher = (*Store)(nil)

// changeNote is the payload of a ChangesChannel notification.
type changeNote struct {
	Scope     *string `json:"scope"`
	KeySHA256 *string `json:"key_sha256"`
}

// Backoff between attempts to (re)connect the listener: the first retry
// at once, then doubling from reconnectMin up to reconnectMax, with
// jitter.
const (
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 5 * time.Second
	// connectTimeout bounds a connection attempt when the configuration
	// sets none.
	connectTimeout = 10 * time.Second
)

// WatchChanges implements [idempotency.ChangeWatcher]: an executor with an
// idempotency.ReplayCache over this store calls it, so that a record
// deleted, erased or superseded (by SupersedeTx, by another instance, or
// by hand in psql) stops being replayed from memory everywhere as its
// transaction commits.
//
// It holds one connection of its own, outside the pool, made with
// Config.ListenConfig or the pool's configuration (and its BeforeConnect
// hook), and LISTENs on [ChangesChannel]. Every SyncInterval it pings that
// connection: an answer confirms (OnSync) every change committed before
// the ping was sent; no answer within SyncInterval, or any error, is a
// lost connection: OnReset with the error, then a new connection, the
// first at once and then with a growing backoff (up to 5s). Every
// connection starts with OnReset(nil) once it listens, then OnSync. The
// channel is the database's: stores in other schemas of the database
// announce on it too, which costs at most a needless eviction of an entry
// with the same scope and key.
//
// The changes are announced by the triggers of the replaycache migration
// line. Each connection, once it listens, checks through the pool that
// they are there and enabled, before it confirms anything: without them
// WatchChanges returns an error matching [ErrNoAnnouncements] that says
// how to apply the line, and the executor's cache serves nothing
// (pgstore.NewExecutor refuses such a schema before that).
//
// It returns nil when ctx ends, once its connections are closed (pgx may
// take up to 15s over one lost to a partition), and an error matching
// errors.ErrUnsupported at once when the store is behind a transaction
// pooler (Config.Pooler) without Config.ListenConfig: such a pooler
// cannot hold a LISTEN.
func (s *Store) WatchChanges(ctx context.Context, p idempotency.WatchParams) error {
	if s.pooler == TransactionPooler && s.listenConfig == nil {
		return fmt.Errorf("pgstore: a transaction pooler cannot hold a LISTEN; set Config.ListenConfig to a direct connection: %w",
			errors.ErrUnsupported)
	}
	if p.SyncInterval <= 0 {
		return &idempotency.InvalidError{Field: "WatchParams.SyncInterval", Reason: fmt.Sprintf("must be positive, got %s", p.SyncInterval)}
	}
	if p.Clock == nil {
		p.Clock = time.Now
	}
	// cleanups are the connections pgx may still be closing: WatchChanges
	// returns only once they are closed.
	var cleanups []<-chan struct{}
	defer func() {
		for _, c := range cleanups {
			<-c
		}
	}()
	failures := 0
	for {
		synced, err := s.listen(ctx, p, &cleanups)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrNoAnnouncements) {
			// Not a lost connection: nothing to wait out. The executor
			// logs it, and its cache serves nothing.
			return fmt.Errorf("pgstore: change listener: %w", err)
		}
		cleanups = slices.DeleteFunc(cleanups, func(c <-chan struct{}) bool {
			select {
			case <-c:
				return true
			default:
				return false
			}
		})
		if synced {
			failures = 0
		}
		p.OnReset(fmt.Errorf("pgstore: change listener: %w", err))
		if failures > 0 {
			wait := min(reconnectMin<<(failures-1), reconnectMax)
			wait = wait/2 + rand.N(wait/2+1)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
		failures = min(failures+1, 16)
	}
}

// listen runs one connection of WatchChanges until it fails or ctx ends;
// synced reports whether it confirmed at least once. The connection's
// cleanup is added to cleanups.
func (s *Store) listen(ctx context.Context, p idempotency.WatchParams, cleanups *[]<-chan struct{}) (synced bool, err error) {
	cfg, err := s.listenerConfig(ctx)
	if err != nil {
		return false, err
	}
	// Notifications are dispatched as they are read, by whichever call is
	// reading (the wait, or a ping), before that call returns: so when a
	// ping's answer arrives, every notification sent before it has been
	// reported.
	var bad error
	cfg.OnNotification = func(_ *pgconn.PgConn, n *pgconn.Notification) {
		if n.Channel != ChangesChannel || bad != nil {
			return
		}
		var note changeNote
		switch err := json.Unmarshal([]byte(n.Payload), &note); {
		case err != nil:
			bad = fmt.Errorf("notification payload is not JSON: %w", err)
		case note.Scope == nil || note.KeySHA256 == nil:
			p.OnReset(nil) // a TRUNCATE: every record
		default:
			p.OnChange(*note.Scope, *note.KeySHA256)
		}
	}
	// A context that ends interrupts a read by a deadline on the socket,
	// never by a cancel request (a new connection each time).
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	if cfg.ConnectTimeout > 0 {
		cctx, cancel = context.WithTimeout(ctx, cfg.ConnectTimeout)
	}
	conn, err := pgconn.ConnectConfig(cctx, cfg)
	cancel()
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(cctx)
		cancel()
		// After an error pgx closes the connection by itself, in a
		// goroutine that drains it for up to 15s: the connection is dead
		// to us, cut that short.
		_ = conn.Conn().Close()
		*cleanups = append(*cleanups, conn.CleanupDone())
	}()
	sent := p.Clock()
	lastPing := time.Now()
	if err := conn.Exec(ctx, "LISTEN "+ChangesChannel).Close(); err != nil {
		return false, fmt.Errorf("listen: %w", err)
	}
	// Nothing is confirmed to the cache unless the triggers that announce
	// the changes are there and enabled.
	if err := s.checkAnnouncements(ctx); err != nil {
		return false, err
	}
	// Everything committed before this connection listened went unseen.
	p.OnReset(nil)
	p.OnSync(sent)
	// failed says why the connection must end after a call that returned
	// err: a payload that names nothing, ctx's end, or err itself.
	failed := func(op string, err error) error {
		switch {
		case bad != nil:
			return bad
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return fmt.Errorf("%s: %w", op, err)
		}
		return nil
	}
	for {
		wctx, cancel := context.WithDeadline(ctx, lastPing.Add(p.SyncInterval))
		err := conn.WaitForNotification(wctx)
		cancel()
		if pgconn.Timeout(err) && ctx.Err() == nil {
			err = nil // time to ping
		} else if err == nil && bad == nil {
			continue // dispatched by OnNotification
		}
		if err := failed("wait", err); err != nil {
			return true, err
		}
		sent, lastPing = p.Clock(), time.Now()
		pctx, cancel := context.WithTimeout(ctx, p.SyncInterval)
		err = conn.Ping(pctx)
		cancel()
		if err := failed("ping", err); err != nil {
			return true, err
		}
		p.OnSync(sent)
	}
}

// announcementTriggers are the triggers of the replaycache line
// (migration 0020) that announce changes on ChangesChannel.
var announcementTriggers = []string{"idempotency_finished_changed", "idempotency_finished_deleted", "idempotency_truncated"}

// announcementsSQL counts the announcement triggers that fire in an
// ordinary session on the store's table (the pool's schema).
const announcementsSQL = `SELECT count(*) FROM pg_trigger
 WHERE tgrelid = to_regclass('idempotency_store') AND tgname = ANY($1) AND tgenabled IN ('O', 'A')`

// ErrNoAnnouncements matches the error of a change listener (and so of a
// replay cache) on a schema whose idempotency_store does not announce
// changes: the replaycache migration line is not applied, or its
// triggers were dropped or disabled.
var ErrNoAnnouncements = errors.New("pgstore: idempotency_store announces no changes")

// checkAnnouncements returns an error matching ErrNoAnnouncements unless
// every announcement trigger is on the store's table and enabled. It asks
// through the pool, whose search_path names the store's schema (a
// listener's own configuration may not), within connectTimeout (a busy
// pool may make it wait; until it answers, nothing is confirmed). Any
// other error is the connection's: the listener tries again.
func (s *Store) checkAnnouncements(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	var n int
	if err := s.pool.QueryRow(cctx, announcementsSQL, announcementTriggers).Scan(&n); err != nil {
		return fmt.Errorf("checking the change announcements: %w", err)
	}
	if n != len(announcementTriggers) {
		return fmt.Errorf("%w: %d of its %d triggers are there and enabled; a replay cache needs them: "+
			"apply the replaycache line (`payonce migrate up --line replaycache`, or migrations.MigrateLines(ctx, pool, migrations.LineReplayCache)) "+
			"and do not disable its triggers", ErrNoAnnouncements, n, len(announcementTriggers))
	}
	return nil
}

// listenerConfig returns the configuration of the listener's connection.
func (s *Store) listenerConfig(ctx context.Context) (*pgconn.Config, error) {
	if s.listenConfig != nil {
		return s.listenConfig.Config.Copy(), nil
	}
	pc := s.pool.Config()
	if pc.BeforeConnect != nil {
		if err := pc.BeforeConnect(ctx, pc.ConnConfig); err != nil {
			return nil, fmt.Errorf("BeforeConnect: %w", err)
		}
	}
	return pc.ConnConfig.Config.Copy(), nil
}

// listenConfigOf returns the copy of cfg.ListenConfig the store keeps.
func listenConfigOf(cfg *Config) *pgx.ConnConfig {
	if cfg == nil || cfg.ListenConfig == nil {
		return nil
	}
	return cfg.ListenConfig.Copy()
}
