package paypal

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/adapterkit"
)

// Transaction Search limits.
const (
	// MaxSearchRange is the longest date range one Transaction Search request may span (31
	// days); [Provider.Totals] splits longer windows.
	MaxSearchRange = 31 * 24 * time.Hour

	// MaxSearchPageSize is the largest page_size Transaction Search accepts; [Provider.Totals]
	// reads pages of this size.
	MaxSearchPageSize = 500

	// SearchLag is how far Transaction Search may lag behind the transactions (PayPal: up to 3
	// hours). See [Provider.Totals].
	SearchLag = 3 * time.Hour
)

// Transaction event codes and statuses [Provider.Totals] reads.
const (
	// EventCodePaymentRefund (T1107) is a payment refund, with a negative amount. Payments
	// received are T00nn (T0006 for the Checkout APIs payments payonce captures).
	EventCodePaymentRefund = "T1107"

	// TransactionSuccess is transaction_status S; the others are P (pending), D (denied) and V
	// (reversed).
	TransactionSuccess = "S"
)

// searchTimeLayout is how Transaction Search writes dates: "2025-03-01T12:00:00+0000".
const searchTimeLayout = "2006-01-02T15:04:05-0700"

var _ provider.Totaler = (*Provider)(nil)

// TransactionSearchRequest is the query of GET /v1/reporting/transactions.
type TransactionSearchRequest struct {
	// StartDate and EndDate bound the transactions' initiation dates; they are sent in RFC 3339
	// with whole seconds (fractions dropped). PayPal requires both, at most [MaxSearchRange]
	// apart, and does not document whether EndDate is inclusive.
	StartDate, EndDate time.Time
	// Page is the page to read, from 1; 0 is PayPal's default (1).
	Page int
	// PageSize is 1..[MaxSearchPageSize]; 0 is PayPal's default (100).
	PageSize int
}

// TransactionSearchPage is one page of a Transaction Search answer (fields=transaction_info).
type TransactionSearchPage struct {
	TransactionDetails []TransactionDetail `json:"transaction_details"`
	AccountNumber      string              `json:"account_number,omitempty"`
	StartDate          string              `json:"start_date,omitempty"`
	EndDate            string              `json:"end_date,omitempty"`
	// LastRefreshedDatetime is the time up to which the search data is complete: transactions
	// after it may be missing (see [SearchLag]). Parse it with [ParseSearchTime].
	LastRefreshedDatetime string `json:"last_refreshed_datetime,omitempty"`
	Page                  int    `json:"page"`
	TotalItems            int    `json:"total_items"`
	TotalPages            int    `json:"total_pages"`
}

// TransactionDetail is one transaction of a search answer.
type TransactionDetail struct {
	TransactionInfo TransactionInfo `json:"transaction_info"`
}

// TransactionInfo is a transaction's transaction_info.
type TransactionInfo struct {
	// TransactionID is the capture's or the refund's id.
	TransactionID string `json:"transaction_id"`
	// PayPalReferenceID is a related transaction (a refund's capture).
	PayPalReferenceID     string `json:"paypal_reference_id,omitempty"`
	PayPalReferenceIDType string `json:"paypal_reference_id_type,omitempty"`
	// EventCode is the T-code: T00nn payments received (T0006 Checkout APIs), T1107 a payment
	// refund, ...
	EventCode string `json:"transaction_event_code"`
	// InitiationDate and UpdatedDate are in PayPal's "2025-03-01T12:00:00+0000" form; parse
	// them with [ParseSearchTime].
	InitiationDate string `json:"transaction_initiation_date"`
	UpdatedDate    string `json:"transaction_updated_date,omitempty"`
	// Amount is signed: negative for money leaving the account (refunds).
	Amount Amount `json:"transaction_amount"`
	// Status is S (success), P (pending), D (denied) or V (reversed).
	Status      string `json:"transaction_status"`
	InvoiceID   string `json:"invoice_id,omitempty"`
	CustomField string `json:"custom_field,omitempty"`
}

