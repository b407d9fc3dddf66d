package ledger_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/payonce/payonce/money"
)

// These tests write raw SQL, bypassing the Go code, to show the database
// itself keeps the ledger's invariants.

// rawTx runs stmts in one transaction and returns the error of the first
// statement that fails, or of COMMIT.
func (b *bundle) rawTx(t *testing.T, stmts ...string) error {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx)
	for _, s := range stmts {
		if _, err := tx.Exec(b.ctx, s); err != nil {
			return err
		}
	}
	return tx.Commit(b.ctx)
}

func wantRefusal(t *testing.T, what string, err error, code, constraint, msg string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != code || pgErr.ConstraintName != constraint || !strings.Contains(pgErr.Message, msg) {
		t.Errorf("%s: error = %v; want SQLSTATE %s, constraint %s, message containing %q", what, err, code, constraint, msg)
	}
}

const (
	insEntry   = `INSERT INTO ledger_entries (key, step) VALUES ('raw', 'raw')`
	lastEntry  = `(SELECT max(id) FROM ledger_entries)`
	stripeEUR  = `(SELECT id FROM ledger_accounts WHERE code = 'provider:stripe' AND currency = 'EUR')`
	paymentEUR = `(SELECT id FROM ledger_accounts WHERE code = 'customer:payments' AND currency = 'EUR')`
)

func insPosting(n, account, currency, amount string) string {
	return `INSERT INTO ledger_postings (entry_id, n, account_id, currency, amount, posted_at, xid) VALUES (` +
		lastEntry + `, ` + n + `, ` + account + `, '` + currency + `', ` + amount + `, now(), '0')`
}

func TestDatabaseRefusesUnbalancedEntries(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	err := b.rawTx(t, insEntry, insPosting("1", stripeEUR, "EUR", "10.00"), insPosting("2", paymentEUR, "EUR", "-9.99"))
	wantRefusal(t, "unbalanced entry", err, pgerrcode.CheckViolation, "ledger_entry_balanced", "EUR postings sum to 0.01")

	// Checking early does not open a gap for postings added afterwards.
	err = b.rawTx(t, insEntry, insPosting("1", stripeEUR, "EUR", "10.00"), insPosting("2", paymentEUR, "EUR", "-10.00"),
		`SET CONSTRAINTS ALL IMMEDIATE`, insPosting("3", stripeEUR, "EUR", "5.00"))
	wantRefusal(t, "posting added after SET CONSTRAINTS ALL IMMEDIATE", err, pgerrcode.CheckViolation, "ledger_entry_balanced", "sum to 5.00")

	err = b.rawTx(t, insEntry)
	wantRefusal(t, "entry without postings", err, pgerrcode.CheckViolation, "ledger_entry_postings", "has 0 posting(s)")

	err = b.rawTx(t, insEntry, insPosting("1", stripeEUR, "EUR", "0"), insPosting("2", paymentEUR, "EUR", "0"))
	wantRefusal(t, "zero postings", err, pgerrcode.CheckViolation, "ledger_postings_amount", "")

	// A balanced raw entry is accepted, and is then closed.
	if err := b.rawTx(t, insEntry, insPosting("1", stripeEUR, "EUR", "10.00"), insPosting("2", paymentEUR, "EUR", "-10.00")); err != nil {
		t.Fatalf("balanced raw entry: %v", err)
	}
	err = b.rawTx(t, insPosting("3", stripeEUR, "EUR", "1.00"), insPosting("4", paymentEUR, "EUR", "-1.00"))
	wantRefusal(t, "postings added to a committed entry", err, pgerrcode.RestrictViolation, "ledger_append_only", "is closed")

	if n := b.count(t, "ledger_entries"); n != 1 {
		t.Fatalf("%d entries; only the balanced one should remain", n)
	}
}

