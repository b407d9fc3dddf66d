package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/payonce/payonce/money"
)

// Limits on what an entry may hold. The database enforces the same.
const (
	MaxKeyLen         = 255  // bytes of PostParams.Key
	MaxStepLen        = 64   // bytes of PostParams.Step
	MaxDescriptionLen = 1024 // bytes of PostParams.Description
	MaxCodeLen        = 200  // bytes of an account code
	MaxPostings       = 1000 // postings in one entry
)

// Config configures a [Ledger]. The zero value and nil both mean defaults.
type Config struct {
	// SnapshotEvery is how many postings a balance read may sum after the
	// account's latest snapshot before it records a new snapshot, bounding
	// the cost of the next read. Default 500; must not be negative.
	SnapshotEvery int

	// Logger receives a warning when recording a snapshot fails (the
	// balance read itself has succeeded and is returned). Default
	// slog.Default().
	Logger *slog.Logger
}

const defaultSnapshotEvery = 500

// Ledger posts entries and reads balances in the tables created by the
// migrations package. It is safe for concurrent use and holds no
// goroutines.
type Ledger struct {
	pool          *pgxpool.Pool
	snapshotEvery int64
	logger        *slog.Logger
}

// New returns a Ledger on pool, whose schema must be migrated
// (migrations.Migrate). A nil cfg means defaults.
//
// Errors: *[ParamError] naming the bad argument or Config field.
func New(pool *pgxpool.Pool, cfg *Config) (*Ledger, error) {
	if pool == nil {
		return nil, &ParamError{Field: "New pool", Reason: "is nil"}
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.SnapshotEvery < 0 {
		return nil, &ParamError{Field: "Config.SnapshotEvery", Reason: fmt.Sprintf("is %d; want 0 (default %d) or more", c.SnapshotEvery, defaultSnapshotEvery)}
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = defaultSnapshotEvery
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return &Ledger{pool: pool, snapshotEvery: int64(c.SnapshotEvery), logger: c.Logger}, nil
}

// querier is what Ledger needs from a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Account is a ledger account: a code in one currency. Its balance is the
// sum of its postings, debits positive and credits negative.
type Account struct {
	Code      string
	Currency  money.Currency
	CreatedAt time.Time
}

// EnsureAccountParams names the account to open.
type EnsureAccountParams struct {
	Code     string         // see [ValidCode]; the chart is in the package doc
	Currency money.Currency // ISO 4217
}

// EnsureAccountResult is the account, and whether this call opened it.
type EnsureAccountResult struct {
	Account Account
	Created bool // false: the account already existed and is returned
}

// EnsureAccount opens the account (code, currency) unless it exists, and
// returns it. It is idempotent and safe to call concurrently.
//
// Errors: *[ParamError] (ErrInvalidParams) for a malformed code or an
// unknown currency.
func (l *Ledger) EnsureAccount(ctx context.Context, p EnsureAccountParams) (EnsureAccountResult, error) {
	return l.ensureAccount(ctx, l.pool, p)
}

// EnsureAccountTx is [Ledger.EnsureAccount] inside the caller's
// transaction: the account exists for others once tx commits.
//
// Errors: those of [Ledger.EnsureAccount]; *[ParamError] for a nil tx.
func (l *Ledger) EnsureAccountTx(ctx context.Context, tx pgx.Tx, p EnsureAccountParams) (EnsureAccountResult, error) {
	if tx == nil {
		return EnsureAccountResult{}, &ParamError{Field: "EnsureAccountTx tx", Reason: "is nil"}
	}
	return l.ensureAccount(ctx, tx, p)
}

const sqlEnsureAccount = `
WITH ins AS (
    INSERT INTO ledger_accounts (code, currency, minor_units) VALUES ($1, $2, $3)
    ON CONFLICT ON CONSTRAINT ledger_accounts_code_currency DO NOTHING
    RETURNING created_at
)
SELECT created_at, true FROM ins
UNION ALL
SELECT created_at, false FROM ledger_accounts WHERE code = $1 AND currency = $2`

func (l *Ledger) ensureAccount(ctx context.Context, q querier, p EnsureAccountParams) (EnsureAccountResult, error) {
	if err := checkCode("EnsureAccountParams.Code", p.Code); err != nil {
		return EnsureAccountResult{}, err
	}
	cur, units, err := currency("EnsureAccountParams.Currency", p.Currency)
	if err != nil {
		return EnsureAccountResult{}, err
	}
	// A concurrent creator may commit after this statement's snapshot: the
	// insert then does nothing and the select does not see the row yet, so
	// the next attempt (a new snapshot) does.
	for attempt := 0; attempt < 3; attempt++ {
		res := EnsureAccountResult{Account: Account{Code: p.Code, Currency: cur}}
		err := q.QueryRow(ctx, sqlEnsureAccount, p.Code, string(cur), units).Scan(&res.Account.CreatedAt, &res.Created)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return EnsureAccountResult{}, interpretError("ensure account", err)
		}
		return res, nil
	}
	return EnsureAccountResult{}, fmt.Errorf("ledger: ensure account %q %s: created concurrently but not visible; retry", p.Code, cur)
}

// Posting is one line of an entry: an amount posted to the account with
// this code in the amount's currency. Positive amounts are debits, negative
// ones credits ([Debit] and [Credit] build them).
type Posting struct {
	Account string
	Amount  money.Money
}

// PostParams is one entry to post.
type PostParams struct {
	// Key is the idempotency key of the action that posts (1..255 bytes),
	// and Step the step of that action (1..64 bytes), such as "charge" or
	// "refund". (Key, Step) identifies the entry: posting it again is a
	// no-op that returns the original.
	Key  string
	Step string
	// Description is free text kept with the entry (up to 1024 bytes). It
	// is not compared on replay.
	Description string
	// Postings: at least 2, at most 1000; per currency they sum to zero; no
	// amount is zero. Their order is kept.
	Postings []Posting
}

// Entry is a posted entry.
type Entry struct {
	ID          int64
	Key         string
	Step        string
	Description string
	PostedAt    time.Time // database clock at the start of the posting transaction
	Postings    []Posting
}

// PostResult is the entry posted, or the original one on a replay.
type PostResult struct {
	Entry Entry
	// Replayed is true when an entry with this key and step and the same
	// postings already existed: nothing was written and Entry is the
	// original.
	Replayed bool
}

// Post records an entry in its own transaction. Posting the same (Key,
// Step) again with the same postings (same accounts, currencies and
// amounts, in any order) returns the original entry with Replayed set;
// concurrent posts of one key yield one entry.
//
// Errors, all leaving nothing behind:
//   - *[ParamError] (ErrInvalidParams) for a malformed key, step,
//     description, account code or amount; with [ErrTooFewPostings] for
//     fewer than two postings;
//   - *[UnbalancedError] (ErrUnbalanced) when some currency does not sum
//     to zero;
//   - *[AccountError] with [ErrUnknownAccount] or [ErrWrongCurrency];
//   - *[KeyConflictError] (ErrKeyConflict) when (Key, Step) exists with
//     different postings;
//   - database and context errors, wrapped.
func (l *Ledger) Post(ctx context.Context, p PostParams) (PostResult, error) {
	return l.post(ctx, l.pool, p)
}

// PostTx is [Ledger.Post] inside the caller's transaction, so the caller's
// own rows and the entry commit or roll back together. The database checks
// the entry's balance again at commit. A refused post (any error above but
// a database error) leaves tx usable. tx should be READ COMMITTED (the
// default); under REPEATABLE READ or SERIALIZABLE a concurrent post of the
// same key can fail with an error for which [IsRetryable] is true.
//
// Errors: those of [Ledger.Post]; *[ParamError] for a nil tx.
func (l *Ledger) PostTx(ctx context.Context, tx pgx.Tx, p PostParams) (PostResult, error) {
	if tx == nil {
		return PostResult{}, &ParamError{Field: "PostTx tx", Reason: "is nil"}
	}
	return l.post(ctx, tx, p)
}

const sqlPost = `SELECT r_outcome, r_entry_id, r_posted_at, r_bad_posting
FROM ledger_post($1, $2, $3, $4::text[], $5::text[], $6::text[]::numeric[])`

func (l *Ledger) post(ctx context.Context, q querier, p PostParams) (PostResult, error) {
	postings, err := checkPost(p)
	if err != nil {
		return PostResult{}, err
	}
	codes := make([]string, len(postings))
	curs := make([]string, len(postings))
	amounts := make([]string, len(postings))
	for i, ps := range postings {
		codes[i], curs[i], amounts[i] = ps.Account, string(ps.Amount.Currency()), ps.Amount.AmountString()
	}
	var (
		outcome string
		id      *int64
		at      *time.Time
		bad     *int32
	)
	err = q.QueryRow(ctx, sqlPost, p.Key, p.Step, p.Description, codes, curs, amounts).Scan(&outcome, &id, &at, &bad)
	if err != nil {
		return PostResult{}, interpretError("post", err)
	}
	switch outcome {
	case "posted":
		return PostResult{Entry: Entry{ID: *id, Key: p.Key, Step: p.Step, Description: p.Description, PostedAt: *at, Postings: postings}}, nil
	case "replayed":
		e, err := loadEntry(ctx, q, *id)
		if err != nil {
			return PostResult{}, err
		}
		return PostResult{Entry: e, Replayed: true}, nil
	case "conflict":
		return PostResult{}, &KeyConflictError{Key: p.Key, Step: p.Step, EntryID: *id}
	case "unknown_account", "wrong_currency":
		i := int(*bad) - 1
		ae := &AccountError{Code: codes[i], Currency: postings[i].Amount.Currency(), Posting: i, Err: ErrUnknownAccount}
		if outcome == "wrong_currency" {
			ae.Err = ErrWrongCurrency
			ae.HeldIn, err = heldIn(ctx, q, codes[i])
			if err != nil {
				return PostResult{}, err
			}
		}
		return PostResult{}, ae
	}
	return PostResult{}, fmt.Errorf("ledger: post: unexpected outcome %q", outcome)
}

// checkPost validates p and returns its postings with canonical currencies.
func checkPost(p PostParams) ([]Posting, error) {
	if err := checkText("PostParams.Key", p.Key, 1, MaxKeyLen); err != nil {
		return nil, err
	}
	if err := checkText("PostParams.Step", p.Step, 1, MaxStepLen); err != nil {
		return nil, err
	}
	if err := checkText("PostParams.Description", p.Description, 0, MaxDescriptionLen); err != nil {
		return nil, err
	}
	switch n := len(p.Postings); {
	case n < 2:
		return nil, &ParamError{Field: "PostParams.Postings", Reason: fmt.Sprintf("has %d posting(s); an entry needs at least 2", n), Err: ErrTooFewPostings}
	case n > MaxPostings:
		return nil, &ParamError{Field: "PostParams.Postings", Reason: fmt.Sprintf("has %d postings; at most %d are allowed", n, MaxPostings)}
	}
	out := make([]Posting, len(p.Postings))
	sums := map[money.Currency]decimal.Decimal{}
	for i, ps := range p.Postings {
		field := fmt.Sprintf("PostParams.Postings[%d]", i)
		if err := checkCode(field+".Account", ps.Account); err != nil {
			return nil, err
		}
		if _, err := ps.Amount.Currency().MinorUnits(); err != nil {
			return nil, &ParamError{Field: field + ".Amount", Reason: "has no valid currency (use the money package's constructors)", Err: err}
		}
		if ps.Amount.IsZero() {
			return nil, &ParamError{Field: field + ".Amount", Reason: "is zero"}
		}
		out[i] = ps
		c := ps.Amount.Currency()
		sums[c] = sums[c].Add(ps.Amount.Amount())
	}
	curs := make([]money.Currency, 0, len(sums))
	for c := range sums {
		curs = append(curs, c)
	}
	sort.Slice(curs, func(i, j int) bool { return curs[i] < curs[j] })
	for _, c := range curs {
		if !sums[c].IsZero() {
			return nil, &UnbalancedError{Currency: c, Sum: sums[c]}
		}
	}
	return out, nil
}

func checkText(field, s string, min, max int) error {
	switch {
	case len(s) < min:
		return &ParamError{Field: field, Reason: "is empty"}
	case len(s) > max:
		return &ParamError{Field: field, Reason: fmt.Sprintf("is %d bytes long; at most %d are allowed", len(s), max)}
	case !utf8.ValidString(s):
		return &ParamError{Field: field, Reason: "is not valid UTF-8"}
	case strings.IndexByte(s, 0) >= 0:
		return &ParamError{Field: field, Reason: "contains a NUL byte"}
	}
	return nil
}

// ValidCode reports whether code can name an account: 1 to 200 bytes of
// ASCII letters, digits and "_.:/@-", starting with a letter or digit.
func ValidCode(code string) bool {
	if len(code) == 0 || len(code) > MaxCodeLen {
		return false
	}
	for i := 0; i < len(code); i++ {
		b := code[i]
		alnum := b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
		if !alnum && (i == 0 || strings.IndexByte("_.:/@-", b) < 0) {
			return false
		}
	}
	return true
}

func checkCode(field, code string) error {
	if !ValidCode(code) {
		return &ParamError{Field: field, Reason: fmt.Sprintf("%q is not an account code (1 to %d letters, digits and _.:/@-, starting with a letter or digit)", code, MaxCodeLen)}
	}
	return nil
}

func currency(field string, c money.Currency) (money.Currency, int, error) {
	cur, err := money.ParseCurrency(string(c))
	if err != nil {
		return "", 0, &ParamError{Field: field, Reason: fmt.Sprintf("%q is not a known currency", string(c)), Err: err}
	}
	units, _ := cur.MinorUnits()
	return cur, units, nil
}

func heldIn(ctx context.Context, q querier, code string) ([]money.Currency, error) {
	rows, err := q.Query(ctx, `SELECT currency FROM ledger_accounts WHERE code = $1 ORDER BY currency`, code)
	if err != nil {
		return nil, interpretError("post", err)
	}
	curs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, interpretError("post", err)
	}
	out := make([]money.Currency, len(curs))
	for i, c := range curs {
		out[i] = money.Currency(c)
	}
	return out, nil
}

