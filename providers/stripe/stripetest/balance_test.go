package stripetest_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// balanceTxns lists the balance transactions through stripe-go's iterator (every page).
func balanceTxns(t *testing.T, b *bundle, params *stripe.BalanceTransactionListParams) []*stripe.BalanceTransaction {
	t.Helper()
	var out []*stripe.BalanceTransaction
	it := b.sc.BalanceTransactions.List(params)
	for it.Next() {
		out = append(out, it.BalanceTransaction())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// btLine is what a test compares of a balance transaction.
type btLine struct {
	typ, source, currency, status string
	amount                        int64
}

func btLines(bts []*stripe.BalanceTransaction) []btLine {
	var out []btLine
	for _, bt := range bts {
		out = append(out, btLine{string(bt.Type), bt.Source.ID, string(bt.Currency), string(bt.Status), bt.Amount})
	}
	return out
}

// A succeeded PaymentIntent adds a charge transaction, a refund a negative refund transaction,
// a refund failing later a refund_failure giving the amount back; declines and requires_action
// move nothing. Each is stamped on the fake's clock, linked from its refund, and its charge
// becomes available after ChargeAvailableAfter.
func TestBalanceTransactionsFollowMoney(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	pi := must(b.sc.PaymentIntents.New(chargeParams("c1", 1000, stripetest.PaymentMethodVisa)))(t)
	if _, err := b.sc.PaymentIntents.New(chargeParams("c2", 700, stripetest.PaymentMethodDeclined)); err == nil {
		t.Fatal("the declined card was charged")
	}
	must(b.sc.PaymentIntents.New(chargeParams("c3", 900, stripetest.PaymentMethodAuthenticationRequired)))(t)
	b.clock.Advance(time.Minute)
	re1 := must(b.sc.Refunds.New(refundParams(pi.ID, "r1", 300)))(t)
	b.clock.Advance(time.Minute)
	re2 := must(b.sc.Refunds.New(refundParams(pi.ID, "r2", 200)))(t)
	b.clock.Advance(time.Hour)
	if err := b.srv.FailRefund(re2.ID); err != nil {
		t.Fatal(err)
	}

	bts := balanceTxns(t, b, &stripe.BalanceTransactionListParams{})
	want := []btLine{ // newest first
		{"refund_failure", re2.ID, "usd", "available", 200},
		{"refund", re2.ID, "usd", "available", -200},
		{"refund", re1.ID, "usd", "available", -300},
		{"charge", pi.LatestCharge.ID, "usd", "pending", 1000},
	}
	if got := btLines(bts); !slices.Equal(got, want) {
		t.Fatalf("balance transactions\n got %+v\nwant %+v", got, want)
	}
	wantCreated := []time.Time{t0.Add(time.Hour + 2*time.Minute), t0.Add(2 * time.Minute), t0.Add(time.Minute), t0}
	for i, bt := range bts {
		if bt.Created != wantCreated[i].Unix() || bt.Fee != 0 || bt.Net != bt.Amount || bt.Object != "balance_transaction" ||
			string(bt.ReportingCategory) != string(bt.Type) || bt.ExchangeRate != 0 {
			t.Fatalf("transaction %d: %+v, want created %d, no fee, net = amount, reporting_category = type", i, bt, wantCreated[i].Unix())
		}
	}
	if charge := bts[3]; charge.AvailableOn != t0.Add(stripetest.ChargeAvailableAfter).Unix() || charge.Description != "order c1" {
		t.Fatalf("charge transaction: %+v", charge)
	}

	// The refunds name their transactions.
	got2 := must(b.sc.Refunds.Get(re2.ID, nil))(t)
	if got2.BalanceTransaction == nil || got2.BalanceTransaction.ID != bts[1].ID ||
		got2.FailureBalanceTransaction == nil || got2.FailureBalanceTransaction.ID != bts[0].ID {
		t.Fatalf("refund %s: balance_transaction %+v failure_balance_transaction %+v", re2.ID, got2.BalanceTransaction, got2.FailureBalanceTransaction)
	}
	if re1.BalanceTransaction == nil || re1.BalanceTransaction.ID != bts[2].ID || re1.FailureBalanceTransaction != nil {
		t.Fatalf("refund %s: %+v %+v", re1.ID, re1.BalanceTransaction, re1.FailureBalanceTransaction)
	}

	// GET by id; the charge's funds become available on the clock.
	bt := must(b.sc.BalanceTransactions.Get(bts[3].ID, nil))(t)
	if bt.Status != stripe.BalanceTransactionStatusPending || bt.Amount != 1000 || bt.Source.ID != pi.LatestCharge.ID {
		t.Fatalf("get %s: %+v", bts[3].ID, bt)
	}
	b.clock.Advance(stripetest.ChargeAvailableAfter)
	if bt := must(b.sc.BalanceTransactions.Get(bts[3].ID, nil))(t); bt.Status != stripe.BalanceTransactionStatusAvailable {
		t.Fatalf("after %v: %s, want available", stripetest.ChargeAvailableAfter, bt.Status)
	}
	_, err := b.sc.BalanceTransactions.Get("txn_unknown", nil)
	if se := stripeErr(t, err); se.HTTPStatusCode != http.StatusNotFound || se.Code != stripe.ErrorCodeResourceMissing {
		t.Fatalf("unknown id: %+v", se)
	}

	// The sum of the transactions is the fake's ground truth.
	var net int64
	for _, bt := range bts {
		net += bt.Amount
	}
	if tot := b.srv.Totals()["usd"]; net != tot.Net || tot.Net != 1000-300 {
		t.Fatalf("transactions sum to %d, the fake's totals %+v", net, tot)
	}
}

// The type and created filters, and paging with limit and starting_after through stripe-go's
// iterator.
func TestListBalanceTransactionsFiltersAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var charges []string // transaction sources, oldest first
	for i := range 5 {
		pi := must(b.sc.PaymentIntents.New(chargeParams(fmt.Sprint("c", i), int64(100*(i+1)), stripetest.PaymentMethodVisa)))(t)
		charges = append(charges, pi.LatestCharge.ID)
		must(b.sc.Refunds.New(refundParams(pi.ID, fmt.Sprint("r", i), 10)))(t)
		b.clock.Advance(time.Second)
	}
	sources := func(bts []*stripe.BalanceTransaction) []string {
		var out []string
		for _, bt := range bts {
			out = append(out, bt.Source.ID)
		}
		return out
	}
	newestFirst := slices.Clone(charges)
	slices.Reverse(newestFirst)

	p := &stripe.BalanceTransactionListParams{Type: stripe.String("charge")}
	p.Limit = stripe.Int64(2) // three pages
	if got := sources(balanceTxns(t, b, p)); !slices.Equal(got, newestFirst) {
		t.Fatalf("charges over pages of 2: %v, want %v", got, newestFirst)
	}
	if got := balanceTxns(t, b, &stripe.BalanceTransactionListParams{Type: stripe.String("refund")}); len(got) != 5 ||
		got[0].Amount != -10 || got[0].Type != stripe.BalanceTransactionTypeRefund {
		t.Fatalf("refunds: %+v", btLines(got))
	}
	if got := balanceTxns(t, b, &stripe.BalanceTransactionListParams{Type: stripe.String("payout")}); len(got) != 0 {
		t.Fatalf("payouts: %+v", btLines(got))
	}

	// Created in [t0+1s, t0+3s): the second and third charge (and their refunds).
	p = &stripe.BalanceTransactionListParams{Type: stripe.String("charge"),
		CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: t0.Unix() + 1, LesserThan: t0.Unix() + 3}}
	if got := sources(balanceTxns(t, b, p)); !slices.Equal(got, []string{charges[2], charges[1]}) {
		t.Fatalf("created in [t0+1, t0+3): %v", got)
	}
	p = &stripe.BalanceTransactionListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThan: t0.Unix() + 2, LesserThanOrEqual: t0.Unix() + 3}}
	if got := balanceTxns(t, b, p); len(got) != 2 || got[1].Source.ID != charges[3] {
		t.Fatalf("created in (t0+2, t0+3]: %+v", btLines(got))
	}
	if got := balanceTxns(t, b, &stripe.BalanceTransactionListParams{Created: stripe.Int64(t0.Unix() + 4)}); len(got) != 2 ||
		got[1].Source.ID != charges[4] {
		t.Fatalf("created at t0+4: %+v", btLines(got))
	}

	// starting_after over raw HTTP: the page after the newest charge.
	all := balanceTxns(t, b, &stripe.BalanceTransactionListParams{Type: stripe.String("charge")})
	code, body := getBalance(t, b, url.Values{"type": {"charge"}, "limit": {"1"}, "starting_after": {all[0].ID}})
	if code != http.StatusOK || body.Object != "list" || body.URL != "/v1/balance_transactions" || !body.HasMore ||
		len(body.Data) != 1 || body.Data[0]["id"] != all[1].ID || body.Data[0]["status"] != "pending" {
		t.Fatalf("page after %s: %d %+v", all[0].ID, code, body)
	}
	code, body = getBalance(t, b, url.Values{"type": {"charge"}, "starting_after": {all[4].ID}})
	if code != http.StatusOK || body.HasMore || body.Data == nil || len(body.Data) != 0 {
		t.Fatalf("page after the oldest: %d %+v", code, body)
	}
}

