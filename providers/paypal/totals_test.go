package paypal_test

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/testkit"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

const searchEndpoint = "GET /v1/reporting/transactions"

func usd(s string) money.Money { return money.MustParse(s, money.USD) }

// chargeOf captures amount with the test Visa under key.
func chargeOf(t *testing.T, p *paypal.Provider, key string, amount money.Money) provider.ChargeResult {
	t.Helper()
	req := chargeReq(key, paypaltest.PaymentMethodVisa)
	req.Amount = amount
	ch := must(p.Charge(ctxT(t), req))(t)
	if ch.Status != provider.ChargeSucceeded {
		t.Fatalf("charge %s: %+v", key, ch)
	}
	return ch
}

func totalsOf(t *testing.T, p *paypal.Provider, from, to time.Time) map[money.Currency]provider.Totals {
	t.Helper()
	return must(p.Totals(ctxT(t), from, to))(t)
}

// Two EUR captures and a USD one, a partial refund and a refund that failed later: Charged is
// what was captured, Refunded what stayed refunded, per currency; the declined charge and the one
// waiting for 3-D Secure moved nothing. The fake's ground truth agrees, and one search request
// read it all.
func TestTotals(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p, rc := countedProvider(t, b)
	ch1 := chargeOf(t, p, "order-1", eur("20.00"))
	ch2 := chargeOf(t, p, "order-2", eur("20.00"))
	chargeOf(t, p, "order-3", usd("15.00"))
	if _, err := p.Charge(ctxT(t), chargeReq("order-4", paypaltest.PaymentMethodDeclined)); !errors.Is(err, provider.ErrDeclined) {
		t.Fatalf("declined card: %v", err)
	}
	if ch := must(p.Charge(ctxT(t), chargeReq("order-5", paypaltest.PaymentMethodAuthenticationRequired)))(t); ch.Status != provider.ChargeRequiresAction {
		t.Fatalf("3-D Secure card: %+v", ch)
	}
	must(p.Refund(ctxT(t), refundReq("order-1-refund", ch1.ProviderID, eur("5.00"))))(t)
	failed := must(p.Refund(ctxT(t), refundReq("order-2-refund", ch2.ProviderID, eur("7.50"))))(t)
	b.clock.Advance(time.Minute)
	if err := b.srv.FailRefund(failed.ProviderID); err != nil {
		t.Fatal(err)
	}
	rc.take()

	got := totalsOf(t, p, t0.Add(-time.Hour), t0.Add(time.Hour))
	testkit.WantTotals(t, got, map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("40.00"), Refunded: eur("5.00")},
		money.USD: {Charged: usd("15.00"), Refunded: usd("0")},
	})
	if n := rc.take(); !maps.Equal(n, map[string]int{searchEndpoint: 1}) {
		t.Fatalf("requests %v, want one search", n)
	}
	truth := b.srv.Totals()
	if len(truth) != len(got) {
		t.Fatalf("the fake holds %v, Totals %v", truth, got)
	}
	for cur, tot := range truth {
		g := got[money.Currency(cur)]
		if g.Charged.Minor() != tot.Captured || g.Refunded.Minor() != tot.Refunded {
			t.Fatalf("%s: Totals %+v, the fake holds %+v", cur, g, tot)
		}
	}
}

