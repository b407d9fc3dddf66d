package paypal

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/payonce/payonce/payments"
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
		inv    *payments.InvalidRequestError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &inv):
		return err
	case errors.As(err, &tokErr):
		if errors.As(tokErr.Err, &apiErr) && apiErr.Status >= 400 && apiErr.Status < 500 && apiErr.Status != http.StatusTooManyRequests {
			return &payments.InvalidRequestError{Provider: providerName, Code: apiErr.Name, Param: "Config.ClientID/Config.Secret",
				Message: "PayPal refused the app credentials: " + apiErr.Error()}
		}
		// No token, so the request itself never left.
		return &payments.NotSentError{Provider: providerName, Err: err}
	case errors.As(err, &trErr):
		if !trErr.Sent {
			return &payments.NotSentError{Provider: providerName, Err: err}
		}
		return &payments.UnknownOutcomeError{Provider: providerName, Status: trErr.Status, Err: err}
	case errors.As(err, &apiErr):
		switch s := apiErr.Status; {
		case s == http.StatusConflict:
			// PREVIOUS_REQUEST_IN_PROGRESS: the same request id is executing.
			return &payments.InProgressError{Provider: providerName}
		case s == http.StatusUnauthorized:
			// Still refused after one token refresh.
			return &payments.InvalidRequestError{Provider: providerName, Code: apiErr.Name, Param: "Config.ClientID/Config.Secret",
				Message: "PayPal refused a fresh access token: " + apiErr.Error()}
		case s == http.StatusTooManyRequests || s >= 500:
			// Not documented to leave nothing executed: unknown, retry with the same request id.
			return &payments.UnknownOutcomeError{Provider: providerName, Status: s, Err: err}
		case declineIssues[apiErr.Issue()]:
			return &payments.DeclineError{Provider: providerName, Code: apiErr.Issue(), DeclineCode: apiErr.Issue(), Message: apiErr.Error()}
		case s >= 400:
			return &payments.InvalidRequestError{Provider: providerName, Code: apiErr.Issue(), Param: apiErr.field(), Message: apiErr.Error()}
		}
	}
	return &payments.UnknownOutcomeError{Provider: providerName, Err: err}
}

// invalid is a request refused before sending it.
func invalid(param, msg string) error {
	return &payments.InvalidRequestError{Provider: providerName, Code: "payonce_invalid_parameter", Param: param,
		Message: param + " " + msg + " (refused before sending)"}
}

// ErrOrderWindowPassed is matched by a [*WindowError].
var ErrOrderWindowPassed = errors.New("paypal: the order's request id may have expired at PayPal")

// WindowError is [Provider.Lookup]'s answer when it has no order id and the order's create may
// be older than Config.OrderRetention: PayPal may have forgotten its request id, so a replay of
// the create would make a new order and prove nothing. The outcome stays unknown (it matches
// [payments.ErrOutcomeUnknown] and [ErrOrderWindowPassed]); only the order id (recorded through
// ChargeRequest.Progress), a webhook, or a person with PayPal's dashboard can resolve it.
type WindowError struct {
	// From is the earliest the order may have been created (LookupRequest.From; zero: unknown).
	From time.Time
	// Window is Config.OrderRetention.
	Window time.Duration
}

func (e *WindowError) Error() string {
	if e.From.IsZero() {
		return fmt.Sprintf("paypal: lookup without an order id needs LookupRequest.From to prove the create is within PayPal's %v request id window; outcome unknown", e.Window)
	}
	return fmt.Sprintf("paypal: lookup without an order id: the create may date from %s, beyond PayPal's %v request id window; outcome unknown",
		e.From.UTC().Format(time.RFC3339), e.Window)
}

// Is reports [payments.ErrOutcomeUnknown] and [ErrOrderWindowPassed].
func (e *WindowError) Is(target error) bool {
	return target == payments.ErrOutcomeUnknown || target == ErrOrderWindowPassed
}
