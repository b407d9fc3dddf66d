package payments_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/payonce/payonce/migrations"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
)

// New refuses a schema that lacks the payments line or a line it needs (a
// core-only schema, here), naming what is missing and the command that
// applies it, instead of failing the first charge with `relation
// "payment_intents" does not exist`; the lines added later, it works.
func TestNewChecksSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prov := setup(t).client.Provider("stripe")
	pool := pgtest.PoolURL(t, pgtest.SchemaURL(t))
	if _, err := migrations.MigrateLines(ctx, pool, migrations.LineIdempotency); err != nil {
		t.Fatal(err)
	}

	_, err := payments.New(pool, []provider.Provider{prov}, nil)
	if !errors.Is(err, migrations.ErrNotMigrated) {
		t.Fatalf("New on a core-only schema: %v, want migrations.ErrNotMigrated", err)
	}
	for _, s := range []string{"payments.New: schema ", "the ledger line (0002_ledger)", "the payments line (0004_payment_intents, ",
		`"payonce migrate up"`, "migrations.MigrateLines(ctx, pool, migrations.LinePayments)"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q: %v", s, err)
		}
	}

	if _, err := migrations.MigrateLines(ctx, pool, migrations.LinePayments); err != nil {
		t.Fatal(err)
	}
	if _, err := payments.New(pool, []provider.Provider{prov}, nil); err != nil {
		t.Fatalf("New once the payments line is applied: %v", err)
	}
}
