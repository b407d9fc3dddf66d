package paypaltest_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

// paypalDate is t in Transaction Search's own date form.
func paypalDate(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05-0700") }

// captured creates an order of value EUR with card vaultID, which the single-step create
// captures; it returns the capture.
func (b *bundle) captured(t *testing.T, key, value, vaultID string) map[string]any {
	t.Helper()
	s, o := b.call(t, "POST", "/v2/checkout/orders", key+"-create", orderBody(key, value, vaultID))
	if s != 201 || o["status"] != "COMPLETED" {
		t.Fatalf("create %s: %d %v", key, s, o)
	}
	return captureOf(t, o)
}

// refund refunds value EUR of the capture under the request id and custom_id key; it fails t
// unless PayPal created the refund.
func (b *bundle) refund(t *testing.T, captureID, key, value string) map[string]any {
	t.Helper()
	s, re := b.askRefund(t, captureID, key, value)
	if s != 201 {
		t.Fatalf("refund %s: %d %v", key, s, re)
	}
	return re
}

// askRefund asks for a refund of value EUR of the capture under the request id and custom_id
// key, and returns PayPal's answer.
func (b *bundle) askRefund(t *testing.T, captureID, key, value string) (int, map[string]any) {
	t.Helper()
	return b.call(t, "POST", "/v2/payments/captures/"+captureID+"/refund", key,
		`{"amount":{"currency_code":"EUR","value":"`+value+`"},"custom_id":"`+key+`"}`)
}

// search runs GET /v1/reporting/transactions with params (name, value pairs).
func (b *bundle) search(t *testing.T, params ...string) (int, map[string]any) {
	t.Helper()
	q := url.Values{}
	for i := 0; i+1 < len(params); i += 2 {
		q.Set(params[i], params[i+1])
	}
	return b.call(t, "GET", "/v1/reporting/transactions?"+q.Encode(), "", "")
}

// searchOK searches [from, to] (RFC 3339) with more params and returns the answer and its
// transaction_info objects.
func (b *bundle) searchOK(t *testing.T, from, to time.Time, params ...string) (map[string]any, []map[string]any) {
	t.Helper()
	s, body := b.search(t, append([]string{"start_date", from.Format(time.RFC3339), "end_date", to.Format(time.RFC3339),
		"fields", "transaction_info"}, params...)...)
	if s != 200 {
		t.Fatalf("search [%s, %s] %v: %d %v", from, to, params, s, body)
	}
	var infos []map[string]any
	for _, d := range body["transaction_details"].([]any) {
		infos = append(infos, d.(map[string]any)["transaction_info"].(map[string]any))
	}
	return body, infos
}

// ids lists the transaction ids of infos.
func ids(infos []map[string]any) string {
	var out []string
	for _, in := range infos {
		out = append(out, in["transaction_id"].(string))
	}
	return strings.Join(out, ",")
}

func amount(info map[string]any) string {
	a := info["transaction_amount"].(map[string]any)
	return a["value"].(string) + " " + a["currency_code"].(string)
}

// A completed capture is a T0006 transaction of its amount, a completed refund a T1107 of minus
// its amount, both S, stamped with the fake's clock; declined captures, orders never captured
// and replays record nothing; a refund that fails later turns V.
func TestSearchRecordsCapturesAndRefunds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cp := b.captured(t, "paid", "20.00", paypaltest.PaymentMethodVisa)
	if s, _ := b.call(t, "POST", "/v2/checkout/orders", "paid-create", orderBody("paid", "20.00", paypaltest.PaymentMethodVisa)); s != 200 {
		t.Fatalf("create replay: %d", s)
	}
	b.captured(t, "declined", "30.00", paypaltest.PaymentMethodDeclined)
	if s, o := b.call(t, "POST", "/v2/checkout/orders", "3ds-create", orderBody("3ds", "40.00", paypaltest.PaymentMethodAuthenticationRequired)); s != 201 {
		t.Fatalf("3ds order: %d %v", s, o)
	}
	b.clock.Advance(90 * time.Second)
	re := b.refund(t, cp["id"].(string), "paid-refund", "4.50")
	if s, _ := b.call(t, "POST", "/v2/payments/captures/"+cp["id"].(string)+"/refund", "paid-refund", `{}`); s != 200 {
		t.Fatalf("refund replay: %d", s)
	}

	body, infos := b.searchOK(t, t0.Add(-time.Hour), t0.Add(time.Hour))
	if len(infos) != 2 || body["total_items"] != 2.0 || body["total_pages"] != 1.0 || body["page"] != 1.0 {
		t.Fatalf("want 2 transactions on 1 page: %v", body)
	}
	pay, ref := infos[0], infos[1]
	if pay["transaction_id"] != cp["id"] || pay["transaction_event_code"] != paypaltest.EventCodeCheckoutPayment ||
		pay["transaction_status"] != "S" || amount(pay) != "20.00 EUR" || pay["custom_field"] != "paid" ||
		pay["transaction_initiation_date"] != paypalDate(t0) {
		t.Fatalf("capture transaction %v", pay)
	}
	if ref["transaction_id"] != re["id"] || ref["transaction_event_code"] != paypaltest.EventCodePaymentRefund ||
		ref["transaction_status"] != "S" || amount(ref) != "-4.50 EUR" || ref["paypal_reference_id"] != cp["id"] ||
		ref["custom_field"] != "paid-refund" || ref["transaction_initiation_date"] != "2025-03-01T12:01:30+0000" {
		t.Fatalf("refund transaction %v", ref)
	}
	if body["start_date"] != paypalDate(t0.Add(-time.Hour)) || body["end_date"] != paypalDate(t0.Add(time.Hour)) ||
		body["last_refreshed_datetime"] != paypalDate(b.clock.Now()) {
		t.Fatalf("answer dates %v", body)
	}

	b.clock.Advance(time.Minute)
	if err := b.srv.FailRefund(re["id"].(string)); err != nil {
		t.Fatal(err)
	}
	_, infos = b.searchOK(t, t0, t0.Add(time.Hour))
	if len(infos) != 2 || infos[1]["transaction_status"] != paypaltest.TransactionReversed ||
		infos[1]["transaction_updated_date"] != "2025-03-01T12:02:30+0000" || infos[0]["transaction_status"] != "S" {
		t.Fatalf("after FailRefund: %v", infos)
	}
}

