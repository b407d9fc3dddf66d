package adyen_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/internal/testkit"
	"github.com/payonce/payonce/providers/providertest"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

const merchant = "PayonceECOM"

// inbox is a webhook endpoint: it verifies each delivery with the Provider and keeps the
// events, as production's webhook inbox would. It feeds Config.Notifications.
type inbox struct {
	mu       sync.Mutex
	p        *adyen.Provider
	events   []provider.WebhookEvent
	payloads [][]byte
	refused  int
	// drop, while set, acknowledges deliveries and keeps nothing: notifications that never
	// reached payonce.
	drop atomic.Bool
}

func (in *inbox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if in.drop.Load() {
		_, _ = io.WriteString(w, "[accepted]")
		return
	}
	in.mu.Lock()
	p := in.p
	in.mu.Unlock()
	evs, err := p.VerifyWebhook(r.Context(), r.Header, body)
	in.mu.Lock()
	defer in.mu.Unlock()
	in.payloads = append(in.payloads, body)
	if err != nil {
		in.refused++
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	in.events = append(in.events, evs...)
	_, _ = io.WriteString(w, "[accepted]")
}

func (in *inbox) byReference(ref string) []provider.WebhookEvent {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []provider.WebhookEvent
	for _, ev := range in.events {
		if ev.Reference == ref {
			out = append(out, ev)
		}
	}
	return out
}

func (in *inbox) all() []provider.WebhookEvent {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]provider.WebhookEvent(nil), in.events...)
}

type bundle struct {
	srv   *adyentest.Server
	p     *adyen.Provider
	inbox *inbox
}

// setup starts a fake delivering webhooks to an inbox, and a Provider on both. Keep-alives are
// off so that a lost response is seen as lost (net/http would otherwise resend a request
// carrying an Idempotency-Key on a fresh connection).
func setup(t *testing.T, cfg *adyentest.Config) bundle {
	t.Helper()
	return setupWith(t, cfg, nil)
}