func TestDatabaseRefusesBadPostings(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	stripeJPY := `(SELECT id FROM ledger_accounts WHERE code = 'provider:stripe' AND currency = 'JPY')`

	err := b.rawTx(t, insEntry, insPosting("1", stripeJPY, "EUR", "10.00"), insPosting("2", paymentEUR, "EUR", "-10.00"))
	wantRefusal(t, "EUR posting to a JPY account", err, pgerrcode.CheckViolation, "ledger_postings_currency", "held in JPY")

	err = b.rawTx(t, insEntry, insPosting("1", "999999", "EUR", "10.00"), insPosting("2", paymentEUR, "EUR", "-10.00"))
	wantRefusal(t, "unknown account", err, pgerrcode.ForeignKeyViolation, "ledger_postings_account", "does not exist")

	err = b.rawTx(t, insEntry, insPosting("1", stripeEUR, "EUR", "10.001"), insPosting("2", paymentEUR, "EUR", "-10.001"))
	wantRefusal(t, "three decimals in EUR", err, pgerrcode.CheckViolation, "ledger_postings_precision", "more than 2 decimal places")

	err = b.rawTx(t, insEntry, insPosting("1", stripeJPY, "JPY", "1.5"), insPosting("2", stripeJPY, "JPY", "-1.5"))
	wantRefusal(t, "decimals in JPY", err, pgerrcode.CheckViolation, "ledger_postings_precision", "more than 0 decimal places")

	if n := b.count(t, "ledger_entries") + b.count(t, "ledger_postings"); n != 0 {
		t.Fatalf("refused inserts left %d rows", n)
	}
}

func TestDatabaseIsAppendOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	res, err := b.ledger.Post(b.ctx, charge(t, "k1", eur("10.00")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ledger.Balance(b.ctx, stripe, money.EUR); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO ledger_balance_snapshots (account_id) SELECT id FROM ledger_accounts`); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`UPDATE ledger_postings SET amount = amount * 2`,
		`UPDATE ledger_entries SET description = 'changed'`,
		`UPDATE ledger_accounts SET currency = 'USD'`,
		`UPDATE ledger_balance_snapshots SET balance = 0`,
		`DELETE FROM ledger_postings`,
		`DELETE FROM ledger_entries`,
		`DELETE FROM ledger_accounts`,
		`TRUNCATE ledger_postings`,
		`TRUNCATE ledger_entries CASCADE`,
		`TRUNCATE ledger_accounts`,
	} {
		err := b.rawTx(t, stmt)
		wantRefusal(t, stmt, err, pgerrcode.RestrictViolation, "ledger_append_only", "is append-only")
	}
	if got := b.balance(t, stripe, money.EUR); got != "10.00 EUR" {
		t.Fatalf("balance = %s after refused changes", got)
	}
	var desc string
	if err := b.pool.QueryRow(b.ctx, `SELECT description FROM ledger_entries WHERE id = $1`, res.Entry.ID).Scan(&desc); err != nil || desc != res.Entry.Description {
		t.Fatalf("description = %q, %v", desc, err)
	}
}

// The database, not the writer, dates entries and computes snapshots.
func TestDatabaseComputesStamps(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	err := b.rawTx(t,
		`INSERT INTO ledger_entries (key, step, posted_at, xid) VALUES ('raw', 'raw', '2000-01-01', '1')`,
		insPosting("1", stripeEUR, "EUR", "10.00"), insPosting("2", paymentEUR, "EUR", "-10.00"))
	if err != nil {
		t.Fatal(err)
	}
	var old bool
	if err := b.pool.QueryRow(b.ctx, `SELECT bool_or(posted_at < '2020-01-01') FROM ledger_postings`).Scan(&old); err != nil || old {
		t.Fatalf("a writer back-dated a posting (%v)", err)
	}
	_, err = b.pool.Exec(b.ctx, `INSERT INTO ledger_balance_snapshots (account_id, upto_xid, balance, postings)
		SELECT id, '999999999', 1000000, 1 FROM ledger_accounts WHERE code = 'provider:stripe' AND currency = 'EUR'`)
	if err != nil {
		t.Fatal(err)
	}
	// The snapshot covers the postings of transactions below the cluster's
	// xmin at the time (other tests' transactions may hold it back), and
	// holds their true sum, not the values the INSERT supplied.
	var forged, wrong bool
	err = b.pool.QueryRow(b.ctx, `
		SELECT bool_or(s.upto_xid = '999999999' OR s.balance = 1000000),
		       bool_or(s.balance <> (SELECT coalesce(sum(p.amount), 0) FROM ledger_postings p
		                              WHERE p.account_id = s.account_id AND p.xid < s.upto_xid))
		FROM ledger_balance_snapshots s`).Scan(&forged, &wrong)
	if err != nil || forged || wrong {
		t.Fatalf("snapshot forged %v, wrong %v (%v)", forged, wrong, err)
	}
	if got := b.balance(t, stripe, money.EUR); got != "10.00 EUR" {
		t.Fatalf("balance = %s", got)
	}
}
