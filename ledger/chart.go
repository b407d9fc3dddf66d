package ledger

import (
	"fmt"

	"github.com/payonce/payonce/money"
)

// The chart of accounts payments posts to. Each code exists once per
// currency (EnsureAccount with the code and the currency). See the package
// doc for the entries a charge and a refund make.
const (
	// CustomerPayments is credited with what customers pay: its balance is
	// minus the total charged.
	CustomerPayments = "customer:payments"
	// CustomerRefunds is debited with what is refunded to customers: its
	// balance is the total refunded.
	CustomerRefunds = "customer:refunds"

	// StepCharge and StepRefund are the entry steps of a charge and a
	// refund.
	StepCharge = "charge"
	StepRefund = "refund"
	// StepRefundReversal is the step of the entry that reverses a
	// refund's (under the refund's key) when the provider failed the
	// refund after it succeeded.
	StepRefundReversal = "refund_reversal"
)

// ProviderCash returns the code of the account holding the money at a
// provider ("provider:stripe"): debited by charges, credited by refunds,
// its balance is what the provider holds for the platform.
func ProviderCash(provider string) string { return "provider:" + provider }

// ChartAccounts lists the accounts a provider needs in a currency, to open
// with [Ledger.EnsureAccount] at start-up.
func ChartAccounts(provider string, cur money.Currency) []EnsureAccountParams {
	return []EnsureAccountParams{
		{Code: ProviderCash(provider), Currency: cur},
		{Code: CustomerPayments, Currency: cur},
		{Code: CustomerRefunds, Currency: cur},
	}
}

// Debit returns a posting of amount to account.
func Debit(account string, amount money.Money) Posting {
	return Posting{Account: account, Amount: amount}
}

// Credit returns a posting of minus amount to account.
func Credit(account string, amount money.Money) Posting {
	return Posting{Account: account, Amount: amount.Neg()}
}

// ChargeEntry returns the entry of a captured charge of amount through
// provider, for the action with idempotency key key: debit the provider's
// cash, credit customer payments.
//
// Errors: *[ParamError] when amount is not positive (money.ErrNotPositive)
// or has no currency.
func ChargeEntry(key, provider string, amount money.Money) (PostParams, error) {
	if err := amount.CheckCharge(); err != nil {
		return PostParams{}, &ParamError{Field: "ChargeEntry amount", Reason: "is not a charge amount", Err: err}
	}
	return PostParams{
		Key:         key,
		Step:        StepCharge,
		Description: fmt.Sprintf("charge %s via %s", amount, provider),
		Postings: []Posting{
			Debit(ProviderCash(provider), amount),
			Credit(CustomerPayments, amount),
		},
	}, nil
}

// RefundEntry returns the entry of a refund of amount through provider,
// for the refund action with idempotency key key: debit customer refunds,
// credit the provider's cash.
//
// Errors: those of [ChargeEntry].
func RefundEntry(key, provider string, amount money.Money) (PostParams, error) {
	if err := amount.CheckCharge(); err != nil {
		return PostParams{}, &ParamError{Field: "RefundEntry amount", Reason: "is not a refund amount", Err: err}
	}
	return PostParams{
		Key:         key,
		Step:        StepRefund,
		Description: fmt.Sprintf("refund %s via %s", amount, provider),
		Postings: []Posting{
			Debit(CustomerRefunds, amount),
			Credit(ProviderCash(provider), amount),
		},
	}, nil
}

// RefundReversalEntry returns the entry that reverses RefundEntry(key,
// provider, amount), under the same key and step [StepRefundReversal]:
// debit the provider's cash, credit customer refunds. A provider can fail
// a refund after it succeeded (Stripe's failed refunds, Adyen's
// REFUND_FAILED); the money is back at the provider, and the refund's own
// entry stays, as every entry does.
//
// Errors: those of [ChargeEntry].
func RefundReversalEntry(key, provider string, amount money.Money) (PostParams, error) {
	refund, err := RefundEntry(key, provider, amount)
	if err != nil {
		return PostParams{}, err
	}
	out := PostParams{Key: key, Step: StepRefundReversal,
		Description: fmt.Sprintf("reversal of the refund %s via %s, failed at the provider", amount, provider)}
	for _, p := range refund.Postings {
		out.Postings = append(out.Postings, Posting{Account: p.Account, Amount: p.Amount.Neg()})
	}
	return out, nil
}

// Reversal returns the entry that cancels e: the same postings with
// opposite signs, under the correcting action's key and step. Entries are
// never changed; a mistake is corrected by posting its reversal (and then
// the right entry).
func Reversal(e Entry, key, step string) PostParams {
	postings := make([]Posting, len(e.Postings))
	for i, p := range e.Postings {
		postings[i] = Posting{Account: p.Account, Amount: p.Amount.Neg()}
	}
	return PostParams{
		Key:         key,
		Step:        step,
		Description: fmt.Sprintf("reversal of entry %d (%s/%s)", e.ID, e.Key, e.Step),
		Postings:    postings,
	}
}
