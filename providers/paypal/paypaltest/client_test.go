package paypaltest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// A lost response of a read, through Server.Client as its documentation says: a first request
// opens a connection, and a ResetAfter on the order's GET must reach the caller as an error, not
// as the answer net/http's own resend of a GET on a kept-alive connection would have fetched.
func TestClientSeesResetAfter(t *testing.T) {
	t.Parallel()
	srv := paypaltest.NewServer(nil)
	t.Cleanup(srv.Close)
	client := srv.Client()
	do := func(method, path, body string, header map[string]string) (*http.Response, error) {
		req, err := http.NewRequest(method, srv.URL()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		return client.Do(req)
	}
	tokenReq, _ := http.NewRequest("POST", srv.URL()+"/v1/oauth2/token", strings.NewReader("grant_type=client_credentials"))
	tokenReq.SetBasicAuth(paypaltest.DefaultClientID, paypaltest.DefaultSecret)
	tokenReq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := client.Do(tokenReq)
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	err = json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	auth := map[string]string{"Authorization": "Bearer " + tok.AccessToken, "Content-Type": "application/json",
		"PayPal-Request-Id": "7b0c3f4e-0000-5000-8000-000000000043"}
	resp, err = do("POST", "/v2/checkout/orders", `{"intent":"CAPTURE","purchase_units":[{"custom_id":"order-43","amount":{"currency_code":"EUR","value":"20.00"}}]}`, auth)
	if err != nil {
		t.Fatal(err)
	}
	var order struct {
		ID string `json:"id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&order)
	resp.Body.Close()
	if err != nil || resp.StatusCode/100 != 2 || order.ID == "" {
		t.Fatalf("create: %d %+v %v", resp.StatusCode, order, err)
	}

	srv.Inject(paypaltest.Fault{Kind: paypaltest.ResetAfter, Method: "GET", Path: "/v2/checkout/orders/*"})
	if resp, err := do("GET", "/v2/checkout/orders/"+order.ID, "", auth); err == nil {
		resp.Body.Close()
		t.Fatalf("the read's lost response came back as %d: a resend on a kept-alive connection healed the fault", resp.StatusCode)
	}
	resp, err = do("GET", "/v2/checkout/orders/"+order.ID, "", auth)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the read again: %d", resp.StatusCode)
	}
}
