package adyen

import (
	"errors"
	"net/http"

	"github.com/payonce/payonce/payments/provider"
)

// ErrorCodeInProgress is Adyen's errorCode for a request whose Idempotency-Key is still being
// processed ("request already processed or in progress"), with HTTP 409 or 422.
const ErrorCodeInProgress = "704"

// errorCodeKeyMismatch is what adyentest answers (422) for a key reused with another body.
// Adyen documents no answer for that case; payments enforces the match locally anyway.
const errorCodeKeyMismatch = "idempotency_key_reused"

// classify maps a Client error to payments' outcome classes; see the table in the package
// documentation.
func classify(err error) error {
	var te *TransportError
	if errors.As(err, &te) {
		if !te.Sent {
			return &provider.NotSentError{Provider: providerName, Err: err}
		}
		return &provider.UnknownOutcomeError{Provider: providerName, Status: te.StatusCode, Err: err}
	}
	var ae *APIError
	if !errors.As(err, &ae) {
		return &provider.UnknownOutcomeError{Provider: providerName, Err: err}
	}
	status := ae.StatusCode
	switch {
	case ae.ErrorCode == ErrorCodeInProgress && (status == http.StatusConflict || status == http.StatusUnprocessableEntity):
		return &provider.InProgressError{Provider: providerName}
	case ae.Transient:
		// Adyen did not keep this answer for the key and says the same key may be retried.
		// The request did reach Adyen, so "not sent" would be a claim we cannot prove (and
		// NotSentError may be read as "nothing exists there"); unknown is as retryable and
		// never assumed failed.
		return &provider.UnknownOutcomeError{Provider: providerName, Status: status, Err: err}
	case status == http.StatusUnprocessableEntity && ae.ErrorCode == errorCodeKeyMismatch:
		// Only the code: a message may quote the key.
		return &provider.KeyMismatchError{Provider: providerName,
			Message: "errorCode " + ae.ErrorCode + ": the Idempotency-Key was first used with another request"}
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// 401 (errorCode 000, 00_401): "Invalid API credentials were used in
		// the request" or they "lack permissions"
		// (https://docs.adyen.com/errors/unauthorized); 403 (errorCode 010
		// "Not allowed", 901 "Invalid Merchant Account"): "Insufficient
		// permission" (https://docs.adyen.com/development-resources/response-handling/,
		// https://docs.adyen.com/development-resources/error-codes). A
		// configuration error, never an outcome: Adyen did not act on the
		// request.
		code := ae.ErrorCode
		if code == "" {
			code = http.StatusText(status)
		}
		return &provider.CredentialsError{Provider: providerName, Status: status, Code: code,
			Setting: "Config.APIKey/Config.MerchantAccount", Message: ae.Message}
	case status == http.StatusTooManyRequests, status >= 500:
		// A non-transient 5xx is final for the key at Adyen: a retry replays it, and only the
		// AUTHORISATION webhook (Lookup) or a technical cancel resolves the outcome.
		return &provider.UnknownOutcomeError{Provider: providerName, Status: status, Err: err}
	case status >= 400:
		// Adyen answers a known Idempotency-Key with the first response, a
		// non-transient error included, but marks no replay (the echoed
		// Idempotency-Key header is on every keyed answer,
		// https://docs.adyen.com/development-resources/api-idempotency): a
		// refusal cannot be told from a replayed one, so it is never proof
		// about an earlier send of a resumed attempt (Replayed stays false).
		code := ae.ErrorCode
		if code == "" {
			code = http.StatusText(status)
		}
		return &provider.InvalidRequestError{Provider: providerName, Code: code, Message: ae.Message}
	default:
		return &provider.UnknownOutcomeError{Provider: providerName, Status: status, Err: err}
	}
}
