package stripetest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// call sends method path with form (a query for GET) as sk_test_x and decodes Stripe's answer.
func call(t *testing.T, srv *stripetest.Server, method, path string, form url.Values) (int, map[string]any) {
	t.Helper()
	var body io.Reader
	target := srv.URL() + path
	if method == http.MethodGet {
		target += "?" + form.Encode()
	} else {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk_test_x")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: undecodable answer: %v", method, path, err)
	}
	return resp.StatusCode, out
}

// stripeError returns the "error" object of an answer, or nil.
func stripeError(v map[string]any) map[string]any {
	e, _ := v["error"].(map[string]any)
	return e
}

func without(form url.Values, name string) url.Values {
	out := url.Values{}
	for k, v := range form {
		if k != name {
			out[k] = v
		}
	}
	return out
}

// Each endpoint the adapter uses refuses a request without a parameter Stripe's API reference
// requires, with Stripe's error (400, invalid_request_error, code parameter_missing, param
// naming it), and creates nothing; the complete request succeeds.
func TestRequiredParams(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	create := url.Values{"amount": {"1000"}, "currency": {"usd"}, "payment_method": {stripetest.PaymentMethodVisa},
		"confirm": {"true"}, "payment_method_types[0]": {"card"}}
	code, pi := call(t, b.srv, http.MethodPost, "/v1/payment_intents", create)
	if code != 200 || pi["status"] != "succeeded" {
		t.Fatalf("complete create: %d %v", code, pi)
	}
	for _, tc := range []struct {
		method, path string
		valid        url.Values
		param        string // the parameter left out
		wantParam    string // the error's param ("" when Stripe names none)
	}{
		{"POST", "/v1/payment_intents", create, "amount", "amount"},
		{"POST", "/v1/payment_intents", create, "currency", "currency"},
		// A refund needs a PaymentIntent or a charge; without either Stripe names both in the message.
		{"POST", "/v1/refunds", url.Values{"payment_intent": {pi["id"].(string)}, "amount": {"100"}}, "payment_intent", ""},
		{"GET", "/v1/payment_intents/search", url.Values{"query": {"metadata['k']:'v'"}}, "query", "query"},
	} {
		code, out := call(t, b.srv, tc.method, tc.path, without(tc.valid, tc.param))
		e := stripeError(out)
		if code != 400 || e == nil || e["type"] != "invalid_request_error" || e["code"] != "parameter_missing" ||
			(tc.wantParam != "" && e["param"] != tc.wantParam) || !strings.Contains(e["message"].(string), tc.param) {
			t.Errorf("%s %s without %s: %d %v", tc.method, tc.path, tc.param, code, out)
		}
		if code, out := call(t, b.srv, tc.method, tc.path, tc.valid); code != 200 {
			t.Errorf("%s %s, complete: %d %v", tc.method, tc.path, code, out)
		}
	}
	// Three complete creates and one refund: the refused requests made nothing.
	if tot := b.srv.Totals()["usd"]; tot.Succeeded != 3000 || tot.Refunded != 100 {
		t.Fatalf("totals %+v", tot)
	}
}

// A PaymentIntent with a card attached to a Customer must name that Customer: Stripe refuses it
// without one, with another Customer, or with a Customer that does not exist.
func TestAttachedPaymentMethodNeedsItsCustomer(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	pm, err := b.srv.AttachPaymentMethod("cus_alice", stripetest.PaymentMethodVisa)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.srv.AttachPaymentMethod("cus_bob", stripetest.PaymentMethodDeclined); err != nil {
		t.Fatal(err)
	}
	create := url.Values{"amount": {"1000"}, "currency": {"usd"}, "payment_method": {pm}, "confirm": {"true"},
		"payment_method_types[0]": {"card"}}
	for name, tc := range map[string]struct {
		customer  string
		wantCode  string
		wantParam string
	}{
		"no customer":        {"", "", "customer"},
		"another customer":   {"cus_bob", "", "customer"},
		"unknown customer":   {"cus_nobody", "resource_missing", "customer"},
		"the card's own":     {"cus_alice", "", ""},
		"a card of nobody's": {"cus_alice", "", ""}, // Stripe's test card, attached to none: any customer
	} {
		form := create
		if name == "a card of nobody's" {
			form = without(create, "payment_method")
			form.Set("payment_method", stripetest.PaymentMethodVisa)
		}
		if tc.customer != "" {
			form = without(form, "customer")
			form.Set("customer", tc.customer)
		}
		code, out := call(t, b.srv, http.MethodPost, "/v1/payment_intents", form)
		if tc.wantParam == "" {
			if code != 200 || out["status"] != "succeeded" {
				t.Errorf("%s: %d %v", name, code, out)
			}
			continue
		}
		e := stripeError(out)
		if code != 400 || e == nil || e["type"] != "invalid_request_error" || e["param"] != tc.wantParam ||
			(tc.wantCode != "" && e["code"] != tc.wantCode) {
			t.Errorf("%s: %d %v", name, code, out)
		}
	}
	if tot := b.srv.Totals()["usd"]; tot.Succeeded != 2000 {
		t.Fatalf("totals %+v: only the two accepted PaymentIntents moved money", tot)
	}
	if _, err := b.srv.AttachPaymentMethod("cus_alice", "pm_card_unknown"); err == nil {
		t.Fatal("attached an unknown test card")
	}
	if _, err := b.srv.AttachPaymentMethod("alice", stripetest.PaymentMethodVisa); err == nil {
		t.Fatal("attached a card to a customer id without cus_")
	}
}