// setupWith is setup whose adapter Config edit changes first (nil: none).
func setupWith(t *testing.T, cfg *adyentest.Config, edit func(*adyen.Config)) bundle {
	t.Helper()
	in := &inbox{}
	hs := httptest.NewServer(in)
	t.Cleanup(hs.Close)
	if cfg == nil {
		cfg = &adyentest.Config{}
	}
	cfg.WebhookURL = hs.URL
	srv := adyentest.NewServer(cfg)
	t.Cleanup(srv.Close)
	acfg := &adyen.Config{
		APIKey:          "AQE_test_key",
		MerchantAccount: merchant,
		BaseURL:         srv.URL(),
		HTTPClient:      &http.Client{Timeout: testkit.Patience, Transport: &http.Transport{DisableKeepAlives: true}},
		HMACKeys:        []string{adyentest.DefaultHMACKey},
		ReturnURL:       "https://shop.example/return",
		Notifications: func(ctx context.Context, reference string) ([]provider.WebhookEvent, error) {
			if err := srv.WaitDeliveries(ctx); err != nil {
				return nil, err
			}
			return in.byReference(reference), nil
		},
	}
	if edit != nil {
		edit(acfg)
	}
	p, err := adyen.New(acfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	in.mu.Lock()
	in.p = p
	in.mu.Unlock()
	return bundle{srv: srv, p: p, inbox: in}
}

func (b bundle) wait(t *testing.T) {
	t.Helper()
	if err := b.srv.WaitDeliveries(testkit.Ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// lookup looks up the charge req by its keys, as the reconciler does.
func (b bundle) lookup(t *testing.T, req provider.ChargeRequest) provider.LookupResult {
	t.Helper()
	return must(b.p.Lookup(context.Background(), provider.LookupRequest{Key: req.Key, ProviderKey: req.ProviderKey}))(t)
}

// void voids the charge req: by its reference (a technical cancel) when pspReference is "", else
// the payment pspReference (a reversal).
func (b bundle) void(t *testing.T, req provider.ChargeRequest, pspReference string) {
	t.Helper()
	must(0, b.p.Void(context.Background(), provider.VoidRequest{Key: req.Key, ProviderKey: req.ProviderKey, ProviderID: pspReference}))(t)
}

func eur(s string) money.Money { return testkit.EUR(s) }

func chargeReq(key, pm string) provider.ChargeRequest {
	return provider.ChargeRequest{
		Key:           key,
		ProviderKey:   provider.DeriveKey(key, "charge", 0, adyen.MaxReferenceLen),
		Amount:        eur("20.00"),
		PaymentMethod: pm,
		Metadata:      map[string]string{"order": key},
		Shopper:       "usr_" + key,
	}
}

func refundReq(key, chargeID string, amount money.Money) provider.RefundRequest {
	return testkit.RefundRequest(key, chargeID, amount, adyen.MaxReferenceLen)
}

// must(call())(t) fails t if call returned an error.
func must[T any](v T, err error) func(*testing.T) T { return testkit.Must(v, err) }

func errAs[E error](t *testing.T, err error) E {
	t.Helper()
	return testkit.ErrAs[E](t, err)
}

func wantPayments(t *testing.T, b bundle, reference string, n int) {
	t.Helper()
	if got := b.srv.Counts(reference); got.Payments != n {
		t.Fatalf("fake holds %+v for reference %q, want %d payments", got, reference, n)
	}
}

func TestProvider(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if b.p.Name() != "adyen" || b.p.DedupWindow() != 31*24*time.Hour || b.p.MaxReferenceLen() != 80 ||
		provider.MaxReferenceLen(b.p) != 80 {
		t.Fatalf("Name %q DedupWindow %v MaxReferenceLen %d", b.p.Name(), b.p.DedupWindow(), b.p.MaxReferenceLen())
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	ok := adyen.Config{APIKey: "k", MerchantAccount: "m", ReturnURL: "https://r.example"}
	for _, tc := range []struct {
		field string
		edit  func(c *adyen.Config)
	}{
		{"APIKey", func(c *adyen.Config) { c.APIKey = "" }},
		{"MerchantAccount", func(c *adyen.Config) { c.MerchantAccount = "" }},
		{"ReturnURL", func(c *adyen.Config) { c.ReturnURL = "" }},
		{"BaseURL", func(c *adyen.Config) { c.BaseURL = "checkout.example/v71" }},
		{"Retention", func(c *adyen.Config) { c.Retention = 7*24*time.Hour - time.Second }},
		{"Retention", func(c *adyen.Config) { c.Retention = -time.Hour }},
		{"HMACKeys[1]", func(c *adyen.Config) { c.HMACKeys = []string{"00ff", "not-hex"} }},
		{"HMACKeys[0]", func(c *adyen.Config) { c.HMACKeys = []string{""} }},
		{"CaptureMode", func(c *adyen.Config) { c.CaptureMode = "delayed" }},
	} {
		c := ok
		tc.edit(&c)
		_, err := adyen.New(&c)
		if ce := errAs[*adyen.ConfigError](t, err); ce.Field != tc.field || !strings.Contains(err.Error(), "Config."+tc.field) {
			t.Fatalf("%s: %v", tc.field, err)
		}
	}
	if _, err := adyen.New(nil); errAs[*adyen.ConfigError](t, err).Field != "APIKey" {
		t.Fatalf("nil config: %v", err)
	}
	c := ok
	c.Retention = 7 * 24 * time.Hour
	if p := must(adyen.New(&c))(t); p.DedupWindow() != 7*24*time.Hour {
		t.Fatalf("DedupWindow %v", p.DedupWindow())
	}
	if _, err := adyen.NewClient(&adyen.Config{APIKey: "k"}); errAs[*adyen.ConfigError](t, err).Field != "MerchantAccount" {
		t.Fatalf("NewClient: %v", err)
	}
}

func TestChargeSucceedsAndReplays(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	req := chargeReq("order-1", adyentest.PaymentMethodVisa)

	res := must(b.p.Charge(ctx, req))(t)
	if len(res.ProviderID) != 16 || res.Status != provider.ChargeSucceeded || !res.Amount.Equal(req.Amount) || res.Replayed {
		t.Fatalf("first charge: %+v", res)
	}
	again := must(b.p.Charge(ctx, req))(t)
	// Adyen sends no replay signal: Replayed stays false, the payment is the same.
	if again.ProviderID != res.ProviderID || again.Status != provider.ChargeSucceeded || again.Replayed {
		t.Fatalf("replay: %+v, first %+v", again, res)
	}
	wantPayments(t, b, req.ProviderKey, 1)
	if c := b.srv.CountsByIdempotencyKey(adyen.IdempotencyKey(req.ProviderKey)); c.Payments != 1 {
		t.Fatalf("by key: %+v", c)
	}
	if tot := b.srv.Totals()["EUR"]; tot.Authorised != 2000 || tot.Net != 2000 {
		t.Fatalf("totals %+v", tot)
	}
	b.wait(t)
	evs := b.inbox.byReference(req.ProviderKey)
	if len(evs) != 1 || evs[0].Kind != provider.EventChargeSucceeded || evs[0].Key != "" ||
		evs[0].ID != res.ProviderID+":AUTHORISATION:true" || !evs[0].Amount.Equal(req.Amount) {
		t.Fatalf("AUTHORISATION events: %+v", evs)
	}
}

func TestChargeRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ pm, reason string }{
		{adyentest.PaymentMethodDeclined, "Refused"},
		{adyentest.PaymentMethodInsufficientFunds, "Not enough balance"},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			req := chargeReq("order-refused", tc.pm)
			var ids []string
			for i := 0; i < 2; i++ {
				res, err := b.p.Charge(context.Background(), req)
				de := errAs[*provider.DeclineError](t, err)
				if de.DeclineCode != tc.reason || de.Code != "Refused" || de.Provider != "adyen" ||
					!strings.Contains(de.Message, res.ProviderID) || idempotency.SafeToRetry(err) {
					t.Fatalf("attempt %d: %+v (%+v)", i, de, res)
				}
				if res.Status != provider.ChargeFailed || res.ProviderID == "" {
					t.Fatalf("attempt %d: result %+v", i, res)
				}
				ids = append(ids, res.ProviderID)
			}
			if ids[0] != ids[1] {
				t.Fatalf("the replayed refusal names another payment: %v", ids)
			}
			wantPayments(t, b, req.ProviderKey, 1)
			b.wait(t)
			evs := b.inbox.byReference(req.ProviderKey)
			if len(evs) != 1 || evs[0].Kind != provider.EventChargeFailed || evs[0].DeclineCode != tc.reason {
				t.Fatalf("events %+v", evs)
			}
		})
	}
}

