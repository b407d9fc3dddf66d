package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// translate turns a database error into the store's vocabulary, so that
// nothing above the store needs pgconn. Context errors pass through as they
// are; anything else is wrapped with the operation's name.
func translate(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return &Error{Op: op, Code: pgErr.Code, Message: pgErr.Message, err: err}
	}
	return &Error{Op: op, Message: err.Error(), err: err, SafeToRetry: pgconn.SafeToRetry(err)}
}

func isDivisionByZero(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.DivisionByZero
}

// Error is a database error met by the store.
type Error struct {
	Op string
	// Code is the SQLSTATE, when the server answered.
	Code    string
	Message string
	// SafeToRetry is true when the statement provably never reached the
	// server.
	SafeToRetry bool
	err         error
}

func (e *Error) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("pgstore: %s: %s (SQLSTATE %s)", e.Op, e.Message, e.Code)
	}
	return fmt.Sprintf("pgstore: %s: %s", e.Op, e.Message)
}

// Unwrap returns the driver's error.
func (e *Error) Unwrap() error { return e.err }
