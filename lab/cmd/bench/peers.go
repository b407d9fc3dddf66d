package main

// Peers: replicas of the other designs an idempotency layer on PostgreSQL
// takes, run by the same harness, on tables of the same shape as
// idempotency_store (CREATE TABLE ... (LIKE idempotency_store INCLUDING
// ALL)), over the same pool, with the same fingerprint and response. Each
// is a correct implementation of its design: a new key is claimed
// PROCESSING under a token and completed under it, a replay returns the
// stored response and runs nothing. None of them has payonce's extra
// guarantees (fencing on reclaim, foreign-scope refusal, expiry); they are
// here for their cost.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
)

// peer is one design: its table, and its claim+complete and replay cycles.
type peer struct {
	name, table string
	// claim claims key and returns (isNew, token, stored body).
	claim func(ctx context.Context, pool *pgxpool.Pool, key, fp string) (bool, int64, []byte, error)
}

var (
	errReplayRan  = errors.New("peer: a replay executed")
	errInProgress = errors.New("peer: in progress") // never on the bench's paths: they fail on it
)

func peers() []peer {
	return []peer{
		{
			// A lease+token library: every claim is an UPDATE that takes a
			// new token, even on a completed key, with RETURNING (on a
			// PROCESSING key only once its lease ran out: a takeover); a
			// missing row is inserted.
			name: "lease+token, writes on replay", table: "peer_lease",
			claim: func(ctx context.Context, pool *pgxpool.Pool, key, fp string) (bool, int64, []byte, error) {
				for {
					var status string
					var token int64
					var raw []byte
					err := pool.QueryRow(ctx, `UPDATE peer_lease
						   SET lock_version = lock_version + 1,
						       locked_until = CASE WHEN status = 'PROCESSING' THEN now() + interval '30 seconds' ELSE locked_until END
						 WHERE idempotency_key = $1 AND user_id = $2 AND (status <> 'PROCESSING' OR locked_until < now())
						RETURNING status, lock_version, response_raw`, key, scope).Scan(&status, &token, &raw)
					if err == nil {
						return status == "PROCESSING", token, raw, nil // a takeover runs the action
					}
					if !errors.Is(err, pgx.ErrNoRows) {
						return false, 0, nil, err
					}
					err = pool.QueryRow(ctx, `INSERT INTO peer_lease (idempotency_key, user_id, fingerprint, status, lock_version, locked_until, expires_at)
						VALUES ($1, $2, $3, 'PROCESSING', 1, now() + interval '30 seconds', now() + interval '1 day')
						ON CONFLICT DO NOTHING RETURNING lock_version`, key, scope, fp).Scan(&token)
					if err == nil {
						return true, token, nil, nil
					}
					if !errors.Is(err, pgx.ErrNoRows) {
						return false, 0, nil, err
					}
					// The row exists: a live lease (in progress), or one
					// inserted since the UPDATE.
					var live bool
					if err := pool.QueryRow(ctx, `SELECT status = 'PROCESSING' AND locked_until >= now() FROM peer_lease
						WHERE idempotency_key = $1 AND user_id = $2`, key, scope).Scan(&live); err == nil && live {
						return false, 0, nil, errInProgress
					} else if err != nil && !errors.Is(err, pgx.ErrNoRows) {
						return false, 0, nil, err
					}
				}
			},
		},
		{
			// A hand-written pgx client: read; when nothing is there,
			// insert PROCESSING (the unique key decides a race: the loser
			// reads again).
			name: "plain pgx read, then insert", table: "peer_plain",
			claim: func(ctx context.Context, pool *pgxpool.Pool, key, fp string) (bool, int64, []byte, error) {
				for {
					var status string
					var token int64
					var raw []byte
					err := pool.QueryRow(ctx, `SELECT status, lock_version, response_raw FROM peer_plain WHERE idempotency_key = $1 AND user_id = $2`,
						key, scope).Scan(&status, &token, &raw)
					if err == nil {
						if status == "PROCESSING" {
							return false, 0, nil, errInProgress
						}
						return false, token, raw, nil
					}
					if !errors.Is(err, pgx.ErrNoRows) {
						return false, 0, nil, err
					}
					err = pool.QueryRow(ctx, `INSERT INTO peer_plain (idempotency_key, user_id, fingerprint, status, lock_version, locked_until, expires_at)
						VALUES ($1, $2, $3, 'PROCESSING', 1, now() + interval '30 seconds', now() + interval '1 day')
						ON CONFLICT DO NOTHING RETURNING lock_version`, key, scope, fp).Scan(&token)
					if !errors.Is(err, pgx.ErrNoRows) {
						return err == nil, token, nil, err
					}
				}
			},
		},
		{
			// One upsert: INSERT ... ON CONFLICT DO UPDATE RETURNING, which
			// tells a new row (xmax = 0) from an existing one in one round
			// trip, and writes a new row version on every conflict.
			name: "INSERT .. ON CONFLICT DO UPDATE", table: "peer_upsert",
			claim: func(ctx context.Context, pool *pgxpool.Pool, key, fp string) (bool, int64, []byte, error) {
				var isNew bool
				var status string
				var token int64
				var raw []byte
				err := pool.QueryRow(ctx, upsertClaimSQL, key, scope, fp).Scan(&isNew, &status, &token, &raw)
				if err == nil && !isNew && status == "PROCESSING" {
					return false, 0, nil, errInProgress
				}
				return isNew, token, raw, err
			},
		},
	}
}

