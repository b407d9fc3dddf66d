package paypaltest

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/payonce/payonce/money"
)

// Transaction Search (GET /v1/reporting/transactions) limits.
const (
	// MaxSearchRange is the longest [start_date, end_date] range Transaction Search accepts.
	MaxSearchRange = 31 * 24 * time.Hour

	// MaxSearchPageSize and DefaultSearchPageSize bound and default page_size.
	MaxSearchPageSize     = 500
	DefaultSearchPageSize = 100
)

// Transaction event codes and statuses the fake records (PayPal's T-codes; statuses S success,
// P pending, D denied, V reversed).
const (
	EventCodeCheckoutPayment = "T0006" // a PayPal Checkout APIs payment: a completed capture
	EventCodePaymentRefund   = "T1107" // a payment refund, negative
	TransactionSuccess       = "S"
	TransactionReversed      = "V"
)

// searchTimeLayout is how Transaction Search writes dates: "2025-03-01T12:00:00+0000" (no colon
// in the offset, unlike RFC 3339).
const searchTimeLayout = "2006-01-02T15:04:05-0700"

// transaction is one entry of the account's transaction history, as Transaction Search shows it.
// Its id is the capture's or the refund's (PayPal's transaction id is the capture or refund id).
type transaction struct {
	id          string
	referenceID string // the refunded capture, for refunds
	eventCode   string
	status      string
	amount      money.Money // signed: negative for refunds
	customID    string
	invoiceID   string
	initiated   time.Time
	updated     time.Time
}

type transactionInfoJSON struct {
	TransactionID         string     `json:"transaction_id"`
	PayPalReferenceID     string     `json:"paypal_reference_id,omitempty"`
	PayPalReferenceIDType string     `json:"paypal_reference_id_type,omitempty"`
	EventCode             string     `json:"transaction_event_code"`
	InitiationDate        string     `json:"transaction_initiation_date"`
	UpdatedDate           string     `json:"transaction_updated_date"`
	Amount                amountJSON `json:"transaction_amount"`
	Status                string     `json:"transaction_status"`
	InvoiceID             string     `json:"invoice_id,omitempty"`
	CustomField           string     `json:"custom_field,omitempty"`
	ProtectionEligibility string     `json:"protection_eligibility"`
}

type transactionDetailJSON struct {
	TransactionInfo transactionInfoJSON `json:"transaction_info"`
}

type searchResponseJSON struct {
	TransactionDetails    []transactionDetailJSON `json:"transaction_details"`
	AccountNumber         string                  `json:"account_number"`
	StartDate             string                  `json:"start_date"`
	EndDate               string                  `json:"end_date"`
	LastRefreshedDatetime string                  `json:"last_refreshed_datetime"`
	Page                  int                     `json:"page"`
	TotalItems            int                     `json:"total_items"`
	TotalPages            int                     `json:"total_pages"`
	Links                 []link                  `json:"links"`
}

func (tx *transaction) view() transactionDetailJSON {
	info := transactionInfoJSON{TransactionID: tx.id, EventCode: tx.eventCode,
		InitiationDate: tx.initiated.UTC().Format(searchTimeLayout), UpdatedDate: tx.updated.UTC().Format(searchTimeLayout),
		Amount: amountOf(tx.amount), Status: tx.status, InvoiceID: tx.invoiceID, CustomField: tx.customID,
		ProtectionEligibility: "02"}
	if tx.referenceID != "" {
		info.PayPalReferenceID, info.PayPalReferenceIDType = tx.referenceID, "TXN"
	}
	return transactionDetailJSON{TransactionInfo: info}
}

// recordTransactionLocked appends a successful transaction initiated now. It is called with s.mu
// held.
func (s *Server) recordTransactionLocked(id, referenceID, eventCode string, amount money.Money, customID, invoiceID string, now time.Time) {
	tx := &transaction{id: id, referenceID: referenceID, eventCode: eventCode, status: TransactionSuccess, amount: amount,
		customID: customID, invoiceID: invoiceID, initiated: now, updated: now}
	s.transactions = append(s.transactions, tx)
	s.transactionByID[id] = tx
}