func TestChargeRequiresAction(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-3ds", adyentest.PaymentMethodAuthenticationRequired)
	res := must(b.p.Charge(context.Background(), req))(t)
	if res.Status != provider.ChargeRequiresAction || res.ProviderID == "" {
		t.Fatalf("%+v", res)
	}
	// No AUTHORISATION until the shopper is back; then Lookup sees it.
	if got := b.lookup(t, req); len(got.Charges) != 0 {
		t.Fatalf("lookup before authentication: %+v", got)
	}
	if err := b.srv.CompleteRedirect(res.ProviderID, true); err != nil {
		t.Fatal(err)
	}
	got := b.lookup(t, req)
	if len(got.Charges) != 1 || got.Charges[0].Status != provider.ChargeSucceeded || got.Charges[0].ProviderID != res.ProviderID {
		t.Fatalf("lookup after authentication: %+v", got)
	}
}

// stub serves one canned answer to every request.
func stub(t *testing.T, status int, header http.Header, body string) *adyen.Provider {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(hs.Close)
	return must(adyen.New(&adyen.Config{APIKey: "k", MerchantAccount: merchant, BaseURL: hs.URL, ReturnURL: "https://r.example",
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}))(t)
}

// Every resultCode, from stubs (the fake produces only some of them).
func TestChargeResultCodes(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]provider.ChargeStatus{
		"Authorised":       provider.ChargeSucceeded,
		"Pending":          provider.ChargePending,
		"Received":         provider.ChargePending,
		"RedirectShopper":  provider.ChargeRequiresAction,
		"ChallengeShopper": provider.ChargeRequiresAction,
		"IdentifyShopper":  provider.ChargeRequiresAction,
		"PresentToShopper": provider.ChargeRequiresAction,
		"Cancelled":        provider.ChargeFailed,
	} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			p := stub(t, 200, nil, `{"pspReference":"PSP0000000000001","resultCode":"`+code+`","amount":{"currency":"EUR","value":2000}}`)
			res := must(p.Charge(context.Background(), chargeReq("order-codes", "pm_x")))(t)
			if res.Status != want || res.ProviderID != "PSP0000000000001" || !res.Amount.Equal(eur("20.00")) || res.Replayed {
				t.Fatalf("%s: %+v, want %s", code, res, want)
			}
		})
	}
	for _, code := range []string{"Error", "PartiallyAuthorised", "AuthenticationFinished", ""} {
		t.Run("unknown "+code, func(t *testing.T) {
			t.Parallel()
			p := stub(t, 200, nil, `{"pspReference":"PSP0000000000002","resultCode":"`+code+`"}`)
			res, err := p.Charge(context.Background(), chargeReq("order-codes", "pm_x"))
			if ue := errAs[*provider.UnknownOutcomeError](t, err); !idempotency.SafeToRetry(err) || ue.Status != 200 || res.ProviderID != "PSP0000000000002" {
				t.Fatalf("%s: %+v %v", code, res, err)
			}
		})
	}
	t.Run("refused without reason", func(t *testing.T) {
		t.Parallel()
		p := stub(t, 200, nil, `{"pspReference":"PSP0000000000003","resultCode":"Refused"}`)
		_, err := p.Charge(context.Background(), chargeReq("order-codes", "pm_x"))
		if de := errAs[*provider.DeclineError](t, err); de.DeclineCode != "Refused" {
			t.Fatalf("%+v", de)
		}
	})
}

