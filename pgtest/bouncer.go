package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/pgtest/localpg"
)

var (
	bouncerOnce sync.Once
	bouncer     *localpg.Bouncer
	bouncerErr  error
)

// BouncerPool returns a pool through PgBouncer in transaction pooling
// mode (started once per test binary in front of TEST_DATABASE_URL's
// server) on a fresh database of its own, migrated through the bouncer,
// configured with pgstore.ForTransactionPooler; the pool is closed and
// the database dropped when the test ends. A missing pgbouncer fails the
// test with how to install it: tests never skip.
func BouncerPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	base := BaseURL(t)
	bouncerOnce.Do(func() {
		bouncer, bouncerErr = localpg.StartBouncer(context.Background(), base)
	})
	if bouncerErr != nil {
		t.Fatalf("pgtest: %v", bouncerErr)
	}
	a := adminPool(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	db := "t_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := a.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	cfg, err := pgxpool.ParseConfig(bouncer.URLFor(db))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	pgstore.ForTransactionPooler(cfg)
	cfg.MaxConns = 8
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: connect through pgbouncer: %v", err)
	}
	t.Cleanup(func() {
		p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := a.Exec(ctx, "DROP DATABASE "+db+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: drop database %s: %v", db, err)
		}
	})
	if _, err := migrations.Migrate(ctx, p); err != nil {
		t.Fatalf("pgtest: migrate through pgbouncer: %v", err)
	}
	return p
}

// StopBouncer stops the PgBouncer [BouncerPool] started, if any: call it
// from TestMain after the tests ran.
func StopBouncer() {
	if bouncer != nil {
		bouncer.Stop()
	}
}
