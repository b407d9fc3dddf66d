package ledger_test

import (
	"errors"
	"testing"

	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/money"
)

// A refund the provider failed after it succeeded is reversed by an entry
// of its own under the refund's key: the books return to the charge alone,
// the refund's entry stays, and posting the reversal again is a replay.
func TestRefundReversal(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if _, err := b.ledger.Post(b.ctx, charge(t, "usr_1_charge_a", eur("25.00"))); err != nil {
		t.Fatal(err)
	}
	refund, err := ledger.RefundEntry("usr_1_refund_b", "stripe", eur("25.00"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ledger.Post(b.ctx, refund); err != nil {
		t.Fatal(err)
	}
	rev, err := ledger.RefundReversalEntry("usr_1_refund_b", "stripe", eur("25.00"))
	if err != nil {
		t.Fatal(err)
	}
	if rev.Key != refund.Key || rev.Step != ledger.StepRefundReversal || rev.Step == refund.Step {
		t.Fatalf("reversal under %s/%s, want the refund's key under its own step", rev.Key, rev.Step)
	}
	first, err := b.ledger.Post(b.ctx, rev)
	if err != nil || first.Replayed {
		t.Fatalf("reversal: %+v %v", first, err)
	}
	again, err := b.ledger.Post(b.ctx, rev)
	if err != nil || !again.Replayed || again.Entry.ID != first.Entry.ID {
		t.Fatalf("reversal posted again: %+v %v, want a replay of entry %d", again, err, first.Entry.ID)
	}
	for code, want := range map[string]string{stripe: "25.00 EUR", ledger.CustomerPayments: "-25.00 EUR", ledger.CustomerRefunds: "0.00 EUR"} {
		if got := b.balance(t, code, money.EUR); got != want {
			t.Errorf("balance %s = %s; want %s", code, got, want)
		}
	}
	if n := b.count(t, "ledger_entries"); n != 3 {
		t.Fatalf("%d entries, want 3 (charge, refund, reversal)", n)
	}
	if _, err := ledger.RefundReversalEntry("k", "stripe", eur("0")); !errors.Is(err, money.ErrNotPositive) {
		t.Errorf("RefundReversalEntry(0) error = %v; want money.ErrNotPositive", err)
	}
}