// HTTP errors, from stubs.
func TestErrorMapping(t *testing.T) {
	t.Parallel()
	transient := http.Header{"Transient-Error": {"true"}}
	for _, tc := range []struct {
		name   string
		status int
		header http.Header
		body   string
		check  func(t *testing.T, err error)
	}{
		{"in progress 409", 409, nil, `{"status":409,"errorCode":"704","message":"request already processed or in progress","errorType":"validation"}`,
			func(t *testing.T, err error) { errAs[*provider.InProgressError](t, err) }},
		{"in progress 422", 422, nil, `{"status":422,"errorCode":"704","message":"request already processed or in progress","errorType":"validation"}`,
			func(t *testing.T, err error) { errAs[*provider.InProgressError](t, err) }},
		{"validation", 422, nil, `{"status":422,"errorCode":"130","message":"Reference Missing","errorType":"validation"}`,
			func(t *testing.T, err error) {
				if ie := errAs[*provider.InvalidRequestError](t, err); ie.Code != "130" || ie.Message != "Reference Missing" || idempotency.SafeToRetry(err) {
					t.Fatalf("%+v", ie)
				}
			}},
		{"key mismatch", 422, nil, `{"status":422,"errorCode":"idempotency_key_reused","message":"other body","errorType":"validation"}`,
			func(t *testing.T, err error) { errAs[*provider.KeyMismatchError](t, err) }},
		{"unauthorized", 401, nil, `{"status":401,"errorCode":"000","message":"HTTP Status Response - Unauthorized","errorType":"security"}`,
			func(t *testing.T, err error) {
				if ce := errAs[*provider.CredentialsError](t, err); ce.Code != "000" || idempotency.SafeToRetry(err) {
					t.Fatalf("%+v", ce)
				}
			}},
		{"transient 503 703", 503, transient, `{"status":503,"errorCode":"703","message":"idempotency store unavailable","errorType":"internal"}`,
			testkit.UnknownOutcome(503)},
		{"transient 422", 422, transient, `{"status":422,"errorCode":"999","message":"try again","errorType":"validation"}`,
			testkit.UnknownOutcome(422)},
		{"rate limited", 429, nil, `{"status":429,"errorCode":"429","message":"slow down"}`,
			testkit.UnknownOutcome(429)},
		{"server error", 500, nil, `{"status":500,"errorCode":"905","message":"internal","errorType":"internal"}`,
			testkit.UnknownOutcome(500)},
		{"proxy page", 502, nil, `<html>bad gateway</html>`,
			testkit.UnknownOutcome(502)},
		{"garbled success", 200, nil, `{"pspReference":`,
			testkit.UnknownOutcome(200)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := stub(t, tc.status, tc.header, tc.body).Charge(context.Background(), chargeReq("order-err", "pm_x"))
			tc.check(t, err)
		})
	}
}

func TestInProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-inflight", adyentest.PaymentMethodVisa)
	b.srv.Inject(adyentest.Fault{Kind: adyentest.Latency, Delay: time.Hour, Path: "/payments"})
	done := make(chan error, 1)
	go func() {
		_, err := b.p.Charge(context.Background(), req)
		done <- err
	}()
	if err := b.srv.WaitHeld(testkit.Ctx(t), 1); err != nil { // the first holds the key
		t.Fatal(err)
	}
	_, err := b.p.Charge(context.Background(), req)
	if !errors.Is(err, provider.ErrInProgress) || !idempotency.SafeToRetry(err) {
		t.Fatalf("duplicate in flight: %v", err)
	}
	b.srv.EndLatency()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantPayments(t, b, req.ProviderKey, 1)
}

// FailBefore is Adyen's transient error: not cached, so the retry with the same key executes,
// and exactly one payment exists.
func TestTransientErrorRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-transient", adyentest.PaymentMethodVisa)
	b.srv.Inject(adyentest.Fault{Kind: adyentest.FailBefore, Path: "/payments"})
	_, err := b.p.Charge(context.Background(), req)
	if ue := errAs[*provider.UnknownOutcomeError](t, err); ue.Status != 500 || !idempotency.SafeToRetry(err) {
		t.Fatalf("%+v", ue)
	}
	var ae *adyen.APIError
	if !errors.As(err, &ae) || !ae.Transient {
		t.Fatalf("cause %v: want a transient APIError", err)
	}
	wantPayments(t, b, req.ProviderKey, 0)
	res := must(b.p.Charge(context.Background(), req))(t)
	if res.Status != provider.ChargeSucceeded {
		t.Fatalf("%+v", res)
	}
	must(b.p.Charge(context.Background(), req))(t)
	wantPayments(t, b, req.ProviderKey, 1)
}

// FailAfter: a non-transient 500 after the payment was made is final for the key: the retry
// replays the 500, and only the AUTHORISATION notification (Lookup) resolves it.
func TestFailAfterResolvedByLookup(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-failafter", adyentest.PaymentMethodVisa)
	b.srv.Inject(adyentest.Fault{Kind: adyentest.FailAfter, Path: "/payments"})
	for i := 0; i < 2; i++ {
		_, err := b.p.Charge(context.Background(), req)
		if ue := errAs[*provider.UnknownOutcomeError](t, err); ue.Status != 500 {
			t.Fatalf("attempt %d: %+v", i, ue)
		}
	}
	wantPayments(t, b, req.ProviderKey, 1)
	got := b.lookup(t, req)
	if got.Consistent || len(got.Charges) != 1 || got.Charges[0].Status != provider.ChargeSucceeded || !got.Charges[0].Amount.Equal(req.Amount) {
		t.Fatalf("lookup: %+v", got)
	}
}

func TestResetAfterAndTimeouts(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("order-reset", adyentest.PaymentMethodVisa)
	b.srv.Inject(adyentest.Fault{Kind: adyentest.ResetAfter, Path: "/payments"})
	_, err := b.p.Charge(context.Background(), req)
	if ue := errAs[*provider.UnknownOutcomeError](t, err); ue.Status != 0 || !idempotency.SafeToRetry(err) {
		t.Fatalf("%+v", ue)
	}
	wantPayments(t, b, req.ProviderKey, 1)
	res := must(b.p.Charge(context.Background(), req))(t)
	if res.Status != provider.ChargeSucceeded {
		t.Fatalf("%+v", res)
	}
	wantPayments(t, b, req.ProviderKey, 1)

	// A hang past the caller's deadline: written, so unknown. The deadline passes once the fake
	// holds the request, never before it was written.
	hung := chargeReq("order-hang", adyentest.PaymentMethodVisa)
	b.srv.Inject(adyentest.Fault{Kind: adyentest.Hang, Path: "/payments"})
	_, err = b.p.Charge(testkit.DeadlineWhenHeld(t, b.srv.WaitHeld), hung)
	errAs[*provider.UnknownOutcomeError](t, err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cause lost: %v", err)
	}
	wantPayments(t, b, hung.ProviderKey, 0)
}