// The window is [from, to) on the transactions' initiation dates: moving the fake's clock puts
// captures and refunds in separate windows, adjacent windows add up to the whole, and a
// transaction initiated exactly at to is left to the next window although PayPal's end_date
// (the fake's) includes it.
func TestTotalsWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	chargeOf(t, b.p, "early", eur("20.00")) // t0
	b.clock.Advance(time.Hour)
	mid := chargeOf(t, b.p, "mid", eur("10.00")) // t0+1h
	b.clock.Advance(30 * time.Minute)
	must(b.p.Refund(ctxT(t), refundReq("mid-refund", mid.ProviderID, eur("4.00"))))(t) // t0+1h30
	b.clock.Advance(30 * time.Minute)
	chargeOf(t, b.p, "late", usd("1.00")) // t0+2h
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }

	testkit.WantTotals(t, totalsOf(t, b.p, h(0), h(1)), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("20.00"), Refunded: eur("0")},
	})
	testkit.WantTotals(t, totalsOf(t, b.p, h(1), h(2)), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("10.00"), Refunded: eur("4.00")},
	})
	testkit.WantTotals(t, totalsOf(t, b.p, h(1).Add(time.Minute), h(2)), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("0"), Refunded: eur("4.00")},
	})
	testkit.WantTotals(t, totalsOf(t, b.p, h(2), h(3)), map[money.Currency]provider.Totals{
		money.USD: {Charged: usd("1.00"), Refunded: usd("0")},
	})
	testkit.WantTotals(t, totalsOf(t, b.p, h(0), h(3)), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("30.00"), Refunded: eur("4.00")},
		money.USD: {Charged: usd("1.00"), Refunded: usd("0")},
	})
	// Bounds to the second: from is in, to is out, fractions of seconds dropped.
	testkit.WantTotals(t, totalsOf(t, b.p, h(1).Add(time.Second), h(2)), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("0"), Refunded: eur("4.00")},
	})
	testkit.WantTotals(t, totalsOf(t, b.p, h(2).Add(-time.Minute), h(2).Add(999*time.Millisecond)), map[money.Currency]provider.Totals{})
	testkit.WantTotals(t, totalsOf(t, b.p, h(2).Add(-time.Second), h(2).Add(time.Second+time.Millisecond)), map[money.Currency]provider.Totals{
		money.USD: {Charged: usd("1.00"), Refunded: usd("0")},
	})
	testkit.WantTotals(t, totalsOf(t, b.p, h(3), h(4)), map[money.Currency]provider.Totals{})
}

// Every page is read: 7 captures and 3 refunds on pages of 2 are 5 requests; at the default
// page size of 500 they are one.
func TestTotalsPages(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p, rc := countedProvider(t, b)
	for i := range 7 {
		ch := chargeOf(t, p, fmt.Sprint("order-", i), eur("1.00"))
		if i%3 == 0 {
			must(p.Refund(ctxT(t), refundReq(fmt.Sprint("refund-", i), ch.ProviderID, eur("0.25"))))(t)
		}
		b.clock.Advance(time.Second)
	}
	want := map[money.Currency]provider.Totals{money.EUR: {Charged: eur("7.00"), Refunded: eur("0.75")}}
	rc.take()
	testkit.WantTotals(t, totalsOf(t, p, t0, t0.Add(time.Hour)), want)
	if n := rc.take(); !maps.Equal(n, map[string]int{searchEndpoint: 1}) {
		t.Fatalf("requests %v, want one search", n)
	}
	paypal.SetSearchPageSize(p, 2)
	testkit.WantTotals(t, totalsOf(t, p, t0, t0.Add(time.Hour)), want)
	if n := rc.take(); !maps.Equal(n, map[string]int{searchEndpoint: 5}) {
		t.Fatalf("requests %v, want 5 pages of 2", n)
	}
}

