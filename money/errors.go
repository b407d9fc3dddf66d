package money

import (
	"errors"
	"fmt"
)

// Sentinels for the ways a value is refused. Every refusal is returned as an
// *[Error] that matches one of these with [errors.Is] and names the value.
var (
	// ErrUnknownCurrency: the code is not an ISO 4217 currency in the table.
	ErrUnknownCurrency = errors.New("unknown currency")
	// ErrMalformed: the string is not a plain decimal number ("12.50",
	// "-3", "1000"): exponents, NaN, infinities, signs other than a
	// leading '-', separators, spaces and empty strings are refused.
	ErrMalformed = errors.New("malformed amount")
	// ErrTooPrecise: the amount has more decimal places than the currency's
	// minor unit allows. It is refused, never rounded.
	ErrTooPrecise = errors.New("too many decimal places for the currency")
	// ErrOutOfRange: the amount is beyond ±(2^63-1) minor units, the
	// range of the int64 amounts providers exchange.
	ErrOutOfRange = errors.New("amount out of range")
	// ErrNotPositive: a charge or refund amount is zero or negative.
	ErrNotPositive = errors.New("amount is not positive")
	// ErrCurrencyMismatch: an operation combined two currencies.
	ErrCurrencyMismatch = errors.New("currencies differ")
)

// maxValueLen bounds how much of a refused value an error repeats.
const maxValueLen = 64

// Error is a refused amount or currency. Kind is one of the package's
// sentinels, and errors.Is(err, Kind) holds.
type Error struct {
	Kind     error    // ErrUnknownCurrency, ErrMalformed, ...
	Value    string   // the refused value as given (cut to 64 bytes)
	Currency Currency // the currency involved, if known
	Detail   string   // what was expected, when that helps
}

func newError(kind error, value string, c Currency, detail string) *Error {
	if len(value) > maxValueLen {
		value = value[:maxValueLen] + "..."
	}
	return &Error{Kind: kind, Value: value, Currency: c, Detail: detail}
}

func (e *Error) Error() string {
	var s string
	switch e.Kind {
	case ErrUnknownCurrency:
		s = fmt.Sprintf("money: unknown currency %q (want an ISO 4217 code such as EUR)", e.Value)
	case ErrCurrencyMismatch:
		s = fmt.Sprintf("money: currencies differ: %s and %s", e.Value, e.Currency)
	case ErrNotPositive:
		s = fmt.Sprintf("money: amount %s %s is not positive", e.Value, e.Currency)
	default:
		if e.Currency != "" {
			s = fmt.Sprintf("money: %v: %q %s", e.Kind, e.Value, e.Currency)
		} else {
			s = fmt.Sprintf("money: %v: %q", e.Kind, e.Value)
		}
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is reports whether target is the error's Kind.
func (e *Error) Is(target error) bool { return target == e.Kind }
