package ledger

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shopspring/decimal"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
)

// Sentinels. Errors that carry data are pointer types that match these with
// [errors.Is]: *[ParamError], *[AccountError], *[UnbalancedError],
// *[KeyConflictError].
var (
	// ErrInvalidParams: a parameter is malformed; the *ParamError names it.
	ErrInvalidParams = errors.New("ledger: invalid parameters")
	// ErrTooFewPostings: an entry has fewer than two postings.
	ErrTooFewPostings = errors.New("ledger: an entry needs at least two postings")
	// ErrUnbalanced: the postings of an entry do not sum to zero in some
	// currency.
	ErrUnbalanced = errors.New("ledger: entry is unbalanced")
	// ErrUnknownAccount: no account has this code in this currency.
	ErrUnknownAccount = errors.New("ledger: unknown account")
	// ErrWrongCurrency: the account code exists, but not in the currency of
	// the amount posted to it.
	ErrWrongCurrency = errors.New("ledger: account not held in this currency")
	// ErrKeyConflict: an entry with this key and step exists with different
	// postings.
	ErrKeyConflict = errors.New("ledger: entry key already used with different postings")
	// ErrAppendOnly: the database refused to change or delete ledger rows,
	// or to add postings to a committed entry. The API never does either;
	// this names the refusal when raw SQL tries.
	ErrAppendOnly = errors.New("ledger: entries, postings and accounts are append-only")
)

// ParamError is a malformed parameter. It matches [ErrInvalidParams], and
// Err when set (such as [ErrTooFewPostings] or a money error).
type ParamError struct {
	Field  string // "PostParams.Postings[1].Amount"
	Reason string // "is zero"
	Err    error  // a more specific cause, or nil
}

func (e *ParamError) Error() string {
	s := "ledger: " + e.Field + " " + e.Reason
	if e.Err != nil && !strings.Contains(e.Reason, e.Err.Error()) {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is matches [ErrInvalidParams].
func (e *ParamError) Is(target error) bool { return target == ErrInvalidParams }

// Unwrap returns the specific cause.
func (e *ParamError) Unwrap() error { return e.Err }

// AccountError is a posting or read naming an account that does not exist
// in that currency. Err is [ErrUnknownAccount] or [ErrWrongCurrency].
type AccountError struct {
	Code     string
	Currency money.Currency
	// HeldIn lists the currencies the code does exist in (for
	// ErrWrongCurrency).
	HeldIn []money.Currency
	// Posting is the index of the offending posting in PostParams.Postings,
	// or -1 when the error is not about a posting.
	Posting int
	Err     error
}

func (e *AccountError) Error() string {
	where := ""
	if e.Posting >= 0 {
		where = fmt.Sprintf(" (posting %d)", e.Posting)
	}
	if e.Err == ErrWrongCurrency {
		held := make([]string, len(e.HeldIn))
		for i, c := range e.HeldIn {
			held[i] = string(c)
		}
		return fmt.Sprintf("ledger: account %q is not held in %s, only in %s%s", e.Code, e.Currency, strings.Join(held, ", "), where)
	}
	return fmt.Sprintf("ledger: unknown account %q in %s%s", e.Code, e.Currency, where)
}

// Is matches Err.
func (e *AccountError) Is(target error) bool { return target == e.Err }

// UnbalancedError is an entry whose postings in Currency sum to Sum rather
// than zero. It matches [ErrUnbalanced].
type UnbalancedError struct {
	Currency money.Currency
	Sum      decimal.Decimal
}

func (e *UnbalancedError) Error() string {
	return fmt.Sprintf("ledger: entry is unbalanced: its %s postings sum to %s, not 0", e.Currency, e.Sum)
}

// Is matches [ErrUnbalanced].
func (e *UnbalancedError) Is(target error) bool { return target == ErrUnbalanced }

// KeyConflictError is a post whose key and step name an existing entry
// with different postings. It matches [ErrKeyConflict]. Neither entry's
// postings are repeated in the message, nor the key: only its
// idempotency.ShortHash.
type KeyConflictError struct {
	Key     string
	Step    string
	EntryID int64 // the existing entry
}

func (e *KeyConflictError) Error() string {
	return fmt.Sprintf("ledger: entry %d already has this key (%s) and step %q with different postings", e.EntryID, idempotency.ShortHash(e.Key), e.Step)
}

// Is matches [ErrKeyConflict].
func (e *KeyConflictError) Is(target error) bool { return target == ErrKeyConflict }

// refusal is a database refusal translated at the package boundary: the
// database's message, matching a sentinel.
type refusal struct {
	kind error
	msg  string
}

func (e *refusal) Error() string        { return e.msg }
func (e *refusal) Is(target error) bool { return target == e.kind }

// IsRetryable reports whether err is a transient conflict between
// concurrent transactions (serialization failure, deadlock) after which the
// whole transaction can be retried. Post and PostTx only meet these when
// the caller's transaction is REPEATABLE READ or SERIALIZABLE.
func IsRetryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == pgerrcode.SerializationFailure || pgErr.Code == pgerrcode.DeadlockDetected
	}
	return false
}

// interpretError maps the refusals the schema raises to the package's
// sentinels. Anything else is returned wrapped, with op for context.
func interpretError(op string, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return fmt.Errorf("ledger: %s: %w", op, err)
	}
	var kind error
	switch {
	case pgErr.ConstraintName == "ledger_append_only":
		kind = ErrAppendOnly
	case pgErr.ConstraintName == "ledger_entry_balanced":
		kind = ErrUnbalanced
	case pgErr.ConstraintName == "ledger_entry_postings":
		kind = ErrTooFewPostings
	case pgErr.ConstraintName == "ledger_postings_account":
		kind = ErrUnknownAccount
	case pgErr.ConstraintName == "ledger_postings_currency":
		kind = ErrWrongCurrency
	case pgErr.Code == pgerrcode.CheckViolation:
		kind = ErrInvalidParams
	}
	if kind != nil {
		return &refusal{kind: kind, msg: pgErr.Message}
	}
	return fmt.Errorf("ledger: %s: %w", op, err)
}