// A window longer than 31 days is read 31 days at a time; a capture exactly on a chunk's bound
// counts once, in the later chunk.
func TestTotalsLongWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p, rc := countedProvider(t, b)
	day := 24 * time.Hour
	chargeOf(t, p, "day-0", eur("1.00"))
	b.clock.Advance(31 * day) // exactly the first chunk's end
	chargeOf(t, p, "day-31", eur("2.00"))
	b.clock.Advance(34 * day)
	ch := chargeOf(t, p, "day-65", usd("4.00"))
	must(p.Refund(ctxT(t), refundReq("day-65-refund", ch.ProviderID, usd("4.00"))))(t)
	rc.take()

	testkit.WantTotals(t, totalsOf(t, p, t0, t0.Add(70*day)), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("3.00"), Refunded: eur("0")},
		money.USD: {Charged: usd("4.00"), Refunded: usd("4.00")},
	})
	if n := rc.take(); !maps.Equal(n, map[string]int{searchEndpoint: 3}) {
		t.Fatalf("requests %v, want 3 (31 + 31 + 8 days)", n)
	}
	testkit.WantTotals(t, totalsOf(t, p, t0, t0.Add(31*day)), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("1.00"), Refunded: eur("0")},
	})
	if n := rc.take(); !maps.Equal(n, map[string]int{searchEndpoint: 1}) {
		t.Fatalf("requests %v, want 1 for exactly 31 days", n)
	}
}

// Transaction Search lags: with the fake's 3-hour lag, a window ending now misses the captures of
// the last 3 hours, silently; once they are 3 hours old the same window has them.
func TestTotalsLag(t *testing.T) {
	t.Parallel()
	b := setup(t, &paypaltest.Config{SearchLag: paypal.SearchLag})
	chargeOf(t, b.p, "old", eur("5.00")) // t0
	b.clock.Advance(2 * time.Hour)
	chargeOf(t, b.p, "recent", eur("7.00")) // t0+2h
	b.clock.Advance(time.Hour)              // now t0+3h: "old" is indexed, "recent" not yet
	from, to := t0.Add(-time.Hour), b.clock.Now()
	testkit.WantTotals(t, totalsOf(t, b.p, from, to), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("5.00"), Refunded: eur("0")},
	})
	b.clock.Advance(2 * time.Hour) // t0+5h: "recent" is 3 hours old
	testkit.WantTotals(t, totalsOf(t, b.p, from, to), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("12.00"), Refunded: eur("0")},
	})
}

// A bad window is refused before sending, naming the bound; a window within one second is empty
// without a request.
func TestTotalsBadWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p, rc := countedProvider(t, b)
	testkit.RefusesBadWindows(t, t0, func(from, to time.Time) error {
		_, err := p.Totals(ctxT(t), from, to)
		return err
	})
	testkit.WantTotals(t, totalsOf(t, p, t0.Add(100*time.Millisecond), t0.Add(900*time.Millisecond)), map[money.Currency]provider.Totals{})
	if n := rc.take(); len(n) != 0 {
		t.Fatalf("requests sent: %v", n)
	}
}

// A failure on a later page is classified like any read's, and the next call reads it all.
func TestTotalsPageFailure(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for i := range 3 {
		chargeOf(t, b.p, fmt.Sprint("order-", i), eur("1.00"))
	}
	paypal.SetSearchPageSize(b.p, 2)
	b.srv.Inject(paypaltest.Fault{Kind: paypaltest.Latency, Delay: time.Millisecond, Path: "/v1/reporting/transactions"})
	b.srv.Inject(paypaltest.Fault{Kind: paypaltest.FailBefore, Path: "/v1/reporting/transactions"})
	_, err := b.p.Totals(ctxT(t), t0, t0.Add(time.Hour))
	if u := errAs[*provider.UnknownOutcomeError](t, err); u.Status != http.StatusInternalServerError || !idempotency.SafeToRetry(err) {
		t.Fatalf("a 500 on page 2: %+v", u)
	}
	testkit.WantTotals(t, totalsOf(t, b.p, t0, t0.Add(time.Hour)), map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("3.00"), Refunded: eur("0")},
	})
}

// searchStub serves a token and canned Transaction Search pages (page n is pages[n-1]), and
// records the queries.
type searchStub struct {
	pages []string

	mu      sync.Mutex
	queries []string
}

