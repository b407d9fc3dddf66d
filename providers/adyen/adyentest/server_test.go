package adyentest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const merchant = "PayonceECOM"

// sink receives the fake's deliveries; fail makes it answer 500 to the first n.
type sink struct {
	mu     sync.Mutex
	bodies [][]byte
	fail   int
	gate   chan struct{} // when set, the first request waits for it to close
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	gate := s.gate
	s.gate = nil
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bodies = append(s.bodies, body)
	if s.fail > 0 {
		s.fail--
		http.Error(w, "down", http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, "[accepted]")
}

// items returns every item delivered, in delivery order.
func (s *sink) items(t *testing.T) []adyentest.NotificationItem {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []adyentest.NotificationItem
	for _, b := range s.bodies {
		var n adyentest.Notification
		if err := json.Unmarshal(b, &n); err != nil {
			t.Fatalf("delivery %s: %v", b, err)
		}
		if n.Live != "false" {
			t.Fatalf("live %q", n.Live)
		}
		for _, e := range n.NotificationItems {
			out = append(out, e.NotificationRequestItem)
		}
	}
	return out
}

type bundle struct {
	srv   *adyentest.Server
	clock *adyentest.ManualClock
	hc    *http.Client
	sink  *sink
}

// setup starts a fake on a manual clock, delivering to a sink. Keep-alives are off: on a reused
// connection net/http itself resends a request carrying an Idempotency-Key after a reset.
func setup(t *testing.T, cfg *adyentest.Config) *bundle {
	t.Helper()
	if cfg == nil {
		cfg = &adyentest.Config{}
	}
	clock := adyentest.NewManualClock(t0)
	if cfg.Clock == nil {
		cfg.Clock = clock.Now
	}
	sk := &sink{}
	hs := httptest.NewServer(sk)
	t.Cleanup(hs.Close)
	if cfg.WebhookURL == "" {
		cfg.WebhookURL = hs.URL
	}
	srv := adyentest.NewServer(cfg)
	t.Cleanup(srv.Close)
	return &bundle{srv: srv, clock: clock, sink: sk,
		hc: &http.Client{Timeout: testkit.Patience, Transport: &http.Transport{DisableKeepAlives: true}}}
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
	err    error
}

func (b *bundle) post(t *testing.T, path, key string, body any) answer {
	t.Helper()
	return b.postCtx(context.Background(), t, path, key, body)
}

func (b *bundle) postCtx(ctx context.Context, t *testing.T, path, key string, body any) answer {
	t.Helper()
	raw, ok := body.([]byte)
	if !ok {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.srv.URL()+path, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", "AQE_test")
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header}
	a.raw, _ = io.ReadAll(resp.Body)
	if err := json.Unmarshal(a.raw, &a.body); err != nil {
		t.Fatalf("%s answered %d %s: %v", path, resp.StatusCode, a.raw, err)
	}
	return a
}

func (b *bundle) wait(t *testing.T) {
	t.Helper()
	if err := b.srv.WaitDeliveries(testkit.Ctx(t)); err != nil {
		t.Fatal(err)
	}
}

func payment(ref, pm string, value int64) map[string]any {
	return map[string]any{
		"merchantAccount": merchant,
		"amount":          map[string]any{"currency": "EUR", "value": value},
		"reference":       ref,
		"paymentMethod":   map[string]any{"type": "scheme", "storedPaymentMethodId": pm},
		"returnUrl":       "https://shop.example/return",
		"metadata":        map[string]string{"payonce_key": "order-" + ref},
		// A token payment: its shopper, a returning one, and the kind of stored-card payment.
		"shopperReference":         "usr_" + ref,
		"shopperInteraction":       "ContAuth",
		"recurringProcessingModel": "CardOnFile",
	}
}

func wantCounts(t *testing.T, b *bundle, ref string, want adyentest.Counts) {
	t.Helper()
	if got := b.srv.Counts(ref); got != want {
		t.Fatalf("counts for %q: %+v, want %+v", ref, got, want)
	}
}

func TestPaymentResultCodes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tc := range []struct {
		pm, resultCode, reason, reasonCode string
	}{
		{adyentest.PaymentMethodVisa, "Authorised", "", ""},
		{adyentest.PaymentMethodDeclined, "Refused", "Refused", "2"},
		{adyentest.PaymentMethodInsufficientFunds, "Refused", "Not enough balance", "12"},
		{adyentest.PaymentMethodAuthenticationRequired, "RedirectShopper", "", ""},
	} {
		a := b.post(t, "/payments", "key-"+tc.pm, payment("ref-"+tc.pm, tc.pm, 1000))
		psp, _ := a.body["pspReference"].(string)
		if a.status != 200 || a.body["resultCode"] != tc.resultCode || len(psp) != 16 || a.body["merchantReference"] != "ref-"+tc.pm {
			t.Fatalf("%s: %d %s", tc.pm, a.status, a.raw)
		}
		if tc.reason != "" && (a.body["refusalReason"] != tc.reason || a.body["refusalReasonCode"] != tc.reasonCode) {
			t.Fatalf("%s: %s", tc.pm, a.raw)
		}
		if tc.resultCode == "RedirectShopper" {
			act, _ := a.body["action"].(map[string]any)
			if act["type"] != "redirect" || act["url"] == "" {
				t.Fatalf("action: %s", a.raw)
			}
		}
		if a.header.Get("Idempotency-Key") != "key-"+tc.pm {
			t.Fatalf("key not echoed: %v", a.header)
		}
		wantCounts(t, b, "ref-"+tc.pm, adyentest.Counts{Payments: 1})
	}
	a := b.post(t, "/payments", "key-unknown", payment("ref-unknown", "pm_card_unknown", 1000))
	if a.status != 422 || a.body["errorCode"] != "invalid_payment_method" || a.body["errorType"] != "validation" {
		t.Fatalf("unknown card: %d %s", a.status, a.raw)
	}
	wantCounts(t, b, "ref-unknown", adyentest.Counts{})

	// AUTHORISATION for the authorised and refused ones, none for the redirect yet.
	b.wait(t)
	items := b.sink.items(t)
	if len(items) != 3 {
		t.Fatalf("%d items: %+v", len(items), items)
	}
	for _, it := range items {
		want := "false"
		if it.MerchantReference == "ref-"+adyentest.PaymentMethodVisa {
			want = "true"
		}
		if it.EventCode != "AUTHORISATION" || it.Success != want || it.Amount != (adyentest.Amount{Currency: "EUR", Value: 1000}) ||
			it.AdditionalData["metadata.payonce_key"] != "order-"+it.MerchantReference || it.MerchantAccountCode != merchant {
			t.Fatalf("item %+v", it)
		}
		sig, err := adyentest.Sign(it, adyentest.DefaultHMACKey)
		if err != nil || sig != it.AdditionalData["hmacSignature"] {
			t.Fatalf("signature %q, want %q (%v)", it.AdditionalData["hmacSignature"], sig, err)
		}
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, &adyentest.Config{MerchantAccount: merchant})
	for name, edit := range map[string]func(p map[string]any){
		"merchantAccount": func(p map[string]any) { delete(p, "merchantAccount") },
		"amount":          func(p map[string]any) { delete(p, "amount") },
		"amount.currency": func(p map[string]any) { p["amount"] = map[string]any{"currency": "eur", "value": 1} },
		"amount.value":    func(p map[string]any) { p["amount"] = map[string]any{"currency": "EUR", "value": 0} },
		"reference":       func(p map[string]any) { p["reference"] = strings.Repeat("r", 81) },
		"paymentMethod":   func(p map[string]any) { delete(p, "paymentMethod") },
		"returnUrl":       func(p map[string]any) { delete(p, "returnUrl") },
		"metadata":        func(p map[string]any) { p["metadata"] = map[string]string{"a_key_over_twenty_chars": "x"} },
		"wrong type":      func(p map[string]any) { p["amount"] = "ten" },
	} {
		p := payment("ref-valid", adyentest.PaymentMethodVisa, 100)
		edit(p)
		if a := b.post(t, "/payments", "", p); a.status != 422 || a.body["errorType"] != "validation" || a.body["message"] == "" {
			t.Fatalf("%s: %d %s", name, a.status, a.raw)
		}
	}
	p := payment("ref-valid", adyentest.PaymentMethodVisa, 100)
	p["merchantAccount"] = "Other"
	if a := b.post(t, "/payments", "", p); a.status != 403 || a.body["errorCode"] != "901" {
		t.Fatalf("merchant: %d %s", a.status, a.raw)
	}
	if a := b.post(t, "/payments", "", []byte(`{"amount":`)); a.status != 400 || a.body["errorCode"] != "malformed_json" {
		t.Fatalf("malformed: %d %s", a.status, a.raw)
	}
	if a := b.post(t, "/payments", strings.Repeat("k", 65), payment("ref-valid", adyentest.PaymentMethodVisa, 100)); a.status != 422 {
		t.Fatalf("long key: %d %s", a.status, a.raw)
	}
	wantCounts(t, b, "ref-valid", adyentest.Counts{})

	// A validation error is final for its key: the corrected request needs another key.
	bad := payment("ref-fixed", adyentest.PaymentMethodVisa, 100)
	delete(bad, "returnUrl")
	if a := b.post(t, "/payments", "key-fixed", bad); a.status != 422 {
		t.Fatalf("%d %s", a.status, a.raw)
	}
	if a := b.post(t, "/payments", "key-fixed", payment("ref-fixed", adyentest.PaymentMethodVisa, 100)); a.status != 422 || a.body["errorCode"] != adyentest.ErrorCodeKeyMismatch {
		t.Fatalf("corrected body, same key: %d %s", a.status, a.raw)
	}
	wantCounts(t, b, "ref-fixed", adyentest.Counts{})

	req, _ := http.NewRequest(http.MethodPost, b.srv.URL()+"/payments", strings.NewReader(`{}`))
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("no API key: %d", resp.StatusCode)
	}
	if a := b.post(t, "/payments/X/amountUpdates", "", map[string]any{}); a.status != 404 {
		t.Fatalf("unknown endpoint: %d", a.status)
	}
}