// The range holds the transactions initiated in [start_date, end_date], both inclusive to the
// second, oldest first; offsets other than Z are understood.
func TestSearchRange(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var want []string
	for i := range 3 {
		want = append(want, b.captured(t, fmt.Sprint("k", i), "1.00", paypaltest.PaymentMethodVisa)["id"].(string))
		b.clock.Advance(time.Hour)
	}
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }
	for _, tc := range []struct {
		from, to time.Time
		want     string
	}{
		{h(0), h(2), strings.Join(want, ",")},
		{h(0), h(1), want[0] + "," + want[1]},
		{h(0), h(1).Add(-time.Second), want[0]},
		{h(0).Add(time.Second), h(2).Add(-time.Second), want[1]},
		{h(1), h(1), want[1]},
		{h(1).Add(time.Second), h(2).Add(-time.Second), ""},
		{h(2).Add(time.Second), h(3), ""},
		{h(0).In(time.FixedZone("CET", 3600)), h(0).In(time.FixedZone("X", -7200)), want[0]},
	} {
		if _, infos := b.searchOK(t, tc.from, tc.to); ids(infos) != tc.want {
			t.Fatalf("[%s, %s]: %q, want %q", tc.from.Format(time.RFC3339), tc.to.Format(time.RFC3339), ids(infos), tc.want)
		}
	}
	// Fractions of seconds are dropped: [h(0)+0.5s, h(0)+0.5s] is the second h(0).
	half := t0.Add(500 * time.Millisecond).Format(time.RFC3339Nano)
	if s, body := b.search(t, "start_date", half, "end_date", half); s != 200 || len(body["transaction_details"].([]any)) != 1 {
		t.Fatalf("a fractional second: %d %v", s, body)
	}
}

