package localpg

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/migrations"
)

// WithSearchPath returns base with its search_path set to schema (a pgx
// runtime parameter), so that every connection made from it works in that
// schema.
func WithSearchPath(base, schema string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("localpg: database URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// FreshSchema drops schema if it exists, creates it, applies every payonce
// migration in it, and returns a URL whose search_path selects it. The demo
// and the benchmarks work in schemas of their own, so they can run against
// any database without touching its other tables.
func FreshSchema(ctx context.Context, base, schema string) (string, error) {
	return FreshSchemaLines(ctx, base, schema, migrations.Lines()...)
}

// FreshSchemaLines is [FreshSchema] with only the given migration lines
// (and those they need) applied.
func FreshSchemaLines(ctx context.Context, base, schema string, lines ...migrations.Line) (string, error) {
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", fmt.Errorf("localpg: connect: %w", err)
	}
	defer admin.Close(ctx)
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE; CREATE SCHEMA "+ident); err != nil {
		return "", fmt.Errorf("localpg: schema %s: %w", schema, err)
	}
	u, err := WithSearchPath(base, schema)
	if err != nil {
		return "", err
	}
	p, err := pgxpool.New(ctx, u)
	if err != nil {
		return "", fmt.Errorf("localpg: connect: %w", err)
	}
	defer p.Close()
	if _, err := migrations.MigrateLines(ctx, p, lines...); err != nil {
		return "", err
	}
	return u, nil
}