func TestAPIKeyScope(t *testing.T) {
	t.Parallel()
	b := setup(t, &adyentest.Config{APIKey: "AQE_test"})
	if a := b.post(t, "/payments", "", payment("ref-key", adyentest.PaymentMethodVisa, 100)); a.status != 200 {
		t.Fatalf("%d %s", a.status, a.raw)
	}
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL()+"/payments", strings.NewReader(`{}`))
	req.Header.Set("X-API-Key", "AQE_other")
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("wrong API key: %d", resp.StatusCode)
	}
}

func TestIdempotency(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	first := b.post(t, "/payments", "key-1", payment("ref-1", adyentest.PaymentMethodVisa, 1000))
	again := b.post(t, "/payments", "key-1", payment("ref-1", adyentest.PaymentMethodVisa, 1000))
	if first.status != 200 || !bytes.Equal(first.raw, again.raw) || again.header.Get("Idempotency-Key") != "key-1" {
		t.Fatalf("replay differs: %s vs %s", first.raw, again.raw)
	}
	for _, h := range []string{"Idempotent-Replayed", "Transient-Error"} {
		if again.header.Get(h) != "" {
			t.Fatalf("replay carries %s", h)
		}
	}
	// Field order and whitespace do not matter; values do.
	reordered := []byte(`{"reference":"ref-1", "returnUrl":"https://shop.example/return","amount":{"value":1000,"currency":"EUR"},` +
		`"merchantAccount":"PayonceECOM","paymentMethod":{"storedPaymentMethodId":"pm_card_visa","type":"scheme"},"metadata":{"payonce_key":"order-ref-1"},` +
		`"recurringProcessingModel":"CardOnFile", "shopperInteraction":"ContAuth","shopperReference":"usr_ref-1"}`)
	if a := b.post(t, "/payments", "key-1", reordered); !bytes.Equal(a.raw, first.raw) {
		t.Fatalf("reordered body: %d %s", a.status, a.raw)
	}
	if a := b.post(t, "/payments", "key-1", payment("ref-1", adyentest.PaymentMethodVisa, 1001)); a.status != 422 || a.body["errorCode"] != adyentest.ErrorCodeKeyMismatch {
		t.Fatalf("other amount: %d %s", a.status, a.raw)
	}
	psp := first.body["pspReference"].(string)
	if a := b.post(t, "/payments/"+psp+"/refunds", "key-1", map[string]any{"merchantAccount": merchant,
		"amount": map[string]any{"currency": "EUR", "value": 10}}); a.status != 422 || a.body["errorCode"] != adyentest.ErrorCodeKeyMismatch {
		t.Fatalf("other endpoint: %d %s", a.status, a.raw)
	}
	wantCounts(t, b, "ref-1", adyentest.Counts{Payments: 1})
	if c := b.srv.CountsByIdempotencyKey("key-1"); c != (adyentest.Counts{Payments: 1}) {
		t.Fatalf("by key: %+v", c)
	}
	// Retention: 7 days by default; after it, the key is forgotten and the request runs anew.
	b.clock.Advance(7*24*time.Hour - time.Second)
	b.post(t, "/payments", "key-1", payment("ref-1", adyentest.PaymentMethodVisa, 1000))
	wantCounts(t, b, "ref-1", adyentest.Counts{Payments: 1})
	b.clock.Advance(time.Second)
	if a := b.post(t, "/payments", "key-1", payment("ref-1", adyentest.PaymentMethodVisa, 1000)); a.body["pspReference"] == psp {
		t.Fatalf("expired key replayed: %s", a.raw)
	}
	wantCounts(t, b, "ref-1", adyentest.Counts{Payments: 2})
	// Without a key, every request executes.
	b.post(t, "/payments", "", payment("ref-nokey", adyentest.PaymentMethodVisa, 1000))
	b.post(t, "/payments", "", payment("ref-nokey", adyentest.PaymentMethodVisa, 1000))
	wantCounts(t, b, "ref-nokey", adyentest.Counts{Payments: 2})
}