// upsertClaimSQL is the upsert peer's claim: $1 key, $2 scope, $3
// fingerprint.
const upsertClaimSQL = `INSERT INTO peer_upsert (idempotency_key, user_id, fingerprint, status, lock_version, locked_until, expires_at)
	VALUES ($1, $2, $3, 'PROCESSING', 1, now() + interval '30 seconds', now() + interval '1 day')
	ON CONFLICT (idempotency_key, user_id) DO UPDATE SET fingerprint = peer_upsert.fingerprint
	RETURNING xmax = 0, status, lock_version, response_raw`

// peerCompleteSQL is every peer's completion in table: $1 key, $2
// scope, $3 the claim's token, $4 the response's header JSON, $5 its body.
func peerCompleteSQL(table string) string {
	return `UPDATE ` + table + `
	   SET status = 'COMPLETED', response_code = 201, response_body = $4, response_raw = $5,
	       locked_until = NULL, completed_at = now(), expires_at = now() + interval '1 day'
	 WHERE idempotency_key = $1 AND user_id = $2 AND status = 'PROCESSING' AND lock_version = $3`
}

// plainPeer returns the index of the hand-written read-then-insert client,
// the one an uncached replay is compared with.
func plainPeer(ps []peer) int {
	for i, p := range ps {
		if p.table == "peer_plain" {
			return i
		}
	}
	panic("bench: no peer_plain")
}

// preparePeers creates the peers' tables and seeds each with the replay
// keys bench's own table holds.
func preparePeers(ctx context.Context, pool *pgxpool.Pool) error {
	for _, p := range peers() {
		if err := copyStore(ctx, pool, p.table); err != nil {
			return fmt.Errorf("peer %s: %w", p.name, err)
		}
	}
	return nil
}

// cycleWorker claims a new key and completes it under its token.
func (p peer) cycleWorker(pool *pgxpool.Pool, fp idempotency.Fingerprint, prefix string) worker {
	complete := peerCompleteSQL(p.table)
	return func(ctx context.Context, rng *rand.Rand, i int) error {
		key := fmt.Sprintf("%s%d", prefix, rng.Uint64())
		isNew, token, _, err := p.claim(ctx, pool, key, string(fp))
		if err != nil {
			return err
		}
		if !isNew {
			return fmt.Errorf("peer %s: a new key was found", p.name)
		}
		tag, err := pool.Exec(ctx, complete, key, scope, token, `{"header":{"Content-Type":["application/json"]}}`, body)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("peer %s: completion matched %d rows", p.name, tag.RowsAffected())
		}
		return err
	}
}

// replayWorker claims a completed key and checks the stored response.
func (p peer) replayWorker(pool *pgxpool.Pool, fp idempotency.Fingerprint) worker {
	return func(ctx context.Context, rng *rand.Rand, i int) error {
		isNew, _, raw, err := p.claim(ctx, pool, strconv.Itoa(1+rng.IntN(replayKeys)), string(fp))
		switch {
		case err != nil:
			return err
		case isNew:
			return errReplayRan
		case string(raw) != string(body):
			return fmt.Errorf("peer %s: replayed %q", p.name, raw)
		}
		return nil
	}
}

// open counts a peer's claims never completed.
func (p peer) open(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	return openClaims(ctx, pool, p.table)
}

// openClaims counts the claims of table never completed.
func openClaims(ctx context.Context, pool *pgxpool.Pool, table string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE status = 'PROCESSING'`).Scan(&n)
	return n, err
}

// copyStore creates table in pool's schema with idempotency_store's
// columns, constraints and indexes but not its triggers (LIKE ...
// INCLUDING ALL copies no trigger), filled with its rows and analyzed.
func copyStore(ctx context.Context, pool *pgxpool.Pool, table string) error {
	for _, sql := range []string{`CREATE TABLE ` + table + ` (LIKE idempotency_store INCLUDING ALL)`,
		`INSERT INTO ` + table + ` SELECT * FROM idempotency_store`, `VACUUM ANALYZE ` + table} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", table, err)
		}
	}
	return nil
}
