package paypaltest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/providers/internal/testkit"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

type bundle struct {
	srv    *paypaltest.Server
	clock  *paypaltest.ManualClock
	client *http.Client
	token  string
}

func setup(t *testing.T, cfg *paypaltest.Config) *bundle {
	t.Helper()
	if cfg == nil {
		cfg = &paypaltest.Config{}
	}
	clock := paypaltest.NewManualClock(t0)
	if cfg.Clock == nil {
		cfg.Clock = clock.Now
	}
	srv := paypaltest.NewServer(cfg)
	t.Cleanup(srv.Close)
	b := &bundle{srv: srv, clock: clock, client: &http.Client{Timeout: testkit.Patience, Transport: &http.Transport{DisableKeepAlives: true}}}
	b.token = b.newToken(t)
	return b
}

func (b *bundle) newToken(t *testing.T) string {
	t.Helper()
	status, body := b.tokenRequest(t, paypaltest.DefaultClientID, paypaltest.DefaultSecret, "grant_type=client_credentials")
	if status != 200 || body["token_type"] != "Bearer" || body["access_token"] == "" {
		t.Fatalf("token: %d %v", status, body)
	}
	return body["access_token"].(string)
}

func (b *bundle) tokenRequest(t *testing.T, id, secret, form string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", b.srv.URL()+"/v1/oauth2/token", strings.NewReader(form))
	req.SetBasicAuth(id, secret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.send(t, req)
}

func (b *bundle) send(t *testing.T, req *http.Request) (int, map[string]any) {
	t.Helper()
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

// call sends an authenticated JSON request.
func (b *bundle) call(t *testing.T, method, path, requestID, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, b.srv.URL()+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+b.token)
	req.Header.Set("Content-Type", "application/json")
	if requestID != "" {
		req.Header.Set("PayPal-Request-Id", requestID)
	}
	return b.send(t, req)
}

func orderBody(customID, value, vaultID string) string {
	ps := ""
	if vaultID != "" {
		ps = `,"payment_source":{"card":{"vault_id":"` + vaultID + `"}}`
	}
	return `{"intent":"CAPTURE","purchase_units":[{"custom_id":"` + customID + `","amount":{"currency_code":"EUR","value":"` + value + `"}}]` + ps + `}`
}

func issue(body map[string]any) string {
	d, _ := body["details"].([]any)
	if len(d) == 0 {
		return ""
	}
	return d[0].(map[string]any)["issue"].(string)
}

func captureOf(t *testing.T, order map[string]any) map[string]any {
	t.Helper()
	pu := order["purchase_units"].([]any)[0].(map[string]any)
	caps := pu["payments"].(map[string]any)["captures"].([]any)
	return caps[len(caps)-1].(map[string]any)
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	b := setup(t, &paypaltest.Config{TokenLifetime: time.Hour})
	if s, body := b.tokenRequest(t, paypaltest.DefaultClientID, "wrong", "grant_type=client_credentials"); s != 401 || body["error"] != "invalid_client" {
		t.Fatalf("%d %v", s, body)
	}
	if s, body := b.tokenRequest(t, paypaltest.DefaultClientID, paypaltest.DefaultSecret, "grant_type=password"); s != 400 || body["error"] != "unsupported_grant_type" {
		t.Fatalf("%d %v", s, body)
	}
	if s, _ := b.call(t, "GET", "/v2/checkout/orders/X", "", ""); s != 404 {
		t.Fatalf("valid token: %d", s)
	}
	b.clock.Advance(time.Hour)
	if s, body := b.call(t, "GET", "/v2/checkout/orders/X", "", ""); s != 401 || body["name"] != "AUTHENTICATION_FAILURE" {
		t.Fatalf("expired token: %d %v", s, body)
	}
	b.token = b.newToken(t)
	b.srv.RevokeTokens()
	if s, _ := b.call(t, "GET", "/v2/checkout/orders/X", "", ""); s != 401 {
		t.Fatalf("revoked token: %d", s)
	}
	if n := b.srv.TokenRequests(); n != 2 {
		t.Fatalf("TokenRequests %d", n)
	}
}

// A create with a payment source is single-step (PayPal authorizes and captures in the create):
// 201 COMPLETED with the capture; a replay of its request id is 200 with the same order; a
// capture of it is 422 ORDER_ALREADY_CAPTURED; after 6 hours the request id is forgotten and the
// same create makes and captures a second order.
func TestSingleStepCreateCaptures(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	s, o := b.call(t, "POST", "/v2/checkout/orders", "rid-create", orderBody("k1", "20.00", paypaltest.PaymentMethodVisa))
	if s != 201 || o["status"] != "COMPLETED" || captureOf(t, o)["status"] != "COMPLETED" || captureOf(t, o)["custom_id"] != "k1" {
		t.Fatalf("%d %v", s, o)
	}
	id := o["id"].(string)
	s, again := b.call(t, "POST", "/v2/checkout/orders", "rid-create", orderBody("k1", "20.00", paypaltest.PaymentMethodVisa))
	if s != 200 || again["id"] != id || again["status"] != "COMPLETED" || captureOf(t, again)["id"] != captureOf(t, o)["id"] {
		t.Fatalf("replay %d %v", s, again)
	}
	if s, c := b.call(t, "POST", "/v2/checkout/orders/"+id+"/capture", "rid-capture", "{}"); s != 422 || issue(c) != "ORDER_ALREADY_CAPTURED" {
		t.Fatalf("capture of an order captured at create: %d %v", s, c)
	}
	// Other parameters under a known request id: the original order, counted as a mismatch.
	if s, again = b.call(t, "POST", "/v2/checkout/orders", "rid-create", orderBody("k1", "99.00", paypaltest.PaymentMethodVisa)); s != 200 || again["id"] != id {
		t.Fatalf("%d %v", s, again)
	}
	if n := b.srv.MismatchedReplays(); n != 1 {
		t.Fatalf("MismatchedReplays %d", n)
	}
	if got := b.srv.CountsByCustomID("k1"); got != (paypaltest.Counts{Orders: 1, Captures: 1}) {
		t.Fatalf("%+v", got)
	}
	if got := b.srv.CountsByRequestID("rid-create"); got != (paypaltest.Counts{Orders: 1, Captures: 1}) {
		t.Fatalf("%+v", got)
	}
	if got := b.srv.Totals()["EUR"]; got != (paypaltest.Total{Captured: 2000, Net: 2000}) {
		t.Fatalf("%+v", got)
	}

	// Just inside 6 hours the request id still replays; at 6 hours it is forgotten: a new
	// request, a second order, charged again.
	b.clock.Advance(6*time.Hour - time.Second)
	b.token = b.newToken(t)
	if s, again = b.call(t, "POST", "/v2/checkout/orders", "rid-create", orderBody("k1", "20.00", paypaltest.PaymentMethodVisa)); s != 200 || again["id"] != id {
		t.Fatalf("create id just before 6h: %d %v", s, again)
	}
	b.clock.Advance(time.Second)
	s, again = b.call(t, "POST", "/v2/checkout/orders", "rid-create", orderBody("k1", "20.00", paypaltest.PaymentMethodVisa))
	if s != 201 || again["id"] == id || again["status"] != "COMPLETED" {
		t.Fatalf("create id after 6h: %d %v", s, again)
	}
	if got := b.srv.CountsByCustomID("k1"); got != (paypaltest.Counts{Orders: 2, Captures: 2}) {
		t.Fatalf("%+v", got)
	}
	if got := b.srv.Totals()["EUR"].Captured; got != 4000 {
		t.Fatalf("captured %d", got)
	}
}

// Without a payment source the order waits for the payer (CREATED); once APPROVED, an explicit
// capture captures it. The capture's request id is an Orders v2 request id: kept 6 hours, not 45
// days.
func TestTwoStepCreateThenCapture(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	s, o := b.call(t, "POST", "/v2/checkout/orders", "", orderBody("k2", "20.00", ""))
	if s != 201 || o["status"] != "CREATED" || o["purchase_units"].([]any)[0].(map[string]any)["payments"] != nil {
		t.Fatalf("%d %v", s, o)
	}
	id := o["id"].(string)
	if s, c := b.call(t, "POST", "/v2/checkout/orders/"+id+"/capture", "rid-cap", "{}"); s != 422 || issue(c) != "ORDER_NOT_APPROVED" {
		t.Fatalf("capture before approval: %d %v", s, c)
	}
	if err := b.srv.ApproveOrder(id); err != nil {
		t.Fatal(err)
	}
	if err := b.srv.ApproveOrder(id); err == nil || !strings.Contains(err.Error(), "APPROVED") {
		t.Fatalf("twice: %v", err)
	}
	if err := b.srv.ApproveOrder("ORDNONE"); err == nil {
		t.Fatal("unknown order approved")
	}
	s, c := b.call(t, "POST", "/v2/checkout/orders/"+id+"/capture", "rid-cap", "{}")
	if s != 201 || c["status"] != "COMPLETED" || captureOf(t, c)["status"] != "COMPLETED" {
		t.Fatalf("capture %d %v", s, c)
	}
	if s, c = b.call(t, "POST", "/v2/checkout/orders/"+id+"/capture", "rid-cap", "{}"); s != 200 || captureOf(t, c)["status"] != "COMPLETED" {
		t.Fatalf("capture replay %d %v", s, c)
	}
	if s, c = b.call(t, "POST", "/v2/checkout/orders/"+id+"/capture", "rid-other", "{}"); s != 422 || issue(c) != "ORDER_ALREADY_CAPTURED" {
		t.Fatalf("second capture %d %v", s, c)
	}
	if got := b.srv.CountsByRequestID("rid-cap"); got != (paypaltest.Counts{Captures: 1}) {
		t.Fatalf("%+v", got)
	}
	// After 6 hours the capture's request id is forgotten too: a new request, which PayPal
	// refuses since the order admits one capture.
	b.clock.Advance(6 * time.Hour)
	b.token = b.newToken(t)
	if s, c = b.call(t, "POST", "/v2/checkout/orders/"+id+"/capture", "rid-cap", "{}"); s != 422 || issue(c) != "ORDER_ALREADY_CAPTURED" {
		t.Fatalf("capture id after 6h: %d %v", s, c)
	}
	if got := b.srv.CountsByCustomID("k2"); got != (paypaltest.Counts{Orders: 1, Captures: 1}) {
		t.Fatalf("%+v", got)
	}
}

// A refund's request id is a Payments v2 one: replayed for 45 days, then forgotten (a second
// refund).
func TestRefundRequestIDRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	capID := b.captured(t, "rr", "10.00", paypaltest.PaymentMethodVisa)["id"].(string)
	refund := func() int {
		s, _ := b.askRefund(t, capID, "rr-1", "1.00")
		return s
	}
	if s := refund(); s != 201 {
		t.Fatal(s)
	}
	b.clock.Advance(45*24*time.Hour - time.Second)
	b.token = b.newToken(t)
	if s := refund(); s != 200 {
		t.Fatalf("refund id before 45 days: %d", s)
	}
	b.clock.Advance(time.Second)
	b.token = b.newToken(t)
	if s := refund(); s != 201 {
		t.Fatalf("refund id after 45 days: %d", s)
	}
	if got := b.srv.CountsByCustomID("rr-1"); got.Refunds != 2 {
		t.Fatalf("%+v", got)
	}
}

