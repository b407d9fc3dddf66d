package adyentest_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"github.com/payonce/payonce/providers/adyen/adyentest"
)

// Adyen does not deduplicate references, only idempotency keys: the same key is one payment,
// another key with the same reference is a second one.
func Example() {
	srv := adyentest.NewServer(nil)
	defer srv.Close()

	client := srv.Client() // no keep-alives: a lost response reaches the caller
	pay := func(key string) string {
		body := `{"merchantAccount":"ShopECOM","amount":{"currency":"EUR","value":2000},"reference":"order-42",
			"paymentMethod":{"type":"scheme","storedPaymentMethodId":"pm_card_visa"},"returnUrl":"https://shop.example/return",
			"shopperReference":"usr_7fQ9x","shopperInteraction":"ContAuth","recurringProcessingModel":"CardOnFile"}`
		req, _ := http.NewRequest(http.MethodPost, srv.URL()+"/payments", bytes.NewBufferString(body))
		req.Header.Set("X-API-Key", "AQE_example")
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	first := pay("order-42_charge_0")
	fmt.Println("replay is identical:", pay("order-42_charge_0") == first)
	fmt.Printf("%+v\n", srv.Counts("order-42"))
	pay("another-key")
	fmt.Printf("%+v\n", srv.Counts("order-42"))
	fmt.Printf("%+v\n", srv.Totals())
	// Output:
	// replay is identical: true
	// {Payments:1 Refunds:0 Captures:0 Cancels:0 Reversals:0}
	// {Payments:2 Refunds:0 Captures:0 Cancels:0 Reversals:0}
	// map[EUR:{Authorised:4000 Captured:4000 Refunded:0 Net:4000 NetAmount:40.00}]
}