func (s *searchStub) start(t *testing.T) *paypal.Provider {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/oauth2/token" {
			fmt.Fprint(w, `{"access_token":"tok","token_type":"Bearer","expires_in":32400}`)
			return
		}
		s.mu.Lock()
		s.queries = append(s.queries, r.URL.RawQuery)
		s.mu.Unlock()
		var page int
		fmt.Sscan(r.URL.Query().Get("page"), &page)
		if r.URL.Path != "/v1/reporting/transactions" || page < 1 || page > len(s.pages) {
			http.Error(w, `{"name":"INVALID_REQUEST"}`, http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, `{"transaction_details":[%s],"page":%d,"total_pages":%d}`, s.pages[page-1], page, len(s.pages))
	}))
	t.Cleanup(ts.Close)
	return stubProvider(t, ts.URL)
}

func tx(id, code, status, date, value, currency string) string {
	return fmt.Sprintf(`{"transaction_info":{"transaction_id":%q,"transaction_event_code":%q,"transaction_status":%q,`+
		`"transaction_initiation_date":%q,"transaction_amount":{"currency_code":%q,"value":%q}}}`, id, code, status, date, currency, value)
}

// Answers the fake does not produce: only S transactions count, T00nn payments received (not
// sent), T1107 refunds, nothing else; a transaction repeated on the next page counts once; RFC
// 3339 dates are read too. The query carries the RFC 3339 window and the page.
func TestTotalsReadsOnlySuccessfulPaymentsAndRefunds(t *testing.T) {
	t.Parallel()
	const at = "2025-03-01T12:30:00+0000"
	stub := &searchStub{pages: []string{
		strings.Join([]string{
			tx("A", "T0006", "S", at, "10.00", "EUR"),
			tx("B", "T0005", "S", "2025-03-01T12:31:00Z", "2.50", "EUR"),
			tx("C", "T0006", "P", at, "100.00", "EUR"),
			tx("D", "T0006", "D", at, "100.00", "EUR"),
			tx("E", "T0006", "V", at, "100.00", "EUR"),
			tx("F", "T0001", "S", at, "-50.00", "EUR"), // a mass payment the account sent
			tx("G", "T1107", "S", at, "-3.00", "EUR"),
		}, ","),
		strings.Join([]string{
			tx("G", "T1107", "S", at, "-3.00", "EUR"), // shifted onto the next page
			tx("H", "T1107", "V", at, "-9.00", "EUR"),
			tx("I", "T1106", "S", at, "-20.00", "EUR"), // a payment reversal
			tx("J", "T0400", "S", at, "-30.00", "EUR"), // a withdrawal
			tx("K", "T0006", "S", at, "1000", "JPY"),
			tx("L", "T0006", "S", "2025-03-01T13:00:00+0000", "70.00", "EUR"), // at end_date: the next window's
		}, ","),
	}}
	p := stub.start(t)
	got := totalsOf(t, p, t0, t0.Add(time.Hour))
	testkit.WantTotals(t, got, map[money.Currency]provider.Totals{
		money.EUR: {Charged: eur("12.50"), Refunded: eur("3.00")},
		money.JPY: {Charged: money.MustParse("1000", money.JPY), Refunded: money.MustParse("0", money.JPY)},
	})
	want := []string{
		"end_date=2025-03-01T13%3A00%3A00Z&fields=transaction_info&page=1&page_size=500&start_date=2025-03-01T12%3A00%3A00Z",
		"end_date=2025-03-01T13%3A00%3A00Z&fields=transaction_info&page=2&page_size=500&start_date=2025-03-01T12%3A00%3A00Z",
	}
	if strings.Join(stub.queries, "\n") != strings.Join(want, "\n") {
		t.Fatalf("queries\n%s\nwant\n%s", strings.Join(stub.queries, "\n"), strings.Join(want, "\n"))
	}
}

