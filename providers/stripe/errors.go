package stripe

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"

	stripego "github.com/stripe/stripe-go/v79"

	"github.com/payonce/payonce/payments/provider"
)

// sentTracker records whether any attempt of a call (stripe-go's retries,
// net/http's own resends on a reused connection) wrote a request's headers
// on a connection. Until then Stripe cannot have received a request it
// could execute, so a transport failure is provably "not sent". A dial
// error alone is no proof: net/http may have written the request on a
// keep-alive connection, lost it, and then failed to dial for its resend.
type sentTracker struct{ wrote atomic.Bool }

func (t *sentTracker) trace(ctx context.Context) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { t.wrote.Store(true) },
	})
}

func asStripeError(err error) (*stripego.Error, bool) {
	var se *stripego.Error
	ok := errors.As(err, &se)
	return se, ok
}

// classify maps a stripe-go error to payments' outcome classes; see the
// table in the package documentation.
func classify(err error, sent *sentTracker) error {
	se, ok := asStripeError(err)
	if !ok {
		// No Stripe error object: a transport error (dial, TLS, reset,
		// timeout, context end) or an undecodable response.
		if !sent.wrote.Load() {
			return &provider.NotSentError{Provider: providerName, Err: err}
		}
		return &provider.UnknownOutcomeError{Provider: providerName, Err: err}
	}
	status := se.HTTPStatusCode
	switch {
	case se.Code == stripego.ErrorCodeIdempotencyKeyInUse || status == http.StatusConflict:
		// Another request with the key is still executing. Stripe documents
		// the status and the code (409 "The request conflicts with another
		// request (perhaps due to using the same idempotent key)",
		// https://docs.stripe.com/api/errors; idempotency_key_in_use,
		// https://docs.stripe.com/error-codes) but not the type, which is
		// observed as invalid_request_error. Stripe saves no result for such
		// a collision (https://docs.stripe.com/api/idempotent_requests): the
		// same key, later, gets the first request's answer. So the code or
		// the 409 decides, whatever the type: never a permanent refusal.
		return &provider.InProgressError{Provider: providerName}
	case se.Type == stripego.ErrorTypeIdempotency:
		// Stripe's message quotes the Idempotency-Key, which holds payonce's
		// key: only which comparison failed is kept.
		return &provider.KeyMismatchError{Provider: providerName, Message: keyMismatch(se)}
	case status == http.StatusUnauthorized || status == http.StatusForbidden ||
		se.Type == errorTypeAuthentication || se.Type == errorTypePermission:
		// 401 "No valid API key provided", 403 "The API key doesn't have
		// permissions to perform the request" (https://docs.stripe.com/api/errors):
		// refused before anything executed, so nothing is cached for the key
		// (https://docs.stripe.com/api/idempotent_requests: only requests whose
		// execution began are). A configuration error, never an outcome.
		return &provider.CredentialsError{Provider: providerName, Status: status, Code: credentialsCode(se),
			Setting: "Config.SecretKey", Message: se.Msg}
	case se.Type == stripego.ErrorTypeCard:
		return &provider.DeclineError{Provider: providerName, Code: string(se.Code),
			DeclineCode: string(se.DeclineCode), Message: se.Msg}
	case status == http.StatusTooManyRequests:
		// Stripe's rate limiter (and lock_timeout) refuse with 429 and ask
		// for a retry, but nothing documents that a 429 never executed
		// anything: unknown, which is as retryable as not-sent with the
		// same key, and never assumed failed.
		return &provider.UnknownOutcomeError{Provider: providerName, Status: status, Err: err}
	case status >= 500:
		// Stripe caches a 500 produced after execution started: the same
		// key replays it, so only the reconciler can resolve it then.
		return &provider.UnknownOutcomeError{Provider: providerName, Status: status, Err: err}
	case status >= 400:
		// invalid_request_error: a permanent input error. Stripe saves the
		// answer of a request whose execution began and replays it, marked
		// Idempotent-Replayed, to the same key
		// (https://docs.stripe.com/api/idempotent_requests); a refusal
		// without the mark (a validation failure, a missing resource) was
		// not cached and speaks of this request alone. payments settles a
		// resumed attempt only on a replayed one.
		code := string(se.Code)
		if code == "" {
			code = http.StatusText(status)
		}
		return &provider.InvalidRequestError{Provider: providerName, Code: code, Param: se.Param, Message: se.Msg,
			Replayed: replayed(se.LastResponse)}
	default:
		return &provider.UnknownOutcomeError{Provider: providerName, Status: status, Err: err}
	}
}

// Error types Stripe documents beside stripe-go's constants
// (https://docs.stripe.com/api/errors lists the types; Stripe's other
// libraries name these two): a restricted or revoked key.
const (
	errorTypeAuthentication stripego.ErrorType = "authentication_error"
	errorTypePermission     stripego.ErrorType = "permission_error"
)

// credentialsCode is the code of a refusal of our credentials: Stripe's
// code, else its type, else the HTTP status text.
func credentialsCode(se *stripego.Error) string {
	switch {
	case se.Code != "":
		return string(se.Code)
	case se.Type != "":
		return string(se.Type)
	}
	return http.StatusText(se.HTTPStatusCode)
}

// keyMismatch says which of Stripe's comparisons an idempotency_error
// failed, without Stripe's text, which quotes the key: "Keys for
// idempotent requests can only be used with the same parameters they were
// first used with" or "for the same endpoint"
// (https://docs.stripe.com/api/idempotent_requests).
func keyMismatch(se *stripego.Error) string {
	what := "the same parameters"
	if strings.Contains(se.Msg, "same endpoint") {
		what = "the same endpoint"
	}
	msg := "idempotency_error: Stripe accepts a key again only with " + what + " as its first request"
	if se.RequestID != "" {
		msg += " (request " + se.RequestID + ")"
	}
	return msg
}
