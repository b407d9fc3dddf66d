package migrations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotMigrated matches a [*NotMigratedError]: the schema lacks versions
// that a component needs.
var ErrNotMigrated = errors.New("schema not migrated")

// NotMigratedError says which versions a schema lacks, and how to apply
// them.
type NotMigratedError struct {
	// Schema is the connection's current schema: the first schema of its
	// search_path that exists, "" when none does.
	Schema string
	// SearchPath is the connection's search_path, read when the schema
	// has no payonce_migrations.
	SearchPath string
	// Lines are the lines that were checked, as the caller named them.
	Lines []Line
	// Missing are the versions not applied, of those lines and of the
	// lines they need, in version order.
	Missing []Migration
}

// Is reports ErrNotMigrated.
func (e *NotMigratedError) Is(target error) bool { return target == ErrNotMigrated }

func (e *NotMigratedError) Error() string {
	fix := fmt.Sprintf(`run "payonce migrate up" on this database and schema, or from Go migrations.MigrateLines(ctx, pool, %s)`, goLines(e.Lines))
	if e.Schema == "" {
		return fmt.Sprintf("no schema selected: search_path %q names no schema that exists; create it or fix search_path, then %s",
			e.SearchPath, fix)
	}
	return fmt.Sprintf("schema %q lacks %s: %s", e.Schema, describeMissing(e.Missing), fix)
}

// describeMissing names the lines of missing with the versions they lack,
// saying whether a line is absent or older.
func describeMissing(missing []Migration) string {
	var parts []string
	for _, l := range Lines() {
		var names []string
		for _, m := range missing {
			if m.Line == l {
				names = append(names, fmt.Sprintf("%04d_%s", m.Version, m.Name))
			}
		}
		switch {
		case len(names) == 0:
		case len(names) == len(l.Migrations()):
			parts = append(parts, fmt.Sprintf("the %s line (%s)", l, strings.Join(names, ", ")))
		default:
			parts = append(parts, fmt.Sprintf("versions %s of the %s line (an older schema)", strings.Join(names, ", "), l))
		}
	}
	return strings.Join(parts, " and ")
}

// checkSQL reads, in one round trip, which of the versions $1 are applied.
const checkSQL = `SELECT current_schema(), array(SELECT version FROM payonce_migrations WHERE version = ANY($1::int[]))`

// Check reports whether every version of the given lines, and of the lines
// they need, is applied in pool's current schema: nil when they are, a
// [*NotMigratedError] listing the missing versions when they are not. It
// reads payonce_migrations once (one round trip when the schema is
// migrated), so the application's role needs SELECT on it. Versions
// applied beyond those embedded (a newer payonce migrated the schema) do
// not matter.
//
// It returns an error naming an unknown line, or no line at all; other
// errors are the database's.
func Check(ctx context.Context, pool *pgxpool.Pool, lines ...Line) error {
	set, err := closure(lines)
	if err != nil {
		return err
	}
	need := migrationsOf(set)
	versions := make([]int32, len(need))
	for i, m := range need {
		versions[i] = int32(m.Version)
	}
	var schema *string
	var applied []int32
	err = pool.QueryRow(ctx, checkSQL, versions).Scan(&schema, &applied)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable:
		// No payonce_migrations: nothing is applied. The error path may
		// take a second round trip to say where it looked.
		e := &NotMigratedError{Lines: slices.Clone(lines), Missing: need}
		if err := pool.QueryRow(ctx, `SELECT coalesce(current_schema(), ''), current_setting('search_path')`).
			Scan(&e.Schema, &e.SearchPath); err != nil {
			return fmt.Errorf("migrations: check: %w", err)
		}
		return e
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InsufficientPrivilege:
		return fmt.Errorf("migrations: check: the connection's role cannot read payonce_migrations, where payonce records the "+
			"schema's versions: GRANT SELECT ON payonce_migrations TO the application's role: %w", err)
	case err != nil:
		return fmt.Errorf("migrations: check: %w", err)
	}
	have := map[int32]bool{}
	for _, v := range applied {
		have[v] = true
	}
	var missing []Migration
	for _, m := range need {
		if !have[int32(m.Version)] {
			missing = append(missing, m)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	e := &NotMigratedError{Lines: slices.Clone(lines), Missing: missing}
	if schema != nil {
		e.Schema = *schema
	}
	return e
}
