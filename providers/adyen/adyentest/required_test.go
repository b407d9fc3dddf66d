package adyentest_test

import (
	"maps"
	"net/http"
	"strings"
	"testing"

	"github.com/payonce/payonce/providers/adyen/adyentest"
)

// without returns a deep copy of body without the field at the dotted path.
func without(body map[string]any, path string) map[string]any {
	out := maps.Clone(body)
	head, rest, nested := strings.Cut(path, ".")
	if !nested {
		delete(out, head)
		return out
	}
	out[head] = without(out[head].(map[string]any), rest)
	return out
}

// with returns a copy of body with field set to v (nil deletes it).
func with(body map[string]any, field string, v any) map[string]any {
	out := maps.Clone(body)
	if v == nil {
		delete(out, field)
	} else {
		out[field] = v
	}
	return out
}

// Every endpoint the adapter uses refuses a request without a field Adyen's API reference marks
// required, with Adyen's error (422, errorType validation, {status, errorCode, message,
// errorType}), and creates nothing; the complete request succeeds. The expected codes are those
// Adyen documents (100 for amount, 14_030 for returnUrl, 000 for a token payment without
// shopperReference or, not ContAuth, without a security code); elsewhere the fake's
// ErrorCodeRequired.
func TestRequiredFields(t *testing.T) {
	t.Parallel()
	b := setup(t, &adyentest.Config{CaptureMode: adyentest.CaptureManual})
	req := adyentest.ErrorCodeRequired
	amount := map[string]any{"currency": "EUR", "value": 500}

	// A payment to modify, authorised and not captured: captures, refunds, reversals and
	// cancels of it are all possible.
	paid := b.post(t, "/payments", "", payment("ref-required", adyentest.PaymentMethodVisa, 1000))
	if paid.status != 200 || paid.body["resultCode"] != "Authorised" {
		t.Fatalf("payment: %d %s", paid.status, paid.raw)
	}
	psp := paid.body["pspReference"].(string)

	for _, ep := range []struct {
		path   string
		valid  map[string]any
		status int
		fields map[string]string // field -> errorCode
	}{
		{"/payments", payment("ref-new", adyentest.PaymentMethodVisa, 1000), 200, map[string]string{
			"merchantAccount": req, "amount": "100", "amount.currency": req, "amount.value": req,
			"reference": req, "paymentMethod": req, "returnUrl": "14_030",
			// A token payment (storedPaymentMethodId).
			"shopperReference": "000", "recurringProcessingModel": req, "shopperInteraction": "000",
		}},
		{"/payments/" + psp + "/captures", map[string]any{"merchantAccount": merchant, "amount": amount, "reference": "cap-1"}, 201,
			map[string]string{"merchantAccount": req, "amount": "100", "amount.currency": req, "amount.value": req}},
		{"/payments/" + psp + "/refunds", map[string]any{"merchantAccount": merchant, "amount": amount, "reference": "ref-1"}, 201,
			map[string]string{"merchantAccount": req, "amount": "100", "amount.currency": req, "amount.value": req}},
		{"/payments/" + psp + "/reversals", map[string]any{"merchantAccount": merchant, "reference": "rev-1"}, 201,
			map[string]string{"merchantAccount": req}},
		{"/cancels", map[string]any{"merchantAccount": merchant, "paymentReference": "ref-required", "reference": "can-1"}, 201,
			map[string]string{"merchantAccount": req, "paymentReference": req}},
	} {
		for field, code := range ep.fields {
			a := b.post(t, ep.path, "", without(ep.valid, field))
			if a.status != http.StatusUnprocessableEntity || a.body["errorType"] != "validation" || a.body["errorCode"] != code ||
				a.body["status"] != float64(422) || a.body["message"] == "" {
				t.Errorf("%s without %s: %d %s, want 422 errorCode %q", ep.path, field, a.status, a.raw, code)
			}
		}
		// An empty string is no value either.
		for field := range ep.fields {
			if v, ok := ep.valid[field].(string); ok && v != "" {
				if a := b.post(t, ep.path, "", with(ep.valid, field, "")); a.status != http.StatusUnprocessableEntity {
					t.Errorf("%s with an empty %s: %d %s", ep.path, field, a.status, a.raw)
				}
			}
		}
		if a := b.post(t, ep.path, "", ep.valid); a.status != ep.status {
			t.Errorf("%s, complete: %d %s", ep.path, a.status, a.raw)
		}
	}
	// Nothing was made by the refused requests: one payment, one of each modification.
	if got := b.srv.Counts("ref-new"); got != (adyentest.Counts{Payments: 1}) {
		t.Errorf("ref-new: %+v", got)
	}
	for ref, want := range map[string]adyentest.Counts{"cap-1": {Captures: 1}, "ref-1": {Refunds: 1}, "rev-1": {Reversals: 1}, "can-1": {Cancels: 1}} {
		if got := b.srv.Counts(ref); got != want {
			t.Errorf("%s: %+v, want %+v", ref, got, want)
		}
	}
}

// A token payment's fields take Adyen's values: shopperReference of 3 to 256 characters, a
// recurringProcessingModel and a shopperInteraction Adyen knows; a stored card that is not
// ContAuth needs its security code.
func TestTokenPaymentValues(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	valid := payment("ref-token", adyentest.PaymentMethodVisa, 1000)
	for name, tc := range map[string]struct {
		body map[string]any
		code string
	}{
		"shopperReference of 2":         {with(valid, "shopperReference", "u1"), "invalid_field"},
		"shopperReference of 257":       {with(valid, "shopperReference", strings.Repeat("u", 257)), "invalid_field"},
		"recurringProcessingModel":      {with(valid, "recurringProcessingModel", "Monthly"), "invalid_field"},
		"shopperInteraction":            {with(valid, "shopperInteraction", "Phone"), "invalid_field"},
		"Ecommerce without a CVC":       {with(valid, "shopperInteraction", "Ecommerce"), "000"},
		"shopperInteraction left empty": {with(valid, "shopperInteraction", nil), "000"},
	} {
		if a := b.post(t, "/payments", "", tc.body); a.status != 422 || a.body["errorCode"] != tc.code || a.body["errorType"] != "validation" {
			t.Errorf("%s: %d %s, want 422 %s", name, a.status, a.raw, tc.code)
		}
	}
	// Ecommerce with the security code collected (one-click with CVC) is a valid token payment.
	withCVC := with(valid, "shopperInteraction", "Ecommerce")
	withCVC["paymentMethod"] = map[string]any{"type": "scheme", "storedPaymentMethodId": adyentest.PaymentMethodVisa,
		"encryptedSecurityCode": "adyenjs_0_1_25$..."}
	for _, body := range []map[string]any{valid, with(valid, "shopperReference", "abc"), with(valid, "shopperReference", strings.Repeat("u", 256)),
		with(valid, "recurringProcessingModel", "UnscheduledCardOnFile"), with(valid, "recurringProcessingModel", "Subscription"), withCVC} {
		if a := b.post(t, "/payments", "", body); a.status != 200 || a.body["resultCode"] != "Authorised" {
			t.Errorf("%v: %d %s", body, a.status, a.raw)
		}
	}
}