// page and page_size page the list; past the last page the list is empty.
func TestSearchPaging(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var all []string
	for i := range 5 {
		all = append(all, b.captured(t, fmt.Sprint("k", i), "1.00", paypaltest.PaymentMethodVisa)["id"].(string))
		b.clock.Advance(time.Second)
	}
	var got []string
	for page, n := range []int{2, 2, 1, 0} {
		body, infos := b.searchOK(t, t0, t0.Add(time.Hour), "page_size", "2", "page", fmt.Sprint(page+1))
		if len(infos) != n || body["total_items"] != 5.0 || body["total_pages"] != 3.0 || body["page"] != float64(page+1) {
			t.Fatalf("page %d: %d transactions, %v", page+1, len(infos), body)
		}
		if n > 0 {
			got = append(got, ids(infos))
		}
	}
	if strings.Join(got, ",") != strings.Join(all, ",") {
		t.Fatalf("pages %v, want %v", got, all)
	}
	if _, infos := b.searchOK(t, t0, t0.Add(time.Hour)); ids(infos) != strings.Join(all, ",") {
		t.Fatalf("default page: %s", ids(infos))
	}
	if _, infos := b.searchOK(t, t0, t0.Add(time.Hour), "page_size", "500"); len(infos) != 5 {
		t.Fatalf("page_size 500: %d", len(infos))
	}
	if body, infos := b.searchOK(t, t0.Add(time.Hour), t0.Add(2*time.Hour)); len(infos) != 0 || body["total_pages"] != 0.0 {
		t.Fatalf("nothing: %v", body)
	}
}

// Missing, malformed and out-of-range parameters are 400 INVALID_REQUEST naming the parameter.
func TestSearchBadParameters(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	day := t0.Format(time.RFC3339)
	later := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339) }
	for _, tc := range []struct {
		params       []string
		field, issue string
	}{
		{[]string{"end_date", day}, "start_date", "MISSING_REQUIRED_PARAMETER"},
		{[]string{"start_date", day}, "end_date", "MISSING_REQUIRED_PARAMETER"},
		{[]string{"start_date", "2025-03-01", "end_date", day}, "start_date", "INVALID_PARAMETER_SYNTAX"},
		{[]string{"start_date", day, "end_date", "yesterday"}, "end_date", "INVALID_PARAMETER_SYNTAX"},
		{[]string{"start_date", day, "end_date", later(-time.Second)}, "end_date", "INVALID_DATE_RANGE"},
		{[]string{"start_date", day, "end_date", later(31*24*time.Hour + time.Second)}, "end_date", "INVALID_DATE_RANGE"},
		{[]string{"start_date", day, "end_date", later(40 * 24 * time.Hour)}, "end_date", "INVALID_DATE_RANGE"},
		{[]string{"start_date", day, "end_date", day, "page", "0"}, "page", "INVALID_PARAMETER_VALUE"},
		{[]string{"start_date", day, "end_date", day, "page", "x"}, "page", "INVALID_PARAMETER_VALUE"},
		{[]string{"start_date", day, "end_date", day, "page_size", "0"}, "page_size", "INVALID_PARAMETER_VALUE"},
		{[]string{"start_date", day, "end_date", day, "page_size", "501"}, "page_size", "INVALID_PARAMETER_VALUE"},
	} {
		s, body := b.search(t, tc.params...)
		d, _ := body["details"].([]any)
		if s != 400 || body["name"] != "INVALID_REQUEST" || len(d) != 1 {
			t.Fatalf("%v: %d %v", tc.params, s, body)
		}
		if det := d[0].(map[string]any); det["field"] != tc.field || det["issue"] != tc.issue || det["location"] != "query" || det["description"] == "" {
			t.Fatalf("%v: details %v, want %s on %s", tc.params, det, tc.issue, tc.field)
		}
	}
	// Exactly 31 days is accepted.
	b.searchOK(t, t0, t0.Add(paypaltest.MaxSearchRange))
	// Without a token: 401, like every API call.
	req := mustReq(t, "GET", b.srv.URL()+"/v1/reporting/transactions?start_date="+url.QueryEscape(day)+"&end_date="+url.QueryEscape(day))
	if s, body := b.send(t, req); s != 401 || body["name"] != "AUTHENTICATION_FAILURE" {
		t.Fatalf("no token: %d %v", s, body)
	}
}

