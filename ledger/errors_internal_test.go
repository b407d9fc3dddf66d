package ledger

import (
	"errors"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestInterpretError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pg   pgconn.PgError
		want error
	}{
		{pgconn.PgError{Code: pgerrcode.RestrictViolation, ConstraintName: "ledger_append_only"}, ErrAppendOnly},
		{pgconn.PgError{Code: pgerrcode.CheckViolation, ConstraintName: "ledger_entry_balanced"}, ErrUnbalanced},
		{pgconn.PgError{Code: pgerrcode.CheckViolation, ConstraintName: "ledger_entry_postings"}, ErrTooFewPostings},
		{pgconn.PgError{Code: pgerrcode.ForeignKeyViolation, ConstraintName: "ledger_postings_account"}, ErrUnknownAccount},
		{pgconn.PgError{Code: pgerrcode.CheckViolation, ConstraintName: "ledger_postings_currency"}, ErrWrongCurrency},
		{pgconn.PgError{Code: pgerrcode.CheckViolation, ConstraintName: "ledger_postings_precision"}, ErrInvalidParams},
	} {
		pg := tc.pg
		pg.Message = "ledger: refused"
		err := interpretError("post", &pg)
		if !errors.Is(err, tc.want) || err.Error() != "ledger: refused" {
			t.Errorf("interpretError(%s %s) = %v; want %v", pg.Code, pg.ConstraintName, err, tc.want)
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			t.Errorf("interpretError(%s) leaks the *pgconn.PgError", pg.ConstraintName)
		}
	}
	ser := &pgconn.PgError{Code: pgerrcode.SerializationFailure}
	if err := interpretError("post", ser); !IsRetryable(err) {
		t.Errorf("IsRetryable(serialization failure) = false")
	}
	if IsRetryable(errors.New("x")) {
		t.Errorf("IsRetryable(plain error) = true")
	}
}
