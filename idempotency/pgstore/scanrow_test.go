package pgstore_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest"
)

// A claim's row is decoded by the store itself when it comes in the binary
// format (every replay's row, see scanrow.go). Every shape a record can
// have (finished with headers and body, failed without either, live,
// tombstoned, an empty body, times before 2000 and at microsecond
// precision) must come out exactly as pgx's Scan gives it, from both
// statements that return it; in the text format of the simple protocol
// pgx scans it.
func TestClaimRowScanIsPgxScan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.MigratedURL(t)
	pool := pgtest.PoolURL(t, url)
	fp := "f0e1d2c3b4a5968778695a4b3c2d1e0ff0e1d2c3b4a5968778695a4b3c2d1e0f"
	if _, err := pool.Exec(ctx, `INSERT INTO idempotency_store
		(idempotency_key, user_id, fingerprint, status, response_code, response_body, response_raw, lock_version, locked_until, completed_at, expires_at, refuse_until)
		VALUES
		('done', 'scan', $1, 'COMPLETED', 201, '{"header":{"Content-Type":["application/json"],"X-A":["1","2"]}}', '\x7b226f6b223a747275657d', 1073741823, NULL, now(), now() + interval '1 day', NULL),
		('failed', 'scan', $1, 'FAILED', NULL, NULL, NULL, 0, NULL, now(), '2999-01-02 03:04:05.123456+00', NULL),
		('empty', 'scan', $1, 'COMPLETED', 204, '{}', '\x', 5, NULL, now(), now() + interval '1 hour', NULL),
		('live', 'scan', $1, 'PROCESSING', NULL, NULL, NULL, 42, now() + interval '30 seconds', NULL, now() + interval '1 day', NULL),
		('old', 'scan', $1, 'COMPLETED', 500, NULL, '\x00ff', 7, NULL, '1999-12-31 23:59:59.999999+00', '1970-01-01 00:00:00.000001+00', NULL),
		('tomb', 'scan', $1, 'COMPLETED', NULL, NULL, NULL, 9, NULL, NULL, '1999-06-30 12:00:00.5+00', now() + interval '90 days')`, fp); err != nil {
		t.Fatal(err)
	}
	sql := pgstore.Statements()
	check := func(t *testing.T, conn *pgx.Conn, wantDecoded bool) {
		for _, key := range []string{"done", "failed", "empty", "live", "old", "tomb"} {
			for _, stmt := range []struct {
				name string
				args []any
			}{
				{"read", []any{key, "scan"}},
				{"claim", []any{key, "scan", fp, 30.0, 86400.0, false, 0.0, "", int64(0)}},
			} {
				rows, err := conn.Query(ctx, sql[stmt.name], stmt.args...)
				if err != nil {
					t.Fatal(err)
				}
				if !rows.Next() {
					t.Fatalf("%s of %q: no row (%v)", stmt.name, key, rows.Err())
				}
				own, viaPgx, decoded, err := pgstore.ScanClaimRowBothWays(rows)
				rows.Close()
				if err != nil {
					t.Fatalf("%s of %q: pgx's Scan: %v", stmt.name, key, err)
				}
				if decoded != wantDecoded {
					t.Fatalf("%s of %q: decoded by the store %v, want %v", stmt.name, key, decoded, wantDecoded)
				}
				if decoded && !reflect.DeepEqual(own, viaPgx) {
					t.Errorf("%s of %q:\n store's decoding %+v\n pgx's Scan       %+v", stmt.name, key, own, viaPgx)
				}
			}
		}
		// A new claim's lock version, and the record's, by pgx.
		key := fmt.Sprintf("new-%v", wantDecoded)
		v, err := pgstore.ScanVersion(conn.QueryRow(ctx, sql["claim_new"], key, "scan", fp, 30.0, 86400.0, 0.0, "", int64(0)))
		if err != nil {
			t.Fatal(err)
		}
		var stored int32
		if err := conn.QueryRow(ctx, `SELECT lock_version FROM idempotency_store WHERE idempotency_key = $1 AND user_id = 'scan'`, key).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if v != stored {
			t.Errorf("new claim's lock version: store's scan %d, the record's %d", v, stored)
		}
	}
	t.Run("binary", func(t *testing.T) {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		check(t, conn, true)
	})
	t.Run("simple protocol", func(t *testing.T) {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		check(t, conn, false)
	})
}
