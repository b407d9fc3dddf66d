package stripe_test

import (
	"fmt"

	"github.com/payonce/payonce/money"
	paystripe "github.com/payonce/payonce/providers/stripe"
)

// Stripe's integer amounts follow Stripe's exponents, not ISO 4217's:
// ISK is written with two decimals (always 00), and a three-decimal amount
// must end in 0.
func ExampleToAmount() {
	for _, m := range []money.Money{
		money.MustParse("10.50", money.EUR),
		money.MustParse("500", money.JPY),
		money.MustParse("5000", "ISK"),
		money.MustParse("1.230", money.KWD),
		money.MustParse("1.235", money.KWD),
	} {
		amount, err := paystripe.ToAmount(m)
		if err != nil {
			fmt.Println(m, "refused")
			continue
		}
		back, _ := paystripe.FromAmount(amount, string(m.Currency()))
		fmt.Println(m, "is sent as", amount, "and read back as", back)
	}
	// Output:
	// 10.50 EUR is sent as 1050 and read back as 10.50 EUR
	// 500 JPY is sent as 500 and read back as 500 JPY
	// 5000 ISK is sent as 500000 and read back as 5000 ISK
	// 1.230 KWD is sent as 1230 and read back as 1.230 KWD
	// 1.235 KWD refused
}
