package paypaltest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// A single-step create (with a payment source, so PayPal captures in the create) whose response
// is lost after PayPal committed it: the retry with the same PayPal-Request-Id answers 200 with
// the same order, and the fake proves one order and one capture exist.
func Example() {
	srv := paypaltest.NewServer(nil)
	defer srv.Close()
	client := srv.Client() // no keep-alives: a lost response reaches the caller

	tokenReq, _ := http.NewRequest("POST", srv.URL()+"/v1/oauth2/token", strings.NewReader("grant_type=client_credentials"))
	tokenReq.SetBasicAuth(paypaltest.DefaultClientID, paypaltest.DefaultSecret)
	tokenReq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := client.Do(tokenReq)
	if err != nil {
		panic(err)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	err = json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if err != nil {
		panic(err)
	}
	token := tok.AccessToken

	create := func() (int, error) {
		body := `{"intent":"CAPTURE","purchase_units":[{"custom_id":"order-42","amount":{"currency_code":"EUR","value":"20.00"}}],` +
			`"payment_source":{"card":{"vault_id":"` + paypaltest.PaymentMethodVisa + `"}}}`
		req, _ := http.NewRequest("POST", srv.URL()+"/v2/checkout/orders", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("PayPal-Request-Id", "7b0c3f4e-0000-5000-8000-000000000042")
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	srv.Inject(paypaltest.Fault{Kind: paypaltest.ResetAfter, Path: "/v2/checkout/orders"})
	_, err = create()
	fmt.Println("first attempt lost:", err != nil)
	status, err := create()
	if err != nil {
		panic(err)
	}
	fmt.Println("retry:", status)
	fmt.Printf("%+v\n", srv.CountsByCustomID("order-42"))
	// Output:
	// first attempt lost: true
	// retry: 200
	// {Orders:1 Captures:1 Refunds:0}
}