func TestNotSent(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(http.NotFoundHandler())
	base := hs.URL
	hs.Close() // nothing listens there any more
	p := must(adyen.New(&adyen.Config{APIKey: "k", MerchantAccount: merchant, BaseURL: base, ReturnURL: "https://r.example"}))(t)
	_, err := p.Charge(context.Background(), chargeReq("order-notsent", "pm_x"))
	if ne := errAs[*provider.NotSentError](t, err); !idempotency.SafeToRetry(err) || ne.Provider != "adyen" {
		t.Fatalf("%+v", ne)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = p.Refund(ctx, provider.RefundRequest{Key: "k", ProviderKey: "k_refund_0", ChargeID: "PSP", Amount: eur("1.00")})
	errAs[*provider.NotSentError](t, err)
}

func TestBadInputs(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	good := chargeReq("order-bad", adyentest.PaymentMethodVisa)
	many := map[string]string{}
	for i := range 20 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, tc := range []struct {
		param string
		edit  func(r *provider.ChargeRequest)
	}{
		{"Key", func(r *provider.ChargeRequest) { r.Key = "" }},
		{"ProviderKey", func(r *provider.ChargeRequest) { r.ProviderKey = "" }},
		{"ProviderKey", func(r *provider.ChargeRequest) { r.ProviderKey = strings.Repeat("r", 81) }},
		{"Amount", func(r *provider.ChargeRequest) { r.Amount = money.Money{} }},
		{"Amount", func(r *provider.ChargeRequest) { r.Amount = eur("0.00") }},
		{"PaymentMethod", func(r *provider.ChargeRequest) { r.PaymentMethod = "" }},
		{"Metadata[payonce_key]", func(r *provider.ChargeRequest) { r.Metadata = map[string]string{"payonce_key": "x"} }},
		{"Metadata[a_key_over_twenty_chars]", func(r *provider.ChargeRequest) { r.Metadata = map[string]string{"a_key_over_twenty_chars": "x"} }},
		{"Metadata[long]", func(r *provider.ChargeRequest) { r.Metadata = map[string]string{"long": strings.Repeat("v", 81)} }},
		{"Metadata", func(r *provider.ChargeRequest) { r.Metadata = map[string]string{"": "x"} }},
		{"Metadata", func(r *provider.ChargeRequest) { r.Metadata = many }},
	} {
		r := good
		tc.edit(&r)
		_, err := b.p.Charge(ctx, r)
		if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != tc.param || !strings.Contains(ie.Message, tc.param) {
			t.Fatalf("%s: %+v", tc.param, ie)
		}
	}
	for _, tc := range []struct {
		param string
		req   provider.RefundRequest
	}{
		{"Key", provider.RefundRequest{ProviderKey: "x", ChargeID: "P", Amount: eur("1.00")}},
		{"ProviderKey", provider.RefundRequest{Key: "x", ChargeID: "P", Amount: eur("1.00")}},
		{"ChargeID", provider.RefundRequest{Key: "x", ProviderKey: "x_refund_0", Amount: eur("1.00")}},
		{"Amount", provider.RefundRequest{Key: "x", ProviderKey: "x_refund_0", ChargeID: "P"}},
	} {
		_, err := b.p.Refund(ctx, tc.req)
		if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != tc.param {
			t.Fatalf("refund %s: %+v", tc.param, ie)
		}
	}
	_, err := b.p.Lookup(ctx, provider.LookupRequest{Key: "x"})
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Param != "ProviderKey" {
		t.Fatalf("lookup: %+v", ie)
	}
	// The fake's own validation (an unknown card) is final too.
	_, err = b.p.Charge(ctx, chargeReq("order-unknown-card", "pm_card_unknown"))
	if ie := errAs[*provider.InvalidRequestError](t, err); ie.Code != "invalid_payment_method" || idempotency.SafeToRetry(err) {
		t.Fatalf("%+v", ie)
	}
	// Nothing reached the fake for the refused requests.
	if c := b.srv.Counts(good.ProviderKey); c != (adyentest.Counts{}) {
		t.Fatalf("counts %+v", c)
	}
	p := must(adyen.New(&adyen.Config{APIKey: "k", MerchantAccount: "m", ReturnURL: "https://r.example"}))(t)
	if _, err := p.Lookup(ctx, provider.LookupRequest{Key: "x", ProviderKey: "x"}); !errors.Is(err, adyen.ErrNoNotificationSource) {
		t.Fatalf("lookup without a source: %v", err)
	}
	if _, err := p.VerifyWebhook(ctx, nil, []byte(`{}`)); !errors.Is(err, adyen.ErrNoHMACKey) {
		t.Fatalf("verify without a key: %v", err)
	}
}

func TestLongReferences(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	key := "usr_" + strings.Repeat("x", 120) + "_createOrder_" + strings.Repeat("a1b2", 10)
	req := chargeReq(key, adyentest.PaymentMethodVisa)
	req.Metadata = nil
	if n := utf8.RuneCountInString(req.ProviderKey); n != 80 {
		t.Fatalf("ProviderKey %q has %d characters, want 80 (compacted)", req.ProviderKey, n)
	}
	ik := adyen.IdempotencyKey(req.ProviderKey)
	if len(ik) != 64 || ik != adyen.IdempotencyKey(req.ProviderKey) || !strings.HasPrefix(ik, req.ProviderKey[:11]+"_") {
		t.Fatalf("IdempotencyKey %q", ik)
	}
	other := provider.DeriveKey(key, "charge", 1, 80)
	if adyen.IdempotencyKey(other) == ik {
		t.Fatal("attempt 1 derives the same Idempotency-Key as attempt 0")
	}
	if short := "usr_1_charge_order42_charge_0"; adyen.IdempotencyKey(short) != short {
		t.Fatal("a short reference is its own key")
	}
	if k := adyen.IdempotencyKey(strings.Repeat("é", 40)); !utf8.ValidString(k) || len(k) > 64 {
		t.Fatalf("multibyte reference: %q", k)
	}

	res := must(b.p.Charge(context.Background(), req))(t)
	must(b.p.Charge(context.Background(), req))(t)
	wantPayments(t, b, req.ProviderKey, 1)
	if c := b.srv.CountsByIdempotencyKey(ik); c.Payments != 1 {
		t.Fatalf("by key: %+v", c)
	}
	// The local key is over 80 characters: not in the metadata; the reference is the link.
	b.wait(t)
	evs := b.inbox.byReference(req.ProviderKey)
	if len(evs) != 1 || evs[0].Key != "" || evs[0].ProviderID != res.ProviderID {
		t.Fatalf("events %+v", evs)
	}
}

// TestConformance runs providertest.Exercise. Adyen has no replay signal:
// the replay check asserts the same payment and one charge instead.
func TestConformance(t *testing.T) {
	providertest.Exercise(t, func(t *testing.T) providertest.Harness {
		b := setup(t, nil)
		return providertest.Harness{
			Provider:       b.p,
			NoReplaySignal: true,
			Succeeds:       adyentest.PaymentMethodVisa,
			Declines:       adyentest.PaymentMethodDeclined,
			Charges: func(key string) int {
				return b.srv.Counts(provider.DeriveKey(key, "charge", 0, provider.MaxReferenceLen(b.p))).Payments
			},
			LoseNextResponse: func() {
				b.srv.Inject(adyentest.Fault{Kind: adyentest.ResetAfter, Path: "/payments"})
			},
			HoldNext: func() (func(context.Context) error, func()) {
				b.srv.Inject(adyentest.Fault{Kind: adyentest.Latency, Delay: time.Hour})
				return func(ctx context.Context) error { return b.srv.WaitHeld(ctx, 1) }, b.srv.EndLatency
			},
			Webhook: func(t *testing.T) (good, bad error) {
				must(b.p.Charge(context.Background(), chargeReq("order-wh", adyentest.PaymentMethodVisa)))(t)
				b.wait(t)
				b.inbox.mu.Lock()
				payload := b.inbox.payloads[0]
				b.inbox.mu.Unlock()
				_, good = b.p.VerifyWebhook(context.Background(), nil, payload)
				_, bad = verifier(t, oldKey).VerifyWebhook(context.Background(), nil, payload)
				return good, bad
			},
		}
	})
}