const sqlLoadEntry = `
SELECT e.id, e.key, e.step, e.description, e.posted_at,
       array_agg(a.code ORDER BY q.n), array_agg(q.currency ORDER BY q.n), array_agg(q.amount::text ORDER BY q.n)
FROM ledger_entries e
JOIN ledger_postings q ON q.entry_id = e.id
JOIN ledger_accounts a ON a.id = q.account_id
WHERE e.id = $1
GROUP BY e.id`

func loadEntry(ctx context.Context, q querier, id int64) (Entry, error) {
	rows, err := q.Query(ctx, sqlLoadEntry, id)
	if err != nil {
		return Entry{}, interpretError("load entry", err)
	}
	entries, err := collectEntries(rows)
	if err != nil {
		return Entry{}, err
	}
	if len(entries) != 1 {
		return Entry{}, fmt.Errorf("ledger: load entry %d: not found", id)
	}
	return entries[0], nil
}

// collectEntries reads rows of (id, key, step, description, posted_at,
// codes, currencies, amounts).
func collectEntries(rows pgx.Rows) ([]Entry, error) {
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var (
			e                    Entry
			codes, curs, amounts []string
		)
		if err := rows.Scan(&e.ID, &e.Key, &e.Step, &e.Description, &e.PostedAt, &codes, &curs, &amounts); err != nil {
			return nil, interpretError("read entries", err)
		}
		e.Postings = make([]Posting, len(codes))
		for i := range codes {
			m, err := money.Parse(amounts[i], money.Currency(curs[i]))
			if err != nil {
				return nil, fmt.Errorf("ledger: entry %d posting %d: stored amount: %w", e.ID, i, err)
			}
			e.Postings[i] = Posting{Account: codes[i], Amount: m}
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("read entries", err)
	}
	return out, nil
}