func orderBodyIn(customID, currency, value string) string {
	return `{"intent":"CAPTURE","purchase_units":[{"custom_id":"` + customID + `","amount":{"currency_code":"` + currency +
		`","value":"` + value + `"}}],"payment_source":{"card":{"vault_id":"` + paypaltest.PaymentMethodVisa + `"}}}`
}

// The fake checks amounts against PayPal's currency table, not ISO 4217's: HUF, JPY and TWD take
// no decimals at PayPal (ISO gives HUF and TWD two), and it writes amounts the same way.
func TestCurrencies(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tc := range []struct {
		currency, value string
		status          int
		issue, written  string
	}{
		{"HUF", "10", 201, "", "10"},
		{"TWD", "1500", 201, "", "1500"},
		{"JPY", "1500", 201, "", "1500"},
		{"EUR", "10.5", 201, "", "10.50"},
		{"USD", "7", 201, "", "7.00"},
		{"HUF", "10.50", 422, "DECIMALS_NOT_SUPPORTED", ""},
		{"HUF", "10.00", 422, "DECIMALS_NOT_SUPPORTED", ""},
		{"TWD", "3.5", 422, "DECIMALS_NOT_SUPPORTED", ""},
		{"JPY", "1.0", 422, "DECIMALS_NOT_SUPPORTED", ""},
		{"EUR", "10.505", 422, "DECIMAL_PRECISION", ""},
		{"KWD", "1.500", 422, "CURRENCY_NOT_SUPPORTED", ""},
		{"KRW", "1000", 422, "CURRENCY_NOT_SUPPORTED", ""},
		{"RUB", "10.00", 422, "CURRENCY_NOT_SUPPORTED", ""},
		{"eur", "10.00", 400, "INVALID_CURRENCY_CODE", ""},
		{"EURO", "10.00", 400, "INVALID_CURRENCY_CODE", ""},
		{"EUR", "1e3", 400, "INVALID_PARAMETER_SYNTAX", ""},
	} {
		rid := "cur-" + tc.currency + "-" + tc.value
		s, o := b.call(t, "POST", "/v2/checkout/orders", rid, orderBodyIn(rid, tc.currency, tc.value))
		if s != tc.status || issue(o) != tc.issue {
			t.Fatalf("%s %s: %d %v", tc.value, tc.currency, s, o)
		}
		if tc.status != 201 {
			if got := b.srv.CountsByCustomID(rid); got != (paypaltest.Counts{}) {
				t.Fatalf("%s %s refused but %+v exist", tc.value, tc.currency, got)
			}
			continue
		}
		if v := captureOf(t, o)["amount"].(map[string]any)["value"]; v != tc.written {
			t.Fatalf("%s %s captured as %v, want %s", tc.value, tc.currency, v, tc.written)
		}
	}
	// Refunds follow the same table.
	_, o := b.call(t, "POST", "/v2/checkout/orders", "huf", orderBodyIn("huf", "HUF", "100"))
	capID := captureOf(t, o)["id"].(string)
	if s, r := b.call(t, "POST", "/v2/payments/captures/"+capID+"/refund", "huf-r1", `{"amount":{"currency_code":"HUF","value":"0.50"}}`); s != 422 || issue(r) != "DECIMALS_NOT_SUPPORTED" {
		t.Fatalf("%d %v", s, r)
	}
	if s, r := b.call(t, "POST", "/v2/payments/captures/"+capID+"/refund", "huf-r2", `{"amount":{"currency_code":"HUF","value":"40"}}`); s != 201 || r["amount"].(map[string]any)["value"] != "40" {
		t.Fatalf("%d %v", s, r)
	}
	if s, r := b.call(t, "POST", "/v2/payments/captures/"+capID+"/refund", "huf-r3", `{}`); s != 201 || r["amount"].(map[string]any)["value"] != "60" {
		t.Fatalf("refund of the rest: %d %v", s, r)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tc := range []struct {
		name, requestID, body string
		status                int
		issue                 string
	}{
		{"request id required", "", orderBody("v", "1.00", paypaltest.PaymentMethodVisa), 400, "PAYPAL_REQUEST_ID_REQUIRED"},
		{"request id too long", strings.Repeat("r", 109), orderBody("v", "1.00", paypaltest.PaymentMethodVisa), 400, "INVALID_PARAMETER_SYNTAX"},
		{"too precise", "r1", orderBody("v", "1.001", paypaltest.PaymentMethodVisa), 422, "DECIMAL_PRECISION"},
		{"not a number", "r2", orderBody("v", "1,00", paypaltest.PaymentMethodVisa), 400, "INVALID_PARAMETER_SYNTAX"},
		{"zero", "r3", orderBody("v", "0.00", paypaltest.PaymentMethodVisa), 422, "CANNOT_BE_ZERO_OR_NEGATIVE"},
		{"custom_id too long", "r4", orderBody(strings.Repeat("c", 128), "1.00", paypaltest.PaymentMethodVisa), 400, "INVALID_STRING_MAX_LENGTH"},
		{"unknown vault id", "r5", orderBody("v", "1.00", "pm_nope"), 422, "PAYMENT_SOURCE_CANNOT_BE_USED"},
		{"authorize", "r6", `{"intent":"AUTHORIZE","purchase_units":[{"amount":{"currency_code":"EUR","value":"1.00"}}]}`, 400, "INVALID_PARAMETER_VALUE"},
		{"malformed", "r7", `{"intent":`, 400, "MALFORMED_REQUEST_JSON"},
	} {
		s, body := b.call(t, "POST", "/v2/checkout/orders", tc.requestID, tc.body)
		if s != tc.status || issue(body) != tc.issue {
			t.Fatalf("%s: %d %v", tc.name, s, body)
		}
	}
	// Failed validations are not remembered: the same request id executes when fixed.
	if s, body := b.call(t, "POST", "/v2/checkout/orders", "r1", orderBody("v", "1.00", paypaltest.PaymentMethodVisa)); s != 201 {
		t.Fatalf("%d %v", s, body)
	}
	if got := b.srv.CountsByCustomID("v"); got != (paypaltest.Counts{Orders: 1, Captures: 1}) {
		t.Fatalf("%+v", got)
	}
	// Without a payment source, no request id is needed and the order waits for a payer.
	if s, body := b.call(t, "POST", "/v2/checkout/orders", "", orderBody("v2", "1.00", "")); s != 201 || body["status"] != "CREATED" {
		t.Fatalf("%d %v", s, body)
	}
	if s, body := b.call(t, "GET", "/v2/nothing", "", ""); s != 404 || body["name"] != "RESOURCE_NOT_FOUND" {
		t.Fatalf("%d %v", s, body)
	}
}

func TestDeclineAndPayerAction(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// A declined card: the single-step create answers a COMPLETED order with a DECLINED capture.
	s, o := b.call(t, "POST", "/v2/checkout/orders", "d1", orderBody("d", "5.00", paypaltest.PaymentMethodInsufficientFunds))
	cp := captureOf(t, o)
	if s != 201 || o["status"] != "COMPLETED" || cp["status"] != "DECLINED" || cp["processor_response"].(map[string]any)["response_code"] != "0051" {
		t.Fatalf("%d %v", s, o)
	}
	if s, c := b.call(t, "POST", "/v2/checkout/orders/"+o["id"].(string)+"/capture", "d2", ""); s != 422 || issue(c) != "ORDER_ALREADY_CAPTURED" {
		t.Fatalf("%d %v", s, c)
	}
	if tot := b.srv.Totals()["EUR"]; tot.Captured != 0 {
		t.Fatalf("%+v", tot)
	}

	// 3-D Secure: nothing captured at create; captured explicitly once the payer acted.
	_, o = b.call(t, "POST", "/v2/checkout/orders", "a1", orderBody("a", "5.00", paypaltest.PaymentMethodAuthenticationRequired))
	id := o["id"].(string)
	if o["status"] != "PAYER_ACTION_REQUIRED" || o["purchase_units"].([]any)[0].(map[string]any)["payments"] != nil {
		t.Fatalf("%v", o)
	}
	if s, c := b.call(t, "POST", "/v2/checkout/orders/"+id+"/capture", "a2", ""); s != 422 || issue(c) != "ORDER_NOT_APPROVED" {
		t.Fatalf("%d %v", s, c)
	}
	if err := b.srv.CompletePayerAction(id); err != nil {
		t.Fatal(err)
	}
	if err := b.srv.CompletePayerAction(id); err == nil || !strings.Contains(err.Error(), "APPROVED") {
		t.Fatalf("twice: %v", err)
	}
	if s, c := b.call(t, "POST", "/v2/checkout/orders/"+id+"/capture", "a2", ""); s != 201 || c["status"] != "COMPLETED" {
		t.Fatalf("%d %v", s, c)
	}
	if got := b.srv.CountsByCustomID("a"); got != (paypaltest.Counts{Orders: 1, Captures: 1}) {
		t.Fatalf("%+v", got)
	}
}

func TestRefundBounds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	capID := b.captured(t, "r", "10.00", paypaltest.PaymentMethodVisa)["id"].(string)
	refund := func(rid, value string) (int, map[string]any) { return b.askRefund(t, capID, rid, value) }
	if s, r := refund("rf1", "4.00"); s != 201 || r["status"] != "COMPLETED" {
		t.Fatalf("%d %v", s, r)
	}
	if s, r := refund("rf1", "4.00"); s != 200 {
		t.Fatalf("replay %d %v", s, r)
	}
	if s, r := refund("rf2", "6.01"); s != 422 || issue(r) != "REFUND_AMOUNT_EXCEEDED" {
		t.Fatalf("%d %v", s, r)
	}
	if s, r := b.call(t, "POST", "/v2/payments/captures/"+capID+"/refund", "rf3", `{}`); s != 201 || r["amount"].(map[string]any)["value"] != "6.00" {
		t.Fatalf("refund of the rest %d %v", s, r)
	}
	if s, r := refund("rf4", "0.01"); s != 422 || issue(r) != "CAPTURE_FULLY_REFUNDED" {
		t.Fatalf("%d %v", s, r)
	}
	if s, c := b.call(t, "GET", "/v2/payments/captures/"+capID, "", ""); s != 200 || c["status"] != "REFUNDED" {
		t.Fatalf("%d %v", s, c)
	}
	if got := b.srv.Totals()["EUR"]; got != (paypaltest.Total{Captured: 1000, Refunded: 1000}) {
		t.Fatalf("%+v", got)
	}
	if got := b.srv.CountsByRequestID("rf1"); got.Refunds != 1 {
		t.Fatalf("%+v", got)
	}
	// The admin endpoints serve the same numbers.
	resp, err := b.client.Get(b.srv.URL() + "/_fake/totals")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var totals map[string]paypaltest.Total
	if err := json.NewDecoder(resp.Body).Decode(&totals); err != nil || totals["EUR"].Net != 0 || totals["EUR"].Refunded != 1000 {
		t.Fatalf("%v %v", totals, err)
	}
	s, counts := b.send(t, mustReq(t, "GET", b.srv.URL()+"/_fake/counts?custom_id=r"))
	if s != 200 || counts["orders"] != 1.0 || counts["captures"] != 1.0 {
		t.Fatalf("%d %v", s, counts)
	}
}

