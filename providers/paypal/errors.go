package paypal

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/adapterkit"
)

// declineIssues are 422 issues by which PayPal refuses a payment itself (rather than the
// request): final declines for the key.
var declineIssues = map[string]bool{
	"INSTRUMENT_DECLINED": true,
	"TRANSACTION_REFUSED": true,
	"PAYER_CANNOT_PAY":    true,
	"CARD_EXPIRED":        true,
}

// classify maps the Client's errors to payments' outcome classes; see the table in the package
// documentation. Errors that already are payments errors (refused before sending) pass through.
func classify(err error) error {
	var (
		tokErr *TokenError
		trErr  *TransportError
		apiErr *APIError
		inv    *provider.InvalidRequestError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &inv):
		return err
	case errors.As(err, &tokErr):
		if errors.As(tokErr.Err, &apiErr) && (apiErr.Status == http.StatusUnauthorized || apiErr.Status == http.StatusForbidden) {
			// 401 invalid_client: the app's client id or secret is wrong,
			// rolled or revoked. The request itself never left.
			return credentials(apiErr, "PayPal refused the app credentials: ")
		}
		if errors.As(tokErr.Err, &apiErr) && apiErr.Status >= 400 && apiErr.Status < 500 && apiErr.Status != http.StatusTooManyRequests {
			return &provider.InvalidRequestError{Provider: providerName, Code: apiErr.Name, Param: "Config.ClientID/Config.Secret",
				Message: "PayPal refused the token request: " + apiErr.Error()}
		}
		// No token, so the request itself never left.
		return &provider.NotSentError{Provider: providerName, Err: err}
	case errors.As(err, &trErr):
		if !trErr.Sent {
			return &provider.NotSentError{Provider: providerName, Err: err}
		}
		return &provider.UnknownOutcomeError{Provider: providerName, Status: trErr.Status, Err: err}
	case errors.As(err, &apiErr):
		switch s := apiErr.Status; {
		case s == http.StatusConflict:
			// PREVIOUS_REQUEST_IN_PROGRESS: the same request id is executing.
			return &provider.InProgressError{Provider: providerName}
		case s == http.StatusUnauthorized || s == http.StatusForbidden:
			// 401 AUTHENTICATION_FAILURE, still refused after one token
			// refresh; 403 NOT_AUTHORIZED, "Authorization failed due to
			// insufficient permissions" of the app or of the payee account
			// (https://developer.paypal.com/api/rest/responses/,
			// https://developer.paypal.com/api/rest/troubleshooting/rest_not_authorized).
			// Configuration errors, never an outcome: PayPal did not act on
			// the request.
			what := "PayPal refused a fresh access token: "
			if s == http.StatusForbidden {
				what = "PayPal refused the access token's permissions: "
			}
			return credentials(apiErr, what)
		case s == http.StatusTooManyRequests || s >= 500:
			// Not documented to leave nothing executed: unknown, retry with the same request id.
			return &provider.UnknownOutcomeError{Provider: providerName, Status: s, Err: err}
		case declineIssues[apiErr.Issue()]:
			return &provider.DeclineError{Provider: providerName, Code: apiErr.Issue(), DeclineCode: apiErr.Issue(), Message: apiErr.Error()}
		case s >= 400:
			// PayPal marks no replayed error (a request id is answered with
			// the latest state of what it made,
			// https://developer.paypal.com/api/rest/reference/idempotency/),
			// so a refusal is never proof about an earlier send of a
			// resumed attempt (Replayed stays false).
			return &provider.InvalidRequestError{Provider: providerName, Code: apiErr.Issue(), Param: apiErr.field(), Message: apiErr.Error()}
		}
	}
	return &provider.UnknownOutcomeError{Provider: providerName, Err: err}
}

// credentials is PayPal's refusal of the app's credentials or rights.
func credentials(apiErr *APIError, what string) error {
	code := apiErr.Issue()
	if code == "" {
		code = apiErr.Name
	}
	return &provider.CredentialsError{Provider: providerName, Status: apiErr.Status, Code: code,
		Setting: "Config.ClientID/Config.Secret", Message: what + apiErr.Error()}
}

// invalid is a request refused before sending it.
func invalid(param, msg string) error { return adapterkit.Refused(providerName, param, msg) }

// CannotTellError is [Provider.Lookup]'s answer when no lookup can say what an attempt did: it
// has no order id, and the request does not bound when the order may have been created
// (LookupRequest.From or To is zero), or the period is older than Transaction Search reaches.
// Looking again will not help: it matches [provider.ErrCannotTell], and the reconciler flags the
// intent for review (a person with PayPal's dashboard can tell) instead of rescheduling it.
type CannotTellError struct {
	// From and To are the LookupRequest's bounds, zero when not given.
	From, To time.Time
	// Window is Config.OrderRetention, how long PayPal replays the create's request id.
	Window time.Duration
	// Reason says why.
	Reason string
}

func (e *CannotTellError) Error() string {
	return fmt.Sprintf("paypal: cannot tell what this attempt did (PayPal keeps an order's request id %v): %s", e.Window, e.Reason)
}

// Is reports [provider.ErrCannotTell].
func (e *CannotTellError) Is(target error) bool { return target == provider.ErrCannotTell }
