package payments_test

import (
	"fmt"

	"github.com/payonce/payonce/payments"
)

// The key a provider carries is the composed one: a charge of customer
// cust_1 with the client's key order-3 is found at Stripe by the metadata
// payonce_key:'cust_1_charge_order-3' (Stripe's search:
// metadata['payonce_key']:'cust_1_charge_order-3'), not by order-3.
func ExampleChargeKey() {
	key, err := payments.ChargeKey("cust_1", "order-3")
	if err != nil {
		panic(err)
	}
	fmt.Println(key)
	refund, _ := payments.RefundKey("cust_1", "refund-1")
	fmt.Println(refund)
	// Output:
	// cust_1_charge_order-3
	// cust_1_refund_refund-1
}