// Adyen does not deduplicate references: two keys, one reference, two payments. This is why
// payonce derives the Idempotency-Key from the reference.
func TestReferenceNotDeduplicated(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a1 := b.post(t, "/payments", "key-a", payment("ref-same", adyentest.PaymentMethodVisa, 1000))
	a2 := b.post(t, "/payments", "key-b", payment("ref-same", adyentest.PaymentMethodVisa, 1000))
	if a1.body["pspReference"] == a2.body["pspReference"] {
		t.Fatal("same payment for two keys")
	}
	wantCounts(t, b, "ref-same", adyentest.Counts{Payments: 2})
	if tot := b.srv.Totals()["EUR"]; tot.Authorised != 2000 {
		t.Fatalf("totals %+v", tot)
	}
}

func TestInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.Inject(adyentest.Fault{Kind: adyentest.Latency, Delay: time.Hour, Path: "/payments"})
	done := make(chan answer, 1)
	go func() {
		done <- b.post(t, "/payments", "key-slow", payment("ref-slow", adyentest.PaymentMethodVisa, 1000))
	}()
	if err := b.srv.WaitHeld(testkit.Ctx(t), 1); err != nil { // the first holds the key
		t.Fatal(err)
	}
	dup := b.post(t, "/payments", "key-slow", payment("ref-slow", adyentest.PaymentMethodVisa, 1000))
	if dup.status != 422 || dup.body["errorCode"] != "704" {
		t.Fatalf("duplicate in flight: %d %s", dup.status, dup.raw)
	}
	b.srv.EndLatency()
	if first := <-done; first.status != 200 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	wantCounts(t, b, "ref-slow", adyentest.Counts{Payments: 1})
}