func mustReq(t *testing.T, method, url string) *http.Request {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestInFlightDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.Inject(paypaltest.Fault{Kind: paypaltest.Latency, Delay: time.Hour, Path: "/v2/checkout/orders"})
	var wg sync.WaitGroup
	wg.Add(1)
	var first int
	go func() {
		defer wg.Done()
		first, _ = b.call(t, "POST", "/v2/checkout/orders", "slow", orderBody("f", "1.00", paypaltest.PaymentMethodVisa))
	}()
	if err := b.srv.WaitHeld(testkit.Ctx(t), 1); err != nil { // the first holds the request id
		t.Fatal(err)
	}
	s, body := b.call(t, "POST", "/v2/checkout/orders", "slow", orderBody("f", "1.00", paypaltest.PaymentMethodVisa))
	b.srv.EndLatency()
	wg.Wait()
	if s != 409 || issue(body) != "PREVIOUS_REQUEST_IN_PROGRESS" || first != 201 {
		t.Fatalf("duplicate %d %v, first %d", s, body, first)
	}
	if got := b.srv.CountsByCustomID("f"); got.Orders != 1 {
		t.Fatalf("%+v", got)
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// FailBefore: nothing happens, the request id is free.
	b.srv.Inject(paypaltest.Fault{Kind: paypaltest.FailBefore, RequestID: "fb"})
	if s, _ := b.call(t, "POST", "/v2/checkout/orders", "fb", orderBody("fb", "1.00", paypaltest.PaymentMethodVisa)); s != 500 {
		t.Fatalf("%d", s)
	}
	if got := b.srv.CountsByCustomID("fb"); got.Orders != 0 {
		t.Fatalf("%+v", got)
	}
	// FailAfter: the order exists and the retry replays it with 200.
	b.srv.Inject(paypaltest.Fault{Kind: paypaltest.FailAfter, RequestID: "fa"})
	if s, _ := b.call(t, "POST", "/v2/checkout/orders", "fa", orderBody("fa", "1.00", paypaltest.PaymentMethodVisa)); s != 500 {
		t.Fatalf("%d", s)
	}
	if s, _ := b.call(t, "POST", "/v2/checkout/orders", "fa", orderBody("fa", "1.00", paypaltest.PaymentMethodVisa)); s != 200 {
		t.Fatalf("%d", s)
	}
	if got := b.srv.CountsByCustomID("fa"); got.Orders != 1 {
		t.Fatalf("%+v", got)
	}
	// Hang ends with the client's context and leaves nothing.
	b.srv.Inject(paypaltest.Fault{Kind: paypaltest.Hang, RequestID: "h"})
	// The client gives up once the fake holds the request, never before it arrived.
	req, _ := http.NewRequestWithContext(testkit.DeadlineWhenHeld(t, b.srv.WaitHeld), "POST", b.srv.URL()+"/v2/checkout/orders", strings.NewReader(orderBody("h", "1.00", paypaltest.PaymentMethodVisa)))
	req.Header.Set("Authorization", "Bearer "+b.token)
	req.Header.Set("PayPal-Request-Id", "h")
	if _, err := b.client.Do(req); err == nil {
		t.Fatal("hung request answered")
	}
	// The id is in use until the fake notices the client left (409), then free.
	s := 409
	for deadline := time.Now().Add(testkit.Patience); s == 409 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		s, _ = b.call(t, "POST", "/v2/checkout/orders", "h", orderBody("h", "1.00", paypaltest.PaymentMethodVisa))
	}
	if s != 201 {
		t.Fatalf("after a hang: %d", s)
	}
}

