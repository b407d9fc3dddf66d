package money_test

import (
	"errors"
	"fmt"

	"github.com/payonce/payonce/money"
)

func Example() {
	// PayPal sends decimal strings, Stripe and Adyen minor units.
	fromPayPal, _ := money.Parse("10.50", money.EUR)
	fromStripe, _ := money.FromMinor(1050, money.EUR)
	fmt.Println(fromPayPal, fromStripe.Equal(fromPayPal))
	fmt.Println(fromPayPal.Minor(), fromPayPal.AmountString())

	yen, _ := money.FromMinor(1050, money.JPY)
	dinar, _ := money.FromMinor(1050, money.KWD)
	fmt.Println(yen, dinar)

	// Refused, never rounded.
	_, err := money.Parse("10.505", money.EUR)
	fmt.Println(err)
	fmt.Println(errors.Is(err, money.ErrTooPrecise))
	_, err = money.Parse("1e3", money.EUR)
	fmt.Println(errors.Is(err, money.ErrMalformed))
	fmt.Println(money.MustParse("0", money.EUR).CheckCharge())

	// Output:
	// 10.50 EUR true
	// 1050 10.50
	// 1050 JPY 1.050 KWD
	// money: too many decimal places for the currency: "10.505" EUR: 3 decimal places, EUR allows 2
	// true
	// true
	// money: amount 0.00 EUR is not positive: a charge or refund needs an amount above zero
}