func TestFaults(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	// FailBefore: transient, not cached, nothing created.
	b.srv.Inject(adyentest.Fault{Kind: adyentest.FailBefore, Path: "/payments", IdempotencyKey: "key-fb"})
	a := b.post(t, "/payments", "key-fb", payment("ref-fb", adyentest.PaymentMethodVisa, 1000))
	if a.status != 500 || a.header.Get("Transient-Error") != "true" {
		t.Fatalf("FailBefore: %d %v %s", a.status, a.header, a.raw)
	}
	wantCounts(t, b, "ref-fb", adyentest.Counts{})
	if a := b.post(t, "/payments", "key-fb", payment("ref-fb", adyentest.PaymentMethodVisa, 1000)); a.status != 200 {
		t.Fatalf("retry: %d %s", a.status, a.raw)
	}
	wantCounts(t, b, "ref-fb", adyentest.Counts{Payments: 1})

	// FailAfter: executed, a non-transient 500 cached for the key.
	b.srv.Inject(adyentest.Fault{Kind: adyentest.FailAfter, Path: "/payments"})
	for i := 0; i < 2; i++ {
		a := b.post(t, "/payments", "key-fa", payment("ref-fa", adyentest.PaymentMethodVisa, 1000))
		if a.status != 500 || a.header.Get("Transient-Error") != "" {
			t.Fatalf("FailAfter attempt %d: %d %s", i, a.status, a.raw)
		}
	}
	wantCounts(t, b, "ref-fa", adyentest.Counts{Payments: 1})

	// ResetAfter: executed, response lost, the retry replays it.
	b.srv.Inject(adyentest.Fault{Kind: adyentest.ResetAfter, Path: "/payments"})
	if a := b.post(t, "/payments", "key-ra", payment("ref-ra", adyentest.PaymentMethodVisa, 1000)); a.err == nil {
		t.Fatalf("ResetAfter answered %d", a.status)
	}
	if a := b.post(t, "/payments", "key-ra", payment("ref-ra", adyentest.PaymentMethodVisa, 1000)); a.status != 200 || a.body["resultCode"] != "Authorised" {
		t.Fatalf("after reset: %d %s", a.status, a.raw)
	}
	wantCounts(t, b, "ref-ra", adyentest.Counts{Payments: 1})

	// Hang: nothing executes; the key is free again once the client gave up.
	b.srv.Inject(adyentest.Fault{Kind: adyentest.Hang, Path: "/payments"})
	// The client gives up once the fake holds the request, never before it arrived.
	if a := b.postCtx(testkit.DeadlineWhenHeld(t, b.srv.WaitHeld), t, "/payments", "key-hang", payment("ref-hang", adyentest.PaymentMethodVisa, 1000)); a.err == nil {
		t.Fatalf("Hang answered %d", a.status)
	}
	wantCounts(t, b, "ref-hang", adyentest.Counts{})
	deadline := time.Now().Add(testkit.Patience)
	for {
		a := b.post(t, "/payments", "key-hang", payment("ref-hang", adyentest.PaymentMethodVisa, 1000))
		if a.status == 200 {
			break
		}
		if a.body["errorCode"] != "704" || time.Now().After(deadline) {
			t.Fatalf("after hang: %d %s", a.status, a.raw)
		}
		time.Sleep(5 * time.Millisecond) // the server notices the client left
	}
	wantCounts(t, b, "ref-hang", adyentest.Counts{Payments: 1})

	// Path patterns: a refund fault does not touch payments.
	b.srv.Inject(adyentest.Fault{Kind: adyentest.FailBefore, Path: "/payments/*/refunds"})
	if a := b.post(t, "/payments", "key-pattern", payment("ref-pattern", adyentest.PaymentMethodVisa, 1000)); a.status != 200 {
		t.Fatalf("payment hit by a refund fault: %d", a.status)
	}
}

