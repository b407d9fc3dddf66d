package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/payonce/payonce/money"
)

// sqlBalance returns the account's balance now, and how many postings after
// its latest snapshot that sum read.
const sqlBalance = `
SELECT a.id, b.balance::text, b.tail
FROM ledger_accounts a CROSS JOIN LATERAL ledger_account_balance(a.id) b
WHERE a.code = $1 AND a.currency = $2`

// sqlSnapshot records a snapshot; its trigger computes the row.
const sqlSnapshot = `INSERT INTO ledger_balance_snapshots (account_id) VALUES ($1) ON CONFLICT DO NOTHING`

// Balance returns the balance of the account (code, currency): the sum of
// all its committed postings, debits positive. It reads the account's
// latest snapshot plus the postings after it; when those exceed
// Config.SnapshotEvery, it records a new snapshot for the next read.
//
// Errors: *[ParamError] for a malformed code or currency; *[AccountError]
// with [ErrUnknownAccount]; database and context errors, wrapped.
func (l *Ledger) Balance(ctx context.Context, code string, cur money.Currency) (money.Money, error) {
	cur, err := checkAccountRef(code, cur)
	if err != nil {
		return money.Money{}, err
	}
	var (
		id   int64
		text string
		tail int64
	)
	err = l.pool.QueryRow(ctx, sqlBalance, code, string(cur)).Scan(&id, &text, &tail)
	if errors.Is(err, pgx.ErrNoRows) {
		return money.Money{}, &AccountError{Code: code, Currency: cur, Posting: -1, Err: ErrUnknownAccount}
	}
	if err != nil {
		return money.Money{}, interpretError("balance", err)
	}
	if tail > l.snapshotEvery {
		if _, err := l.pool.Exec(ctx, sqlSnapshot, id); err != nil {
			l.logger.WarnContext(ctx, "ledger: recording a balance snapshot failed", "account", code, "currency", string(cur), "error", err)
		}
	}
	return toMoney(text, cur)
}

const sqlBalanceAt = `
SELECT ledger_account_balance_at(a.id, $3)::text
FROM ledger_accounts a
WHERE a.code = $1 AND a.currency = $2`

// BalanceAt returns the balance of the account (code, currency) as of at:
// the sum of the postings of entries whose PostedAt is at or before at. An
// entry is dated by the start of the transaction that posted it, so an
// entry still uncommitted at the time of the read may later appear with a
// PostedAt at or before at.
//
// Errors: those of [Ledger.Balance].
func (l *Ledger) BalanceAt(ctx context.Context, code string, cur money.Currency, at time.Time) (money.Money, error) {
	cur, err := checkAccountRef(code, cur)
	if err != nil {
		return money.Money{}, err
	}
	var text string
	err = l.pool.QueryRow(ctx, sqlBalanceAt, code, string(cur), at).Scan(&text)
	if errors.Is(err, pgx.ErrNoRows) {
		return money.Money{}, &AccountError{Code: code, Currency: cur, Posting: -1, Err: ErrUnknownAccount}
	}
	if err != nil {
		return money.Money{}, interpretError("balance at", err)
	}
	return toMoney(text, cur)
}

func checkAccountRef(code string, cur money.Currency) (money.Currency, error) {
	if err := checkCode("code", code); err != nil {
		return "", err
	}
	c, _, err := currency("currency", cur)
	return c, err
}

func toMoney(text string, cur money.Currency) (money.Money, error) {
	d, err := decimal.NewFromString(text)
	if err != nil {
		return money.Money{}, fmt.Errorf("ledger: balance %q: %w", text, err)
	}
	m, err := money.New(d, cur)
	if err != nil {
		return money.Money{}, fmt.Errorf("ledger: balance: %w", err)
	}
	return m, nil
}

// EntryCursor is a position in an account's entries; the zero value is
// the start.
type EntryCursor struct {
	PostedAt time.Time
	ID       int64
}

// Cursor returns the position just after e, to read the entries that
// follow it.
func (e Entry) Cursor() EntryCursor { return EntryCursor{PostedAt: e.PostedAt, ID: e.ID} }

// EntriesParams selects entries of one account.
type EntriesParams struct {
	Code     string
	Currency money.Currency
	// After returns only entries after this position (from
	// [Entry.Cursor]); the zero value starts at the beginning.
	After EntryCursor
	// Limit is the most entries returned. Default 100, at most 1000.
	Limit int
}

const (
	defaultEntriesLimit = 100
	maxEntriesLimit     = 1000
)

const sqlAccountID = `SELECT id FROM ledger_accounts WHERE code = $1 AND currency = $2`

const sqlEntries = `
SELECT e.id, e.key, e.step, e.description, e.posted_at, x.codes, x.currencies, x.amounts
FROM (
    SELECT DISTINCT p.posted_at, p.entry_id
    FROM ledger_postings p
    WHERE p.account_id = $1 AND (p.posted_at, p.entry_id) > ($2, $3)
    ORDER BY p.posted_at, p.entry_id
    LIMIT $4
) k
JOIN ledger_entries e ON e.id = k.entry_id
CROSS JOIN LATERAL (
    SELECT array_agg(a.code ORDER BY q.n), array_agg(q.currency ORDER BY q.n), array_agg(q.amount::text ORDER BY q.n)
    FROM ledger_postings q JOIN ledger_accounts a ON a.id = q.account_id
    WHERE q.entry_id = e.id
) x(codes, currencies, amounts)
ORDER BY k.posted_at, k.entry_id`

// Entries returns the entries that post to the account, with all their
// postings, in the order of PostedAt then ID. Page with After: pass the
// Cursor of the last entry returned. An entry whose transaction commits
// late can carry a PostedAt earlier than entries already read.
//
// Errors: *[ParamError] for a malformed code, currency or limit;
// *[AccountError] with [ErrUnknownAccount]; database and context errors,
// wrapped.
func (l *Ledger) Entries(ctx context.Context, p EntriesParams) ([]Entry, error) {
	cur, err := checkAccountRef(p.Code, p.Currency)
	if err != nil {
		return nil, err
	}
	limit := p.Limit
	switch {
	case limit < 0 || limit > maxEntriesLimit:
		return nil, &ParamError{Field: "EntriesParams.Limit", Reason: fmt.Sprintf("is %d; want 0 (default %d) to %d", limit, defaultEntriesLimit, maxEntriesLimit)}
	case limit == 0:
		limit = defaultEntriesLimit
	}
	var id int64
	err = l.pool.QueryRow(ctx, sqlAccountID, p.Code, string(cur)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &AccountError{Code: p.Code, Currency: cur, Posting: -1, Err: ErrUnknownAccount}
	}
	if err != nil {
		return nil, interpretError("entries", err)
	}
	after := p.After.PostedAt
	if after.IsZero() {
		after = time.Unix(0, 0).AddDate(-100, 0, 0)
	}
	rows, err := l.pool.Query(ctx, sqlEntries, id, after, p.After.ID, limit)
	if err != nil {
		return nil, interpretError("entries", err)
	}
	return collectEntries(rows)
}