// searchTransactions is GET /v1/reporting/transactions: the transactions initiated in
// [start_date, end_date] (both inclusive, to the second) that are indexed already (initiated at
// or before now - Config.SearchLag), oldest first, one page.
func (s *Server) searchTransactions(c *call) (*response, resourceRef) {
	q := c.r.URL.Query()
	start, bad := searchDate(q, "start_date")
	if bad != nil {
		return bad, resourceRef{}
	}
	end, bad := searchDate(q, "end_date")
	if bad != nil {
		return bad, resourceRef{}
	}
	switch {
	case end.Before(start):
		return searchInvalid("end_date", q.Get("end_date"), "INVALID_DATE_RANGE",
			"end_date must not be before start_date."), resourceRef{}
	case end.Sub(start) > MaxSearchRange:
		return searchInvalid("end_date", q.Get("end_date"), "INVALID_DATE_RANGE",
			fmt.Sprintf("The date range from start_date to end_date is %v; it must be at most 31 days.", end.Sub(start))), resourceRef{}
	}
	page, bad := searchInt(q, "page", 1, 1, 1<<31-1)
	if bad != nil {
		return bad, resourceRef{}
	}
	size, bad := searchInt(q, "page_size", DefaultSearchPageSize, 1, MaxSearchPageSize)
	if bad != nil {
		return bad, resourceRef{}
	}

	refreshed := s.clock().Add(-s.searchLag).Truncate(time.Second)
	var hits []*transaction
	for _, tx := range s.transactions {
		at := tx.initiated.Truncate(time.Second)
		if !at.Before(start) && !at.After(end) && !at.After(refreshed) {
			hits = append(hits, tx)
		}
	}
	// Oldest first, in recording order among equal dates.
	slices.SortStableFunc(hits, func(a, b *transaction) int { return a.initiated.Compare(b.initiated) })
	out := searchResponseJSON{TransactionDetails: []transactionDetailJSON{}, AccountNumber: "FAKEACCOUNT1",
		StartDate: start.UTC().Format(searchTimeLayout), EndDate: end.UTC().Format(searchTimeLayout),
		LastRefreshedDatetime: refreshed.UTC().Format(searchTimeLayout),
		Page:                  page, TotalItems: len(hits), TotalPages: (len(hits) + size - 1) / size,
		Links: []link{{Href: "/v1/reporting/transactions?" + c.r.URL.RawQuery, Rel: "self", Method: "GET"}}}
	if first := (page - 1) * size; first < len(hits) {
		for _, tx := range hits[first:min(first+size, len(hits))] {
			out.TransactionDetails = append(out.TransactionDetails, tx.view())
		}
	}
	return jsonResponse(http.StatusOK, out), resourceRef{}
}

// searchDate reads a required RFC 3339 date parameter (PayPal's own "+0000" offset form is
// accepted too). Fractions of seconds are dropped. start_date and end_date are required
// (https://developer.paypal.com/docs/api/transaction-search/v1/#transactions_get; "required": true
// in https://github.com/paypal/paypal-rest-api-specifications/blob/main/openapi/reporting_transactions_v1.json);
// without one, 400 INVALID_REQUEST with issue MISSING_REQUIRED_PARAMETER naming it (PayPal's
// validation error, https://developer.paypal.com/api/rest/responses/#link-validationerrors).
func searchDate(q url.Values, name string) (time.Time, *response) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, searchInvalid(name, "", "MISSING_REQUIRED_PARAMETER", name+" is required.")
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		if t, err = time.Parse(searchTimeLayout, v); err != nil {
			return time.Time{}, searchInvalid(name, v, "INVALID_PARAMETER_SYNTAX",
				name+" must be a date and time in RFC 3339 format with seconds, e.g. 2025-03-01T00:00:00Z.")
		}
	}
	return t.Truncate(time.Second), nil
}

// searchInt reads an optional integer parameter in [lo, hi].
func searchInt(q url.Values, name string, def, lo, hi int) (int, *response) {
	if !q.Has(name) {
		return def, nil
	}
	v := q.Get(name)
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, searchInvalid(name, v, "INVALID_PARAMETER_VALUE", fmt.Sprintf("%s must be an integer from %d to %d.", name, lo, hi))
	}
	return n, nil
}

func searchInvalid(field, value, issue, description string) *response {
	return apiError(http.StatusBadRequest, "INVALID_REQUEST",
		"Request is not well-formed, syntactically incorrect, or violates schema.",
		detail{Field: field, Value: value, Location: "query", Issue: issue, Description: description})
}
