// Package testkit holds the small helpers the provider adapters' tests and their fakes' tests
// share. Only _test.go files import it.
package testkit

import (
	"errors"
	"net/http"
	"testing"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
)

// Must(call())(t) fails t if call returned an error, and returns call's value otherwise.
func Must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

// ErrAs returns err as an E, failing t if it is none.
func ErrAs[E error](t *testing.T, err error) E {
	t.Helper()
	var target E
	if !errors.As(err, &target) {
		t.Fatalf("error %v (%T) is not a %T", err, err, target)
	}
	return target
}

// EUR parses s as an amount in euros; it panics if s is not one.
func EUR(s string) money.Money { return money.MustParse(s, money.EUR) }

// LookupOf is the RefundLookupRequest the reconciler sends for r, without a refund id.
func LookupOf(r payments.RefundRequest) payments.RefundLookupRequest {
	return payments.RefundLookupRequest{Key: r.Key, ProviderKey: r.ProviderKey, ChargeID: r.ChargeID}
}

// OnlyRefund fails t unless got is consistent and holds exactly one refund, id, in status st
// for amount.
func OnlyRefund(t *testing.T, got payments.RefundLookupResult, id string, st payments.RefundStatus, amount money.Money) {
	t.Helper()
	if !got.Consistent || len(got.Refunds) != 1 {
		t.Fatalf("found %+v, want only %s, consistent", got, id)
	}
	if r := got.Refunds[0]; r.ProviderID != id || r.Status != st || !r.Amount.Equal(amount) || r.Replayed {
		t.Fatalf("found %+v, want %s %s for %s", r, id, st, amount)
	}
}

// Get sends GET url with the Authorization header auth ("" for none) and returns the response,
// failing t if it cannot be sent. The caller closes its body.
func Get(t *testing.T, url, auth string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