func TestProbabilisticFaultsAreSeeded(t *testing.T) {
	t.Parallel()
	run := func() []int {
		b := setup(t, &paypaltest.Config{Seed: 7, Faults: []paypaltest.Fault{{Kind: paypaltest.FailBefore, Method: "GET", Probability: 0.5}}})
		var out []int
		for range 20 {
			s, _ := b.call(t, "GET", "/v2/checkout/orders/none", "", "")
			out = append(out, s)
		}
		return out
	}
	a, c := run(), run()
	if fmt.Sprint(a) != fmt.Sprint(c) || !strings.Contains(fmt.Sprint(a), "500") || !strings.Contains(fmt.Sprint(a), "404") {
		t.Fatalf("%v vs %v", a, c)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]*paypaltest.Config{
		"Config.OrderRetention":    {OrderRetention: -1},
		"Config.RefundRetention":   {RefundRetention: -1},
		"Config.TokenLifetime":     {TokenLifetime: time.Millisecond},
		"Config.Faults[0]":         {Faults: []paypaltest.Fault{{Kind: paypaltest.Latency, Probability: 1}}},
		"Config.WebhookURL":        {WebhookURL: "nope"},
		"Config.DuplicateWebhooks": {DuplicateWebhooks: -1},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), field) {
					t.Fatalf("%s: panic %v", field, r)
				}
			}()
			paypaltest.NewUnstartedServer(cfg)
		}()
	}
}

