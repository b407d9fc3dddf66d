package stripetest

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// ChargeAvailableAfter is how long after its creation a charge's balance transaction stays
// pending before its funds become available. Stripe's delay depends on the account's country
// and payout schedule (two business days for most US card payments); the fake uses a fixed two
// days on Config.Clock. Refunds and refund failures are available at once.
const ChargeAvailableAfter = 48 * time.Hour

// balanceTransaction is Stripe's BalanceTransaction with the fields stripe-go v79 reads. status
// is derived from available_on when served (see at).
type balanceTransaction struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"`
	Amount            int64    `json:"amount"`
	AvailableOn       int64    `json:"available_on"`
	Created           int64    `json:"created"`
	Currency          string   `json:"currency"`
	Description       *string  `json:"description"`
	ExchangeRate      *float64 `json:"exchange_rate"`
	Fee               int64    `json:"fee"`
	FeeDetails        []any    `json:"fee_details"`
	Net               int64    `json:"net"`
	ReportingCategory string   `json:"reporting_category"`
	Source            string   `json:"source"`
	Status            string   `json:"status"`
	Type              string   `json:"type"`
}

// at is the transaction as seen at now: pending until available_on, then available.
func (bt *balanceTransaction) at(now int64) *balanceTransaction {
	out := *bt
	out.Status = "available"
	if now < bt.AvailableOn {
		out.Status = "pending"
	}
	return &out
}

// balanceTransactionTypes are the values of Stripe's type filter (API 2024-06-20, stripe-go
// v79); the fake creates charge, refund and refund_failure only.
var balanceTransactionTypes = []string{"adjustment", "advance", "advance_funding", "anticipation_repayment",
	"application_fee", "application_fee_refund", "charge", "climate_order_purchase", "climate_order_refund",
	"connect_collection_transfer", "contribution", "issuing_authorization_hold", "issuing_authorization_release",
	"issuing_dispute", "issuing_transaction", "obligation_outbound", "obligation_reversal_inbound", "payment",
	"payment_failure_refund", "payment_network_reserve_hold", "payment_network_reserve_release", "payment_refund",
	"payment_reversal", "payment_unreconciled", "payout", "payout_cancel", "payout_failure", "refund",
	"refund_failure", "reserve_transaction", "reserved_funds", "stripe_fee", "stripe_fx_fee", "tax_fee", "topup",
	"topup_reversal", "transfer", "transfer_cancel", "transfer_failure", "transfer_refund"}

// recordBalanceLocked records the balance transaction of typ (also its reporting_category)
// moving amount (signed: positive into the balance) for the object source, created now, and
// returns its id. Fees are zero, so net is amount. It is called with s.mu held.
func (s *Server) recordBalanceLocked(typ string, amount int64, currency, source string, description *string) string {
	created := s.clock()
	availableOn := created
	if typ == "charge" {
		availableOn = created.Add(ChargeAvailableAfter)
	}
	bt := &balanceTransaction{
		ID:                s.newIDLocked("txn"),
		Object:            "balance_transaction",
		Amount:            amount,
		AvailableOn:       availableOn.Unix(),
		Created:           created.Unix(),
		Currency:          currency,
		Description:       description,
		FeeDetails:        []any{},
		Net:               amount,
		ReportingCategory: typ,
		Source:            source,
		Type:              typ,
	}
	s.balance[bt.ID] = bt
	s.border = append(s.border, bt)
	return bt.ID
}

// listBalanceTransactions serves GET /v1/balance_transactions: newest first, with created
// filters (created, created[gt|gte|lt|lte]), type (one of Stripe's types; anything else is a
// 400 naming it), limit (1..100, default 10) and starting_after.
func (s *Server) listBalanceTransactions(c *call) (*response, bool) {
	f := c.form
	created, bad := createdFilter(f)
	if bad != nil {
		return bad, false
	}
	typ := f.Get("type")
	if f.Has("type") && !slices.Contains(balanceTransactionTypes, typ) {
		return errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Code: "parameter_invalid_string",
			Param: "type", Message: "Invalid type: must be one of " + strings.Join(balanceTransactionTypes, ", ")}), false
	}
	page, more, bad := listPage(f, "balance_transaction", s.border,
		func(bt *balanceTransaction) string { return bt.ID },
		func(bt *balanceTransaction) bool { return created(bt.Created) && (typ == "" || bt.Type == typ) })
	if bad != nil {
		return bad, false
	}
	now := s.clock().Unix()
	for i, bt := range page {
		page[i] = bt.at(now)
	}
	return jsonResponse(http.StatusOK, list[*balanceTransaction]{Object: "list", Data: page, HasMore: more,
		URL: "/v1/balance_transactions"}), true
}

func (s *Server) getBalanceTransaction(c *call) (*response, bool) {
	bt, ok := s.balance[c.id]
	if !ok {
		return noSuch(http.StatusNotFound, "balance transaction", "id", c.id)
	}
	return jsonResponse(http.StatusOK, bt.at(s.clock().Unix())), true
}
