// Package migrations holds payonce's database schema as embedded, numbered
// SQL files, and the migrator that applies them.
//
// Each version is applied in its own transaction together with its row in
// the payonce_migrations table, so a version is either wholly applied and
// recorded or not at all. [Migrate] is safe when several processes start at
// once: each transaction first takes an advisory lock scoped to the current
// schema, so concurrent migrators queue, and every one but the first finds
// the version already recorded and skips it.
//
// Teams that run their own migration tool can take the SQL from [SQL] (or
// `payonce migrate print`) instead of calling [Migrate].
//
// The schema is created in the connection's current schema (the first
// entry of search_path), so one database can hold several isolated copies.
package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed sql/*.sql
var files embed.FS

// Migration is one numbered schema version.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns every embedded migration in version order.
func All() []Migration {
	entries, err := fs.ReadDir(files, "sql")
	if err != nil {
		panic(err) // embedded: cannot fail at run time
	}
	var out []Migration
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".sql")
		num, rest, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			panic(fmt.Sprintf("migrations: file %q is not named NNNN_name.sql", e.Name()))
		}
		b, err := files.ReadFile(path.Join("sql", e.Name()))
		if err != nil {
			panic(err)
		}
		out = append(out, Migration{Version: v, Name: rest, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			panic(fmt.Sprintf("migrations: version %d appears twice", out[i].Version))
		}
	}
	return out
}

// SQL returns the whole schema as one script, each version framed by a
// comment and its own transaction, for teams that use their own tool.
func SQL() string {
	var b strings.Builder
	for _, m := range All() {
		fmt.Fprintf(&b, "-- payonce migration %04d_%s\nBEGIN;\n%s\n", m.Version, m.Name, strings.TrimSpace(m.SQL))
		fmt.Fprintf(&b, "INSERT INTO payonce_migrations (version, name) VALUES (%d, '%s');\nCOMMIT;\n\n", m.Version, m.Name)
	}
	return createVersionTable + ";\n\n" + b.String()
}

const createVersionTable = `CREATE TABLE IF NOT EXISTS payonce_migrations (
    version     INT          PRIMARY KEY,
    name        TEXT         NOT NULL,
    applied_at  TIMESTAMPTZ  NOT NULL DEFAULT now()
)`

// lockMigrations serialises migrators of the same schema, not of the whole
// server: tests migrate many schemas of one database in parallel.
const lockMigrations = `SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.payonce_migrations'))`

// Migrate applies every version not yet applied, in order, and returns the
// versions it applied. It returns an error naming the version that failed;
// the versions before it stay applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	var applied []int
	for _, m := range All() {
		did, err := apply(ctx, pool, m)
		if err != nil {
			return applied, err
		}
		if did {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

func apply(ctx context.Context, pool *pgxpool.Pool, m Migration) (bool, error) {
	did := false
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockMigrations); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, createVersionTable); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM payonce_migrations WHERE version = $1)`, m.Version).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO payonce_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return err
		}
		did = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("migrations: version %04d_%s: %w", m.Version, m.Name, err)
	}
	return did, nil
}

// VersionStatus says whether one version is applied.
type VersionStatus struct {
	Migration
	Applied   bool
	AppliedAt time.Time
}

// Status lists every embedded version and whether it is applied.
func Status(ctx context.Context, pool *pgxpool.Pool) ([]VersionStatus, error) {
	var present bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('payonce_migrations') IS NOT NULL`).Scan(&present); err != nil {
		return nil, fmt.Errorf("migrations: status: %w", err)
	}
	done := map[int]time.Time{}
	if present {
		rows, err := pool.Query(ctx, `SELECT version, applied_at FROM payonce_migrations`)
		if err != nil {
			return nil, fmt.Errorf("migrations: status: %w", err)
		}
		for rows.Next() {
			var v int
			var at time.Time
			if err := rows.Scan(&v, &at); err != nil {
				return nil, fmt.Errorf("migrations: status: %w", err)
			}
			done[v] = at
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("migrations: status: %w", err)
		}
	}
	var out []VersionStatus
	for _, m := range All() {
		at, ok := done[m.Version]
		out = append(out, VersionStatus{Migration: m, Applied: ok, AppliedAt: at})
	}
	return out, nil
}
