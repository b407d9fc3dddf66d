package idempotency

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Span attribute names. A span never holds a full key, a scope, a
// fingerprint or a body: keys and scopes appear as [ShortHash]es, which
// match the hashes in the logs.
const (
	AttrScopeHash  = "payonce.scope_hash"
	AttrKeyHash    = "payonce.key_hash"
	AttrClaimState = "idempotency.claim_state"
	AttrCached     = "idempotency.replay_cached"
	AttrReplayed   = "idempotency.replayed"
	AttrReclaimed  = "idempotency.reclaimed"
	AttrStatus     = "idempotency.status"
	AttrErrorClass = "payonce.error_class"
)

// Tracer returns tp's tracer for a payonce package (a no-op one when tp
// is nil).
func Tracer(tp trace.TracerProvider, pkg string) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer("github.com/payonce/payonce/" + pkg)
}

// KeyAttributes identify a (scope, key) in a span without revealing it.
func KeyAttributes(scope, key string) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String(AttrScopeHash, ShortHash(scope)), attribute.String(AttrKeyHash, ShortHash(key))}
}

// ErrorClass names err's kind for a span's status: never its message,
// which may carry a key, a response body or a provider's text.
func ErrorClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrInvalid):
		return "invalid"
	case errors.Is(err, ErrInProgress):
		return "in_progress"
	case errors.Is(err, ErrFingerprintMismatch):
		return "fingerprint_mismatch"
	case errors.Is(err, ErrExpired):
		return "expired"
	case errors.Is(err, ErrForeignKey):
		return "foreign_key"
	case errors.Is(err, ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, ErrFailed):
		return "failed"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	}
	// The outermost typed error names the class; plain wrapped or created
	// errors say nothing more than "error".
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch t := fmt.Sprintf("%T", e); t {
		case "*fmt.wrapError", "*fmt.wrapErrors", "*errors.errorString", "*errors.joinError":
		default:
			return t
		}
	}
	return "error"
}

// EndSpan ends span, marking it failed with err's class when err is not
// nil.
func EndSpan(span trace.Span, err error) {
	if err != nil {
		class := ErrorClass(err)
		span.SetAttributes(attribute.String(AttrErrorClass, class))
		span.SetStatus(codes.Error, class)
	}
	span.End()
}
