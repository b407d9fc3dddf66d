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

//go:embed sql
var files embed.FS

// Migration is one numbered schema version. Versions are numbered in one
// sequence across the lines, in the order they were written.
type Migration struct {
	Version int
	Name    string
	// Line is the line the migration belongs to (its directory).
	Line Line
	SQL  string
}

// All returns every embedded migration, of every line, in version order.
func All() []Migration {
	entries, err := fs.ReadDir(files, "sql")
	if err != nil {
		panic(err) // embedded: cannot fail at run time
	}
	var out []Migration
	for _, dir := range entries {
		line := Line(dir.Name())
		if !dir.IsDir() || !line.Valid() {
			panic(fmt.Sprintf("migrations: sql/%s is not a line's directory (lines: %s)", dir.Name(), lineList(Lines())))
		}
		sqlFiles, err := fs.ReadDir(files, path.Join("sql", dir.Name()))
		if err != nil {
			panic(err)
		}
		for _, e := range sqlFiles {
			name, isSQL := strings.CutSuffix(e.Name(), ".sql")
			num, rest, ok := strings.Cut(name, "_")
			v, err := strconv.Atoi(num)
			if !isSQL || !ok || err != nil || v <= 0 {
				panic(fmt.Sprintf("migrations: file sql/%s/%s is not named NNNN_name.sql", dir.Name(), e.Name()))
			}
			b, err := files.ReadFile(path.Join("sql", dir.Name(), e.Name()))
			if err != nil {
				panic(err)
			}
			out = append(out, Migration{Version: v, Name: rest, Line: line, SQL: string(b)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			panic(fmt.Sprintf("migrations: version %d appears twice (lines %s and %s)", out[i].Version, out[i-1].Line, out[i].Line))
		}
	}
	return out
}

// SQL returns the whole schema, every line, as one script for teams that
// use their own migration tool: each version framed by a comment and its
// own transaction, which also records it in payonce_migrations, so that
// [Migrate], [Check] and the stores' constructors see it applied.
func SQL() string {
	s, err := SQLLines(Lines()...)
	if err != nil {
		panic(err) // every line is known
	}
	return s
}

// SQLLines is [SQL] for the given lines and the lines they need. It
// returns an error naming an unknown line, or no line at all.
func SQLLines(lines ...Line) (string, error) {
	set, err := closure(lines)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(createVersionTable + ";\n\n")
	for _, m := range migrationsOf(set) {
		fmt.Fprintf(&b, "-- payonce migration %04d_%s (line %s)\nBEGIN;\n%s\n", m.Version, m.Name, m.Line, strings.TrimSpace(m.SQL))
		fmt.Fprintf(&b, "INSERT INTO payonce_migrations (version, name) VALUES (%d, '%s');\nCOMMIT;\n\n", m.Version, m.Name)
	}
	return b.String(), nil
}

const createVersionTable = `CREATE TABLE IF NOT EXISTS payonce_migrations (
    version     INT          PRIMARY KEY,
    name        TEXT         NOT NULL,
    applied_at  TIMESTAMPTZ  NOT NULL DEFAULT now()
)`

// lockMigrations serialises migrators of the same schema, not of the whole
// server: tests migrate many schemas of one database in parallel.
const lockMigrations = `SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.payonce_migrations'))`

// Migrate applies every version of every line not yet applied, in version
// order, and returns the versions it applied. It returns an error naming
// the version that failed; the versions before it stay applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	return MigrateLines(ctx, pool, Lines()...)
}

// MigrateLines applies the versions not yet applied of the given lines and
// of the lines they need, in version order, and returns the versions it
// applied. Lines can be added later: migrating another line applies its
// versions, whatever the versions of other lines applied since. It
// returns an error naming an unknown line, or the version that failed;
// the versions before it stay applied.
func MigrateLines(ctx context.Context, pool *pgxpool.Pool, lines ...Line) ([]int, error) {
	set, err := closure(lines)
	if err != nil {
		return nil, err
	}
	var applied []int
	for _, m := range migrationsOf(set) {
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

// Status lists every embedded version, of every line, and whether it is
// applied.
func Status(ctx context.Context, pool *pgxpool.Pool) ([]VersionStatus, error) {
	return StatusLines(ctx, pool, Lines()...)
}

// StatusLines lists the versions of the given lines and of the lines they
// need, in version order, and whether each is applied. It returns an
// error naming an unknown line.
func StatusLines(ctx context.Context, pool *pgxpool.Pool, lines ...Line) ([]VersionStatus, error) {
	set, err := closure(lines)
	if err != nil {
		return nil, err
	}
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
	for _, m := range migrationsOf(set) {
		at, ok := done[m.Version]
		out = append(out, VersionStatus{Migration: m, Applied: ok, AppliedAt: at})
	}
	return out, nil
}