// ParseSearchTime parses a Transaction Search date: PayPal's "2025-03-01T12:00:00+0000" form or
// RFC 3339.
func ParseSearchTime(s string) (time.Time, error) {
	t, err := time.Parse(searchTimeLayout, s)
	if err != nil {
		if t2, err2 := time.Parse(time.RFC3339Nano, s); err2 == nil {
			return t2, nil
		}
		return time.Time{}, fmt.Errorf("paypal: transaction search date %q is neither %s nor RFC 3339", s, searchTimeLayout)
	}
	return t, nil
}

// SearchTransactions is GET /v1/reporting/transactions with fields=transaction_info: one page of
// the account's transactions initiated between req.StartDate and req.EndDate. Ranges longer than
// [MaxSearchRange] and a page_size out of range are PayPal's 400 *[APIError]; zero dates or an
// EndDate before StartDate are refused before sending.
func (c *Client) SearchTransactions(ctx context.Context, req TransactionSearchRequest) (*TransactionSearchPage, error) {
	switch {
	case req.StartDate.IsZero():
		return nil, invalid("StartDate", "is required (a zero time)")
	case req.EndDate.IsZero():
		return nil, invalid("EndDate", "is required (a zero time)")
	case req.EndDate.Before(req.StartDate):
		return nil, invalid("EndDate", "must not be before StartDate")
	case req.Page < 0:
		return nil, invalid("Page", fmt.Sprintf("must be positive (or 0 for the first page), got %d", req.Page))
	case req.PageSize < 0 || req.PageSize > MaxSearchPageSize:
		return nil, invalid("PageSize", fmt.Sprintf("must be 1..%d (or 0 for PayPal's default), got %d", MaxSearchPageSize, req.PageSize))
	}
	q := url.Values{
		"start_date": {req.StartDate.UTC().Truncate(time.Second).Format(time.RFC3339)},
		"end_date":   {req.EndDate.UTC().Truncate(time.Second).Format(time.RFC3339)},
		"fields":     {"transaction_info"},
	}
	if req.Page > 0 {
		q.Set("page", strconv.Itoa(req.Page))
	}
	if req.PageSize > 0 {
		q.Set("page_size", strconv.Itoa(req.PageSize))
	}
	var page TransactionSearchPage
	if _, err := c.do(ctx, http.MethodGet, "/v1/reporting/transactions?"+q.Encode(), "", nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Totals sums, per currency, the money PayPal moved for payments and refunds in [from, to),
// from Transaction Search (GET /v1/reporting/transactions, every page). The reconciler
// compares it with the ledger.
//
// Only transactions in status S (success) count, by event code, at their gross amount (PayPal's
// fees are not deducted):
//
//	T00nn with a positive amount    Charged  += amount  (payments received; T0006 for the
//	                                                     Checkout APIs captures payonce makes)
//	T1107                           Refunded += -amount (payment refunds, recorded negative)
//	anything else                   ignored: payments the account sent (T00nn negative),
//	                                reversals and disputes, fees, withdrawals, holds, ...
//
// Pending (P), denied (D) and reversed (V) transactions moved no money or took it back. A
// refund that fails later no longer shows S: it drops out of the window it was made in rather
// than reducing a later one, so Refunded is never negative here. Both Totals of a currency are
// Money of that currency (zero when nothing moved that way); a currency with no counted
// transaction is absent from the map.
//
// Lag: PayPal's Transaction Search lags the transactions by up to 3 hours ([SearchLag]):
// Totals for a window ending less than 3 hours ago may be incomplete, silently (PayPal's
// answer looks the same). The reconciler's default drift window ends 4 hours ago
// (reconcile.Config.DriftLag), past that lag: do not set it under 3h with PayPal, or expect
// drift reports for payments of the last hours that later resolve themselves.
//
// Windows: PayPal's dates are in whole seconds, so the window is [from, to) with both bounds
// truncated to the second: consecutive windows sharing their bounds count every transaction
// exactly once (a window shorter than a second within one second is empty, and nothing is
// sent). A window longer than [MaxSearchRange] (31 days, PayPal's limit per request) is read
// in consecutive 31-day requests. Each request asks for [start, end] and the adapter keeps
// the transactions initiated in [start, end), whatever PayPal does at end_date; a transaction
// id seen twice (pages shifting while they are read) counts once.
//
// Transactions are in the currency the payment was received in; an account that converts
// received payments shows the conversion as further transactions (T02nn), which are ignored.
//
// Errors: *[provider.InvalidRequestError] naming from or to when a bound is zero or to is not
// after from (refused before sending); the errors of the other calls, classified alike:
// *[provider.InvalidRequestError] (a 400 names its parameter; an app without the Transaction
// Search permission gets 403), *[provider.NotSentError], *[provider.UnknownOutcomeError] (a
// read: retrying is harmless). A counted transaction in a currency money does not know, with
// an amount or a date that does not parse, or a sum out of range, is an
// *[provider.UnknownOutcomeError]: the totals are unknown, never silently short.
func (p *Provider) Totals(ctx context.Context, from, to time.Time) (map[money.Currency]provider.Totals, error) {
	if err := adapterkit.RefuseWindow(providerName, from, to); err != nil {
		return nil, err
	}
	start, end := time.Unix(from.Unix(), 0).UTC(), time.Unix(to.Unix(), 0).UTC()
	totals := map[money.Currency]provider.Totals{}
	seen := map[string]bool{}
	for chunk := start; chunk.Before(end); {
		chunkEnd := chunk.Add(MaxSearchRange)
		if chunkEnd.After(end) {
			chunkEnd = end
		}
		if err := p.addSearch(ctx, totals, seen, chunk, chunkEnd); err != nil {
			return nil, err
		}
		chunk = chunkEnd
	}
	return totals, nil
}

// addSearch reads every page of the transactions initiated in [start, end) into totals.
func (p *Provider) addSearch(ctx context.Context, totals map[money.Currency]provider.Totals, seen map[string]bool, start, end time.Time) error {
	for page := 1; ; page++ {
		res, err := p.c.SearchTransactions(ctx, TransactionSearchRequest{StartDate: start, EndDate: end, Page: page, PageSize: p.searchPageSize()})
		if err != nil {
			return classify(err)
		}
		for _, d := range res.TransactionDetails {
			if err := addTransaction(totals, seen, &d.TransactionInfo, start, end); err != nil {
				return &provider.UnknownOutcomeError{Provider: providerName, Err: err}
			}
		}
		if page >= res.TotalPages || len(res.TransactionDetails) == 0 {
			return nil
		}
	}
}

func (p *Provider) searchPageSize() int {
	if p.pageSize > 0 {
		return p.pageSize
	}
	return MaxSearchPageSize
}

// addTransaction adds tx to totals if it counts (see [Provider.Totals]) and was initiated in
// [start, end).
func addTransaction(totals map[money.Currency]provider.Totals, seen map[string]bool, tx *TransactionInfo, start, end time.Time) error {
	charged := strings.HasPrefix(tx.EventCode, "T00") && len(tx.EventCode) == 5
	if tx.Status != TransactionSuccess || (!charged && tx.EventCode != EventCodePaymentRefund) {
		return nil
	}
	at, err := ParseSearchTime(tx.InitiationDate)
	if err != nil {
		return fmt.Errorf("transaction %s (%s): %w", tx.TransactionID, tx.EventCode, err)
	}
	if at.Before(start) || !at.Before(end) {
		return nil // PayPal's end_date may be inclusive: the next window counts it
	}
	if tx.TransactionID != "" {
		if seen[tx.TransactionID] {
			return nil
		}
		seen[tx.TransactionID] = true
	}
	amount, err := tx.Amount.Money()
	if err != nil {
		return fmt.Errorf("transaction %s (%s): %w", tx.TransactionID, tx.EventCode, err)
	}
	if charged && !amount.IsPositive() {
		return nil // a payment the account sent
	}
	kind := provider.MovementRefund
	if charged {
		kind = provider.MovementCharge
	}
	if err := provider.AddMovement(totals, kind, amount); err != nil {
		return fmt.Errorf("summing transaction %s (%s): %w", tx.TransactionID, tx.EventCode, err)
	}
	return nil
}