func TestProbabilisticFaultsAreSeeded(t *testing.T) {
	t.Parallel()
	run := func() string {
		b := setup(t, &adyentest.Config{Seed: 42, Faults: []adyentest.Fault{{Kind: adyentest.FailBefore, Probability: 0.5}}})
		var sb strings.Builder
		for i := range 20 {
			a := b.post(t, "/payments", fmt.Sprintf("key-%d", i), payment(fmt.Sprintf("ref-%d", i), adyentest.PaymentMethodVisa, 100))
			fmt.Fprintf(&sb, "%d ", a.status)
		}
		return sb.String()
	}
	first, second := run(), run()
	if first != second || !strings.Contains(first, "500") || !strings.Contains(first, "200") {
		t.Fatalf("sequences %q and %q", first, second)
	}
}

// Under automatic capture (the default) an Authorised payment is captured at once: refunds
// work on it, a capture request and a technical cancel fail, and the money stays captured.
func TestRefundsCapturesCancels(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	psp := b.post(t, "/payments", "key-p", payment("ref-p", adyentest.PaymentMethodVisa, 1000)).body["pspReference"].(string)
	refund := func(key, ref string, value int64) answer {
		return b.post(t, "/payments/"+psp+"/refunds", key, map[string]any{"merchantAccount": merchant, "reference": ref,
			"amount": map[string]any{"currency": "EUR", "value": value}})
	}
	r1 := refund("key-r1", "ref-r1", 600)
	if r1.status != 201 || r1.body["status"] != "received" || r1.body["paymentPspReference"] != psp || r1.body["pspReference"] == psp {
		t.Fatalf("refund: %d %s", r1.status, r1.raw)
	}
	if again := refund("key-r1", "ref-r1", 600); !bytes.Equal(again.raw, r1.raw) {
		t.Fatalf("refund replay: %s", again.raw)
	}
	refund("key-r2", "ref-r2", 600) // more than the 400 left: received, fails by webhook
	capture := b.post(t, "/payments/"+psp+"/captures", "key-c", map[string]any{"merchantAccount": merchant, "reference": "ref-c",
		"amount": map[string]any{"currency": "EUR", "value": 1000}})
	if capture.status != 201 || capture.body["status"] != "received" {
		t.Fatalf("capture: %d %s", capture.status, capture.raw)
	}
	if a := b.post(t, "/payments/NOSUCHPSP0000000/refunds", "", map[string]any{"merchantAccount": merchant,
		"amount": map[string]any{"currency": "EUR", "value": 1}}); a.status != 422 || a.body["errorCode"] != "unknown_psp_reference" {
		t.Fatalf("unknown psp: %d %s", a.status, a.raw)
	}

	// Technical cancels: a captured payment is not cancellable, refunded or not; an unknown
	// reference gets success=false too.
	cancel := func(key, paymentRef string) answer {
		return b.post(t, "/cancels", key, map[string]any{"merchantAccount": merchant, "paymentReference": paymentRef, "reference": key})
	}
	cancel("key-x1", "ref-p")
	fresh := b.post(t, "/payments", "key-q", payment("ref-q", adyentest.PaymentMethodVisa, 500)).body["pspReference"].(string)
	if a := cancel("key-x2", "ref-q"); a.status != 201 || a.body["status"] != "received" || a.body["paymentReference"] != "ref-q" {
		t.Fatalf("cancel: %d %s", a.status, a.raw)
	}
	cancel("key-x3", "ref-none")
	if a := cancel("", ""); a.status != 422 {
		t.Fatalf("cancel without paymentReference: %d %s", a.status, a.raw)
	}

	b.wait(t)
	byRef := map[string]adyentest.NotificationItem{}
	for _, it := range b.sink.items(t) {
		byRef[it.EventCode+" "+it.MerchantReference] = it
	}
	for key, want := range map[string]string{
		"REFUND ref-r1": "true", "REFUND ref-r2": "false", "CAPTURE ref-c": "false",
		"TECHNICAL_CANCEL ref-p": "false", "TECHNICAL_CANCEL ref-q": "false", "TECHNICAL_CANCEL ref-none": "false",
	} {
		it, ok := byRef[key]
		if !ok || it.Success != want {
			t.Fatalf("%s: %+v (ok %v), want success %s", key, it, ok, want)
		}
		if want == "false" && it.Reason == "" {
			t.Fatalf("%s: no reason", key)
		}
	}
	if _, ok := byRef["CAPTURE ref-p"]; ok {
		t.Fatal("an automatic capture emitted a CAPTURE notification")
	}
	if it := byRef["REFUND ref-r1"]; it.OriginalReference != psp || it.Amount.Value != 600 {
		t.Fatalf("refund item %+v", it)
	}
	if it := byRef["TECHNICAL_CANCEL ref-q"]; it.OriginalReference != fresh || it.Reason != adyentest.ReasonCancelCaptured {
		t.Fatalf("cancel of a captured payment: %+v", it)
	}
	if it := byRef["TECHNICAL_CANCEL ref-none"]; it.OriginalReference != "" || it.Reason != adyentest.ReasonNoPayment {
		t.Fatalf("cancel of nothing: %+v", it)
	}
	if tot := b.srv.Totals()["EUR"]; tot != (adyentest.Total{Authorised: 1500, Captured: 1500, Refunded: 600, Net: 900, NetAmount: "9.00"}) {
		t.Fatalf("totals %+v", tot)
	}
	wantCounts(t, b, "ref-r1", adyentest.Counts{Refunds: 1})
	wantCounts(t, b, "ref-q", adyentest.Counts{Payments: 1, Cancels: 1})
	wantCounts(t, b, "ref-none", adyentest.Counts{Cancels: 1})
	if c := b.srv.CountsByIdempotencyKey("key-c"); c != (adyentest.Counts{Captures: 1}) {
		t.Fatalf("by key: %+v", c)
	}
}

