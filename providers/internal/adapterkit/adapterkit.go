// Package adapterkit holds what payonce's provider adapters (stripe, adyen, paypal) share
// outside their providers' protocols: the refusals of a request before it is sent.
package adapterkit

import (
	"fmt"
	"time"

	"github.com/payonce/payonce/payments/provider"
)

// Refused is a request the adapter named providerName refuses before sending it: a
// *[provider.InvalidRequestError] whose Param is param and whose Message says msg of it.
func Refused(providerName, param, msg string) error {
	return &provider.InvalidRequestError{Provider: providerName, Code: "payonce_invalid_parameter", Param: param,
		Message: param + " " + msg + " (refused before sending)"}
}

// RefuseWindow refuses, as [Refused], a Totals window [from, to) that is not one: a bound that
// is zero names it, a to not after from names "to". It returns nil for a window.
func RefuseWindow(providerName string, from, to time.Time) error {
	switch {
	case from.IsZero():
		return Refused(providerName, "from", "is required (a zero time)")
	case to.IsZero():
		return Refused(providerName, "to", "is required (a zero time)")
	case !from.Before(to):
		return Refused(providerName, "to", fmt.Sprintf("must be after from: the window [%s, %s) is empty",
			from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano)))
	}
	return nil
}