// A counted transaction that cannot be read makes the totals unknown rather than short; one that
// would not count anyway does not matter.
func TestTotalsUnreadableTransaction(t *testing.T) {
	t.Parallel()
	const at = "2025-03-01T12:30:00+0000"
	for name, bad := range map[string]string{
		"unknown currency": tx("A", "T0006", "S", at, "10.00", "XXZ"),
		"bad amount":       tx("A", "T1107", "S", at, "-1,00", "EUR"),
		"too precise":      tx("A", "T0006", "S", at, "10.001", "EUR"),
		"bad date":         tx("A", "T0006", "S", "01/03/2025 12:30", "10.00", "EUR"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := (&searchStub{pages: []string{tx("0", "T0006", "S", at, "1.00", "EUR") + "," + bad}}).start(t)
			_, err := p.Totals(ctxT(t), t0, t0.Add(time.Hour))
			if u := errAs[*provider.UnknownOutcomeError](t, err); !strings.Contains(u.Error(), "transaction A") {
				t.Fatalf("%v", u)
			}
		})
	}
	p := (&searchStub{pages: []string{tx("A", "T0006", "D", at, "1", "XXZ") + "," + tx("B", "T9999", "S", "?", "?", "?")}}).start(t)
	testkit.WantTotals(t, totalsOf(t, p, t0, t0.Add(time.Hour)), map[money.Currency]provider.Totals{})
}

// The Client's SearchTransactions: one page as PayPal answers it; PayPal's 400 for a range over
// 31 days names end_date; bad requests are refused before sending, naming the field.
func TestSearchTransactions(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ch := chargeOf(t, b.p, "order-1", eur("20.00"))
	must(b.p.Refund(ctxT(t), refundReq("order-1-refund", ch.ProviderID, eur("5.00"))))(t)
	c := b.p.Client()
	page := must(c.SearchTransactions(ctxT(t), paypal.TransactionSearchRequest{StartDate: t0, EndDate: t0.Add(time.Hour), Page: 2, PageSize: 1}))(t)
	if page.Page != 2 || page.TotalPages != 2 || page.TotalItems != 2 || len(page.TransactionDetails) != 1 {
		t.Fatalf("%+v", page)
	}
	info := page.TransactionDetails[0].TransactionInfo
	refreshed := must(paypal.ParseSearchTime(page.LastRefreshedDatetime))(t)
	at := must(paypal.ParseSearchTime(info.InitiationDate))(t)
	if info.EventCode != paypal.EventCodePaymentRefund || info.Status != paypal.TransactionSuccess ||
		info.Amount != (paypal.Amount{CurrencyCode: "EUR", Value: "-5.00"}) || info.PayPalReferenceID == "" ||
		!at.Equal(t0) || !refreshed.Equal(t0) {
		t.Fatalf("%+v, refreshed %s", info, page.LastRefreshedDatetime)
	}

	_, err := c.SearchTransactions(ctxT(t), paypal.TransactionSearchRequest{StartDate: t0, EndDate: t0.Add(paypal.MaxSearchRange + time.Second)})
	apiErr := errAs[*paypal.APIError](t, err)
	if apiErr.Status != http.StatusBadRequest || !apiErr.HasIssue("INVALID_DATE_RANGE") {
		t.Fatalf("%v", apiErr)
	}
	if inv := errAs[*provider.InvalidRequestError](t, b.p.Classify(err)); inv.Param != "end_date" {
		t.Fatalf("%+v", inv)
	}

	for param, req := range map[string]paypal.TransactionSearchRequest{
		"StartDate": {EndDate: t0},
		"EndDate":   {StartDate: t0.Add(time.Second), EndDate: t0},
		"Page":      {StartDate: t0, EndDate: t0, Page: -1},
		"PageSize":  {StartDate: t0, EndDate: t0, PageSize: paypal.MaxSearchPageSize + 1},
	} {
		_, err := c.SearchTransactions(ctxT(t), req)
		if inv := errAs[*provider.InvalidRequestError](t, err); inv.Param != param {
			t.Fatalf("%s: %+v", param, inv)
		}
	}
}
