package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/pgtest"
)

// coreOnly returns a pool on a fresh schema with the idempotency line
// alone: what a service without a replay cache migrates.
func coreOnly(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.PoolURL(t, pgtest.SchemaURL(t))
	if _, err := migrations.MigrateLines(context.Background(), pool, migrations.LineIdempotency); err != nil {
		t.Fatal(err)
	}
	return pool
}

// A replay cache needs the triggers of the replaycache line, which
// announce changes made to finished records outside the claim path.
// pgstore.NewExecutor refuses a cache on a schema without the line, naming
// it and how to apply it; an executor without a cache needs nothing more
// than the core line.
func TestReplayCacheNeedsItsLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := mustStore(t, coreOnly(t), nil)

	_, err := pgstore.NewExecutor(store, &idempotency.Config{ReplayCache: &idempotency.ReplayCache{}})
	var ne *migrations.NotMigratedError
	if !errors.As(err, &ne) || !errors.Is(err, migrations.ErrNotMigrated) {
		t.Fatalf("NewExecutor with a ReplayCache on a core-only schema: %v, want a *migrations.NotMigratedError", err)
	}
	for _, s := range []string{"pgstore.NewExecutor: Config.ReplayCache: ", "lacks the replaycache line (0020_change_announcements)",
		`"payonce migrate up"`, "migrations.MigrateLines(ctx, pool, migrations.LineReplayCache)"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q: %v", s, err)
		}
	}

	exec := mustExecutor(t, store, nil)
	t.Cleanup(func() { _ = exec.Close() })
	r := childRequest("no-cache")
	for i := range 2 {
		res, err := exec.Do(ctx, r, func(context.Context) (idempotency.Response, error) {
			return idempotency.Response{Code: 201, Body: []byte("done")}, nil
		})
		if err != nil || res.Replayed != (i == 1) {
			t.Fatalf("call %d without a cache: %+v, %v", i, res, err)
		}
	}

	if _, err := migrations.MigrateLines(ctx, store.Pool(), migrations.LineReplayCache); err != nil {
		t.Fatal(err)
	}
	cached := mustExecutor(t, store, &idempotency.Config{ReplayCache: &idempotency.ReplayCache{}})
	_ = cached.Close()
}

// An executor built by idempotency.New over pgstore (which checks no
// migration line) on a schema whose announcements are missing, or
// disabled, gets no confirmation from the store's listener: the listener
// stops with an error matching pgstore.ErrNoAnnouncements that says how to
// apply the line, and the cache serves nothing: every replay goes to the
// database. With the guard in the listener removed, the cache is
// confirmed and serves replays that no change would ever evict.
func TestReplayCacheWithoutAnnouncementsServesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	disabled := pgtest.Pool(t)
	if _, err := disabled.Exec(ctx, `ALTER TABLE idempotency_store DISABLE TRIGGER idempotency_finished_changed`); err != nil {
		t.Fatal(err)
	}
	for name, pool := range map[string]*pgxpool.Pool{"core line only": coreOnly(t), "a trigger disabled": disabled} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := &countedStore{Store: mustStore(t, pool, nil)}
			events := make(chan idempotency.ReplayCacheEvent, 100)
			exec, err := idempotency.New(store, &idempotency.Config{Retention: time.Hour, ReplayCache: &idempotency.ReplayCache{
				MaxAge: time.Hour, SyncInterval: time.Hour, Observe: func(ev idempotency.ReplayCacheEvent) { events <- ev },
			}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = exec.Close() })

			timeout := time.NewTimer(time.Minute)
			defer timeout.Stop()
			for done := false; !done; {
				select {
				case ev := <-events:
					switch {
					case ev.Kind == idempotency.CacheSynced:
						t.Fatal("the listener confirmed the cache without the announcements")
					case ev.Kind == idempotency.CacheFlushed && errors.Is(ev.Err, pgstore.ErrNoAnnouncements):
						if !strings.Contains(ev.Err.Error(), "payonce migrate up --line replaycache") {
							t.Fatalf("the listener's error says not how to fix it: %v", ev.Err)
						}
						done = true
					}
				case <-timeout.C:
					t.Fatal("no flush with pgstore.ErrNoAnnouncements within a minute")
				}
			}

			r := childRequest("uncached")
			for i := range 3 {
				before := store.claims.Load()
				res, err := exec.Do(ctx, r, func(context.Context) (idempotency.Response, error) {
					return idempotency.Response{Code: 201, Body: []byte("done")}, nil
				})
				if err != nil || res.Replayed != (i > 0) || store.claims.Load()-before != 1 {
					t.Fatalf("call %d: %+v, %v, %d claims; want every call at the database", i, res, err, store.claims.Load()-before)
				}
			}
		})
	}
}
