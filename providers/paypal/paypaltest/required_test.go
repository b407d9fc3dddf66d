package paypaltest_test

import (
	"encoding/json"
	"net/url"
	"testing"

	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// detailOf returns the first detail of a PayPal error body: its field and issue.
func detailOf(body map[string]any) (field, issue string) {
	d, _ := body["details"].([]any)
	if len(d) == 0 {
		return "", ""
	}
	m, _ := d[0].(map[string]any)
	field, _ = m["field"].(string)
	issue, _ = m["issue"].(string)
	return field, issue
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Each endpoint the adapter uses refuses a request without a field PayPal's API reference marks
// required, with PayPal's validation error (400 INVALID_REQUEST, details[0] naming the field with
// issue MISSING_REQUIRED_PARAMETER), and creates nothing; the complete request succeeds.
func TestRequiredFields(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// order is a complete single-step create with one field left out ("" for none).
	order := func(leaveOut string) map[string]any {
		amount := map[string]any{"currency_code": "EUR", "value": "10.00"}
		pu := map[string]any{"custom_id": "ref-required", "amount": amount}
		o := map[string]any{"intent": "CAPTURE", "purchase_units": []any{pu},
			"payment_source": map[string]any{"card": map[string]any{"vault_id": paypaltest.PaymentMethodVisa}}}
		switch leaveOut {
		case "/intent":
			delete(o, "intent")
		case "/purchase_units":
			delete(o, "purchase_units")
		case "/purchase_units/0/amount":
			delete(pu, "amount")
		case "/purchase_units/0/amount/currency_code":
			delete(amount, "currency_code")
		case "/purchase_units/0/amount/value":
			delete(amount, "value")
		}
		return o
	}
	for _, field := range []string{"/intent", "/purchase_units", "/purchase_units/0/amount",
		"/purchase_units/0/amount/currency_code", "/purchase_units/0/amount/value"} {
		status, body := b.call(t, "POST", "/v2/checkout/orders", "req-"+field, mustJSON(t, order(field)))
		if f, issue := detailOf(body); status != 400 || body["name"] != "INVALID_REQUEST" || issue != "MISSING_REQUIRED_PARAMETER" || f != field {
			t.Errorf("create without %s: %d %v", field, status, body)
		}
	}
	// A single-step create (with a payment source) requires PayPal-Request-Id.
	status, body := b.call(t, "POST", "/v2/checkout/orders", "", mustJSON(t, order("")))
	if f, issue := detailOf(body); status != 400 || issue != "PAYPAL_REQUEST_ID_REQUIRED" || f != "PayPal-Request-Id" {
		t.Errorf("create without PayPal-Request-Id: %d %v", status, body)
	}
	if got := b.srv.CountsByCustomID("ref-required"); got.Orders != 0 {
		t.Fatalf("refused creates made %+v", got)
	}
	if status, body := b.call(t, "POST", "/v2/checkout/orders", "req-complete", mustJSON(t, order(""))); status != 201 || body["status"] != "COMPLETED" {
		t.Fatalf("complete create: %d %v", status, body)
	}

	// Transaction Search: start_date and end_date.
	search := url.Values{"start_date": {"2025-03-01T00:00:00Z"}, "end_date": {"2025-03-02T00:00:00Z"}}
	for _, p := range []string{"start_date", "end_date"} {
		q := url.Values{}
		for k, v := range search {
			if k != p {
				q[k] = v
			}
		}
		status, body := b.call(t, "GET", "/v1/reporting/transactions?"+q.Encode(), "", "")
		if f, issue := detailOf(body); status != 400 || body["name"] != "INVALID_REQUEST" || issue != "MISSING_REQUIRED_PARAMETER" || f != p {
			t.Errorf("search without %s: %d %v", p, status, body)
		}
	}
	if status, body := b.call(t, "GET", "/v1/reporting/transactions?"+search.Encode(), "", ""); status != 200 {
		t.Errorf("complete search: %d %v", status, body)
	}

	// Webhook signature verification: every field.
	verify := map[string]any{"auth_algo": "SHA256withRSA", "cert_url": "https://api.paypal.com/cert", "transmission_id": "t-1",
		"transmission_sig": "sig", "transmission_time": "2025-03-01T12:00:00Z", "webhook_id": "WH-1", "webhook_event": map[string]any{"id": "WH-EV-1"}}
	for field := range verify {
		v := map[string]any{}
		for k, x := range verify {
			if k != field {
				v[k] = x
			}
		}
		status, body := b.call(t, "POST", "/v1/notifications/verify-webhook-signature", "", mustJSON(t, v))
		if f, issue := detailOf(body); status != 400 || issue != "MISSING_REQUIRED_PARAMETER" || f != "/"+field {
			t.Errorf("verification without %s: %d %v", field, status, body)
		}
	}
	if status, body := b.call(t, "POST", "/v1/notifications/verify-webhook-signature", "", mustJSON(t, verify)); status != 200 ||
		body["verification_status"] != "FAILURE" {
		t.Errorf("complete verification of an event the fake never sent: %d %v", status, body)
	}

	// The token endpoint requires grant_type=client_credentials.
	if status, body := b.tokenRequest(t, paypaltest.DefaultClientID, paypaltest.DefaultSecret, ""); status != 400 || body["error"] != "unsupported_grant_type" {
		t.Errorf("token without grant_type: %d %v", status, body)
	}
}