type balanceList struct {
	Object  string           `json:"object"`
	Data    []map[string]any `json:"data"`
	HasMore bool             `json:"has_more"`
	URL     string           `json:"url"`
	Error   *struct {
		Type, Code, Param, Message string
	} `json:"error"`
}

func getBalance(t *testing.T, b *bundle, q url.Values) (int, balanceList) {
	t.Helper()
	var body balanceList
	code := apiGet(t, b.srv, "/v1/balance_transactions?"+q.Encode(), &body)
	return code, body
}

// Stripe's 400s: a bad limit, a malformed created bound, an unknown type, an unknown cursor.
func TestListBalanceTransactionsBadParams(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	must(b.sc.PaymentIntents.New(chargeParams("c1", 1000, stripetest.PaymentMethodVisa)))(t)
	for _, tc := range []struct {
		q           url.Values
		param, code string
	}{
		{url.Values{"limit": {"0"}}, "limit", "parameter_invalid_integer"},
		{url.Values{"limit": {"101"}}, "limit", "parameter_invalid_integer"},
		{url.Values{"limit": {"ten"}}, "limit", "parameter_invalid_integer"},
		{url.Values{"created[gte]": {"yesterday"}}, "created[gte]", "parameter_invalid_integer"},
		{url.Values{"created": {"1.5"}}, "created", "parameter_invalid_integer"},
		{url.Values{"type": {"charges"}}, "type", "parameter_invalid_string"},
		{url.Values{"type": {""}}, "type", "parameter_invalid_string"},
		{url.Values{"starting_after": {"txn_unknown"}}, "starting_after", "resource_missing"},
	} {
		code, body := getBalance(t, b, tc.q)
		if code != http.StatusBadRequest || body.Error == nil || body.Error.Param != tc.param || body.Error.Code != tc.code ||
			body.Error.Type != "invalid_request_error" || body.Error.Message == "" {
			t.Errorf("%v: %d %+v, want 400 %s on %s", tc.q, code, body.Error, tc.code, tc.param)
		}
	}
	for _, limit := range []int{1, 100} {
		if code, body := getBalance(t, b, url.Values{"limit": {strconv.Itoa(limit)}}); code != http.StatusOK || len(body.Data) != 1 {
			t.Errorf("limit %d: %d %+v", limit, code, body)
		}
	}
}