func TestWebhookDeliveryAndVerification(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	var mu sync.Mutex
	var got []http.Header
	var bodies [][]byte
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError) // the first attempt fails: retried
			return
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r.Header.Clone()), append(bodies, b)
		mu.Unlock()
	}))
	defer sink.Close()
	b := setup(t, &paypaltest.Config{WebhookURL: sink.URL, DuplicateWebhooks: 1})
	b.call(t, "POST", "/v2/checkout/orders", "w1", orderBody("w", "3.00", paypaltest.PaymentMethodVisa))
	if err := b.srv.WaitDeliveries(testkit.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	evs := b.srv.Events()
	if len(evs) != 1 || evs[0].Type != "PAYMENT.CAPTURE.COMPLETED" || evs[0].Delivered != 2 || len(got) != 2 || calls.Load() != 3 {
		t.Fatalf("events %+v, %d deliveries, %d calls", evs, len(got), calls.Load())
	}
	verify := func(h http.Header, body []byte, webhookID string) string {
		req := map[string]any{
			"auth_algo": h.Get(paypaltest.HeaderAuthAlgo), "cert_url": h.Get(paypaltest.HeaderCertURL),
			"transmission_id": h.Get(paypaltest.HeaderTransmissionID), "transmission_sig": h.Get(paypaltest.HeaderTransmissionSig),
			"transmission_time": h.Get(paypaltest.HeaderTransmissionTime), "webhook_id": webhookID,
			"webhook_event": json.RawMessage(body),
		}
		raw, _ := json.Marshal(req)
		s, out := b.call(t, "POST", "/v1/notifications/verify-webhook-signature", "", string(raw))
		if s != 200 {
			t.Fatalf("verify: %d %v", s, out)
		}
		return out["verification_status"].(string)
	}
	if v := verify(got[0], bodies[0], paypaltest.DefaultWebhookID); v != "SUCCESS" {
		t.Fatal(v)
	}
	if v := verify(got[1], bodies[1], "WH-OTHER"); v != "FAILURE" {
		t.Fatal(v)
	}
	if v := verify(got[0], bodies[1], paypaltest.DefaultWebhookID); v != "SUCCESS" {
		t.Fatalf("the same event body under another transmission: %s", v) // duplicates share a body
	}
	tampered := []byte(strings.Replace(string(bodies[0]), "3.00", "300.00", 1))
	if v := verify(got[0], tampered, paypaltest.DefaultWebhookID); v != "FAILURE" {
		t.Fatal(v)
	}
	if s, out := b.call(t, "POST", "/v1/notifications/verify-webhook-signature", "", `{"auth_algo":"x"}`); s != 400 || issue(out) != "MISSING_REQUIRED_PARAMETER" {
		t.Fatalf("%d %v", s, out)
	}
}
