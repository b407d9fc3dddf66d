package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ApplyVersion applies one version, whatever its line, as the single
// sequence migrator before the lines did: it lets tests build a database
// that the old migrator left at some version.
func ApplyVersion(ctx context.Context, pool *pgxpool.Pool, version int) error {
	for _, m := range All() {
		if m.Version == version {
			_, err := apply(ctx, pool, m)
			return err
		}
	}
	return fmt.Errorf("no version %d", version)
}