// itemsByRef maps "EVENTCODE merchantReference" to the last item delivered with them.
func (b *bundle) itemsByRef(t *testing.T) map[string]adyentest.NotificationItem {
	t.Helper()
	b.wait(t)
	out := map[string]adyentest.NotificationItem{}
	for _, it := range b.sink.items(t) {
		out[it.EventCode+" "+it.MerchantReference] = it
	}
	return out
}

func (b *bundle) modify(t *testing.T, psp, op, key, ref string, value int64) answer {
	t.Helper()
	body := map[string]any{"merchantAccount": merchant, "reference": ref}
	if value > 0 {
		body["amount"] = map[string]any{"currency": "EUR", "value": value}
	}
	a := b.post(t, "/payments/"+psp+"/"+op, key, body)
	if a.status != 201 || a.body["status"] != "received" || a.body["paymentPspReference"] != psp {
		t.Fatalf("%s of %s: %d %s", op, psp, a.status, a.raw)
	}
	return a
}

// Under manual capture an Authorised payment moves no money: a refund fails with Adyen's
// reason, a technical cancel voids it, a capture captures it once, and after the capture the
// technical cancel fails.
func TestManualCapture(t *testing.T) {
	t.Parallel()
	b := setup(t, &adyentest.Config{CaptureMode: adyentest.CaptureManual})
	held := b.post(t, "/payments", "key-h", payment("ref-h", adyentest.PaymentMethodVisa, 1000)).body["pspReference"].(string)
	if tot := b.srv.Totals()["EUR"]; tot != (adyentest.Total{Authorised: 1000, NetAmount: "0.00"}) {
		t.Fatalf("an uncaptured authorisation moved money: %+v", tot)
	}
	b.modify(t, held, "refunds", "key-hr", "ref-hr", 1000)
	b.post(t, "/cancels", "key-hx", map[string]any{"merchantAccount": merchant, "paymentReference": "ref-h", "reference": "ref-hx"})
	b.modify(t, held, "captures", "key-hc", "ref-hc", 1000) // too late: cancelled

	paid := b.post(t, "/payments", "key-p", payment("ref-p", adyentest.PaymentMethodVisa, 1000)).body["pspReference"].(string)
	b.modify(t, paid, "captures", "key-pc", "ref-pc", 1000)
	b.modify(t, paid, "captures", "key-pc2", "ref-pc2", 1000) // one capture per payment
	b.post(t, "/cancels", "key-px", map[string]any{"merchantAccount": merchant, "paymentReference": "ref-p", "reference": "ref-px"})
	b.modify(t, paid, "refunds", "key-pr", "ref-pr", 400)

	items := b.itemsByRef(t)
	for key, want := range map[string]string{
		"AUTHORISATION ref-h": "true", "REFUND ref-hr": "false", "TECHNICAL_CANCEL ref-h": "true", "CAPTURE ref-hc": "false",
		"AUTHORISATION ref-p": "true", "CAPTURE ref-pc": "true", "CAPTURE ref-pc2": "false", "TECHNICAL_CANCEL ref-p": "false",
		"REFUND ref-pr": "true",
	} {
		if it, ok := items[key]; !ok || it.Success != want {
			t.Fatalf("%s: %+v (ok %v), want success %s", key, it, ok, want)
		}
	}
	if it := items["REFUND ref-hr"]; it.Reason != adyentest.ReasonRefundNotCaptured {
		t.Fatalf("refund of an uncaptured payment: %+v", it)
	}
	if it := items["CAPTURE ref-pc"]; it.OriginalReference != paid || it.Amount.Value != 1000 {
		t.Fatalf("capture item %+v", it)
	}
	if it := items["TECHNICAL_CANCEL ref-p"]; it.OriginalReference != paid || it.Reason != adyentest.ReasonCancelCaptured {
		t.Fatalf("cancel after the capture: %+v", it)
	}
	if tot := b.srv.Totals()["EUR"]; tot != (adyentest.Total{Authorised: 1000, Captured: 1000, Refunded: 400, Net: 600, NetAmount: "6.00"}) {
		t.Fatalf("totals %+v", tot)
	}
	wantCounts(t, b, "ref-pc", adyentest.Counts{Captures: 1})
}