// With Config.SearchLag, a transaction is searchable once it is SearchLag old, and
// last_refreshed_datetime says up to when the answer is complete.
func TestSearchLag(t *testing.T) {
	t.Parallel()
	b := setup(t, &paypaltest.Config{SearchLag: 3 * time.Hour})
	id := b.captured(t, "k", "5.00", paypaltest.PaymentMethodVisa)["id"].(string)
	for _, tc := range []struct {
		advance time.Duration
		want    string
	}{{0, ""}, {3*time.Hour - time.Second, ""}, {time.Second, id}} {
		b.clock.Advance(tc.advance)
		body, infos := b.searchOK(t, t0.Add(-time.Hour), t0.Add(24*time.Hour))
		if ids(infos) != tc.want || body["last_refreshed_datetime"] != paypalDate(b.clock.Now().Add(-3*time.Hour)) {
			t.Fatalf("at %s: %q, want %q; %v", b.clock.Now(), ids(infos), tc.want, body)
		}
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Config.SearchLag") {
			t.Fatalf("negative SearchLag: panic %v", r)
		}
	}()
	paypaltest.NewUnstartedServer(&paypaltest.Config{SearchLag: -time.Second})
}

// An order captured by its single-step create is a T0006 transaction like any capture, with the
// purchase unit's custom_id as custom_field and its invoice_id: what a lookup by reference past
// the request id window searches for. An order captured by an explicit capture carries them too.
func TestSearchCarriesReferencesOfSingleStepCaptures(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	body := `{"intent":"CAPTURE","purchase_units":[{"custom_id":"ref-1","invoice_id":"inv-1","amount":{"currency_code":"HUF","value":"100"}}],` +
		`"payment_source":{"card":{"vault_id":"` + paypaltest.PaymentMethodVisa + `"}}}`
	s, o := b.call(t, "POST", "/v2/checkout/orders", "ref-1", body)
	if s != 201 || o["status"] != "COMPLETED" {
		t.Fatalf("%d %v", s, o)
	}
	_, o2 := b.call(t, "POST", "/v2/checkout/orders", "", `{"intent":"CAPTURE","purchase_units":[{"custom_id":"ref-2","invoice_id":"inv-2","amount":{"currency_code":"EUR","value":"2.00"}}]}`)
	if err := b.srv.ApproveOrder(o2["id"].(string)); err != nil {
		t.Fatal(err)
	}
	if s, c := b.call(t, "POST", "/v2/checkout/orders/"+o2["id"].(string)+"/capture", "ref-2-capture", "{}"); s != 201 {
		t.Fatalf("%d %v", s, c)
	}
	_, infos := b.searchOK(t, t0, t0.Add(time.Minute))
	if len(infos) != 2 {
		t.Fatalf("%v", infos)
	}
	for i, want := range []struct{ id, custom, invoice, amount string }{
		{captureOf(t, o)["id"].(string), "ref-1", "inv-1", "100 HUF"},
		{"", "ref-2", "inv-2", "2.00 EUR"},
	} {
		in := infos[i]
		if (want.id != "" && in["transaction_id"] != want.id) || in["custom_field"] != want.custom || in["invoice_id"] != want.invoice ||
			amount(in) != want.amount || in["transaction_event_code"] != paypaltest.EventCodeCheckoutPayment {
			t.Fatalf("transaction %d: %v, want %+v", i, in, want)
		}
	}
}
