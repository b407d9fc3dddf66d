package provider

import (
	"fmt"

	"github.com/payonce/payonce/money"
)

// Movement is the kind of a balance movement an adapter's [Totaler] sums
// with [AddMovement].
type Movement int

const (
	// MovementCharge is a charge: its amount (positive) is added to
	// [Totals].Charged.
	MovementCharge Movement = iota + 1
	// MovementRefund is a refund (negative: money given back) or a
	// refund's failure (positive: money returned), as the providers'
	// reports sign them: its amount is subtracted from [Totals].Refunded.
	MovementRefund
)

// String names m as in the code: "MovementCharge" or "MovementRefund".
func (m Movement) String() string {
	switch m {
	case MovementCharge:
		return "MovementCharge"
	case MovementRefund:
		return "MovementRefund"
	}
	return fmt.Sprintf("Movement(%d)", int(m))
}

// AddMovement adds one balance movement of kind m to totals, as the
// providers' reports sign them: a charge (positive) to Charged, a refund
// (negative: money given back) or a refund failure (positive: money
// returned) to Refunded, negated. A kind other than [MovementCharge] and
// [MovementRefund] is an error and leaves totals as they were.
func AddMovement(totals map[money.Currency]Totals, m Movement, amount money.Money) error {
	if m != MovementCharge && m != MovementRefund {
		return fmt.Errorf("provider: AddMovement: unknown movement kind %v: pass provider.MovementCharge or provider.MovementRefund", m)
	}
	cur := amount.Currency()
	t, ok := totals[cur]
	if !ok {
		zero, err := money.FromMinor(0, cur)
		if err != nil {
			return err
		}
		t = Totals{Charged: zero, Refunded: zero}
	}
	var err error
	if m == MovementCharge {
		t.Charged, err = t.Charged.Add(amount)
	} else {
		t.Refunded, err = t.Refunded.Sub(amount)
	}
	if err != nil {
		return err
	}
	totals[cur] = t
	return nil
}