// A capture delay keeps an automatic-capture payment cancellable until it passes on the clock.
func TestCaptureDelay(t *testing.T) {
	t.Parallel()
	b := setup(t, &adyentest.Config{CaptureDelay: time.Hour})
	b.post(t, "/payments", "key-early", payment("ref-early", adyentest.PaymentMethodVisa, 700))
	b.post(t, "/payments", "key-late", payment("ref-late", adyentest.PaymentMethodVisa, 300))
	if tot := b.srv.Totals()["EUR"]; tot.Captured != 0 || tot.Authorised != 1000 {
		t.Fatalf("captured before the delay: %+v", tot)
	}
	b.post(t, "/cancels", "key-xe", map[string]any{"merchantAccount": merchant, "paymentReference": "ref-early"})
	b.clock.Advance(time.Hour)
	b.post(t, "/cancels", "key-xl", map[string]any{"merchantAccount": merchant, "paymentReference": "ref-late"})
	items := b.itemsByRef(t)
	if items["TECHNICAL_CANCEL ref-early"].Success != "true" || items["TECHNICAL_CANCEL ref-late"].Success != "false" {
		t.Fatalf("cancels: %+v", items)
	}
	if tot := b.srv.Totals()["EUR"]; tot != (adyentest.Total{Authorised: 300, Captured: 300, Net: 300, NetAmount: "3.00"}) {
		t.Fatalf("totals %+v", tot)
	}
}

// POST /payments/{psp}/reversals refunds a captured payment and cancels an uncaptured one; its
// CANCEL_OR_REFUND says which in additionalData "modification.action".
func TestReversals(t *testing.T) {
	t.Parallel()
	for _, mode := range []adyentest.CaptureMode{adyentest.CaptureAutomatic, adyentest.CaptureManual} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &adyentest.Config{CaptureMode: mode})
			psp := b.post(t, "/payments", "key-p", payment("ref-p", adyentest.PaymentMethodVisa, 1000)).body["pspReference"].(string)
			first := b.modify(t, psp, "reversals", "key-v1", "ref-v1", 0)
			if again := b.modify(t, psp, "reversals", "key-v1", "ref-v1", 0); !bytes.Equal(again.raw, first.raw) {
				t.Fatalf("replay: %s", again.raw)
			}
			b.modify(t, psp, "reversals", "key-v2", "ref-v2", 0) // nothing left to reverse
			refused := b.post(t, "/payments", "key-d", payment("ref-d", adyentest.PaymentMethodDeclined, 1000)).body["pspReference"].(string)
			b.modify(t, refused, "reversals", "key-v3", "", 0)
			if a := b.post(t, "/payments/NOSUCHPSP0000000/reversals", "", map[string]any{"merchantAccount": merchant}); a.status != 422 {
				t.Fatalf("unknown psp: %d %s", a.status, a.raw)
			}

			items := b.itemsByRef(t)
			action := map[adyentest.CaptureMode]string{adyentest.CaptureAutomatic: "refund", adyentest.CaptureManual: "cancel"}[mode]
			ok := items["CANCEL_OR_REFUND ref-v1"]
			if ok.Success != "true" || ok.OriginalReference != psp || ok.PSPReference != first.body["pspReference"] ||
				ok.AdditionalData[adyentest.ModificationAction] != action || ok.Amount.Value != 1000 {
				t.Fatalf("reversal: %+v, want success with action %s", ok, action)
			}
			for _, key := range []string{"CANCEL_OR_REFUND ref-v2", "CANCEL_OR_REFUND ref-d"} {
				if it := items[key]; it.Success != "false" || it.Reason == "" || it.AdditionalData[adyentest.ModificationAction] != "" {
					t.Fatalf("%s: %+v, want success false with a reason", key, it)
				}
			}
			want := adyentest.Total{Captured: 1000, Refunded: 1000, Authorised: 1000, NetAmount: "0.00"}
			if mode == adyentest.CaptureManual {
				want = adyentest.Total{NetAmount: "0.00"}
			}
			if tot := b.srv.Totals()["EUR"]; tot != want {
				t.Fatalf("totals %+v, want %+v", tot, want)
			}
			wantCounts(t, b, "ref-v1", adyentest.Counts{Reversals: 1})
		})
	}
}

// The fake reads amounts with Adyen's decimals, which differ from ISO 4217 for CLP, CVE, IDR
// and ISK.
func TestDecimals(t *testing.T) {
	t.Parallel()
	for cur, want := range map[string]int{"EUR": 2, "CLP": 2, "ISK": 2, "CVE": 0, "IDR": 0, "JPY": 0, "KWD": 3} {
		if got := adyentest.Decimals(cur); got != want {
			t.Errorf("Decimals(%s) = %d, want %d", cur, got, want)
		}
	}
	for _, tc := range []struct {
		cur   string
		value int64
		want  string
	}{{"CLP", 100000, "1000.00"}, {"CVE", 1000, "1000"}, {"KWD", 5, "0.005"}, {"EUR", -150, "-1.50"}, {"EUR", 0, "0.00"}} {
		if got := adyentest.FormatValue(tc.cur, tc.value); got != tc.want {
			t.Errorf("FormatValue(%s, %d) = %q, want %q", tc.cur, tc.value, got, tc.want)
		}
	}
	b := setup(t, nil)
	for cur, value := range map[string]int64{"CVE": 1000, "CLP": 100000} {
		p := payment("ref-"+cur, adyentest.PaymentMethodVisa, value)
		p["amount"] = map[string]any{"currency": cur, "value": value}
		b.post(t, "/payments", "key-"+cur, p)
	}
	tot := b.srv.Totals()
	if tot["CVE"].NetAmount != "1000" || tot["CLP"].NetAmount != "1000.00" {
		t.Fatalf("totals %+v", tot)
	}
}

func TestCompleteRedirect(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	psp := b.post(t, "/payments", "k1", payment("ref-3ds", adyentest.PaymentMethodAuthenticationRequired, 700)).body["pspReference"].(string)
	if tot := b.srv.Totals()["EUR"]; tot.Authorised != 0 {
		t.Fatalf("a redirect moved money: %+v", tot)
	}
	if err := b.srv.CompleteRedirect(psp, true); err != nil {
		t.Fatal(err)
	}
	if err := b.srv.CompleteRedirect(psp, true); err == nil {
		t.Fatal("completed twice")
	}
	if err := b.srv.CompleteRedirect("NOPE", true); err == nil {
		t.Fatal("unknown psp completed")
	}
	psp2 := b.post(t, "/payments", "k2", payment("ref-3ds-2", adyentest.PaymentMethodAuthenticationRequired, 700)).body["pspReference"].(string)
	if err := b.srv.CompleteRedirect(psp2, false); err != nil {
		t.Fatal(err)
	}
	b.wait(t)
	items := b.sink.items(t)
	if len(items) != 2 || items[0].Success != "true" || items[1].Success != "false" || items[1].Reason != "3D Not Authenticated" {
		t.Fatalf("items %+v", items)
	}
	if tot := b.srv.Totals()["EUR"]; tot.Authorised != 700 {
		t.Fatalf("totals %+v", tot)
	}
}

func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.post(t, "/payments", "key-adm", payment("ref-adm", adyentest.PaymentMethodVisa, 1234))
	root := strings.TrimSuffix(b.srv.URL(), "/"+adyentest.APIVersion)
	get := func(path string, v any) int {
		resp, err := b.hc.Get(root + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if v != nil && resp.StatusCode == 200 {
			if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode
	}
	var c adyentest.Counts
	if get("/_fake/counts?reference=ref-adm", &c); c != (adyentest.Counts{Payments: 1}) {
		t.Fatalf("%+v", c)
	}
	if get("/_fake/counts?idempotency_key=key-adm", &c); c != (adyentest.Counts{Payments: 1}) {
		t.Fatalf("%+v", c)
	}
	var tot map[string]adyentest.Total
	if get("/_fake/totals", &tot); tot["EUR"] != (adyentest.Total{Authorised: 1234, Captured: 1234, Net: 1234, NetAmount: "12.34"}) {
		t.Fatalf("%+v", tot)
	}
	if s := get("/_fake/counts", nil); s != 400 {
		t.Fatalf("counts without a filter: %d", s)
	}
	if s := get("/_fake/nothing", nil); s != 404 {
		t.Fatalf("unknown admin path: %d", s)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]adyentest.Config{
		"Config.Retention":         {Retention: -1},
		"Config.Faults[0]":         {Faults: []adyentest.Fault{{Kind: adyentest.Latency, Probability: 1}}},
		"Config.Faults[0].Prob":    {Faults: []adyentest.Fault{{Kind: adyentest.Hang}}},
		"Config.DuplicateWebhooks": {DuplicateWebhooks: -1},
		"Config.WebhookURL":        {WebhookURL: "localhost:80"},
		"Config.HMACKey":           {HMACKey: "zz"},
		"Config.CaptureMode":       {CaptureMode: "later"},
		"Config.CaptureDelay":      {CaptureDelay: -time.Second},
		"Config.CaptureDelay is":   {CaptureMode: adyentest.CaptureManual, CaptureDelay: time.Hour},
	} {
		func() {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(fmt.Sprint(r), field) {
					t.Fatalf("%s: panic %v", field, r)
				}
			}()
			adyentest.NewUnstartedServer(&cfg)
		}()
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Path") {
			t.Fatalf("bad Path: %v", r)
		}
	}()
	adyentest.NewUnstartedServer(nil).Inject(adyentest.Fault{Kind: adyentest.Hang, Path: "payments"})
}
