package paypal_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/testkit"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
)

func TestTokenIsCached(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for i := range 3 {
		must(b.p.Charge(ctxT(t), chargeReq(fmt.Sprintf("cached-%d", i), paypaltest.PaymentMethodVisa)))(t)
	}
	if n := b.srv.TokenRequests(); n != 1 {
		t.Fatalf("%d token requests for 3 charges, want 1", n)
	}
}

func TestTokenRefreshedBeforeExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t, &paypaltest.Config{TokenLifetime: time.Hour})
	charged(t, b, "early-1")
	b.clock.Advance(50 * time.Minute)
	charged(t, b, "early-2")
	if n := b.srv.TokenRequests(); n != 1 {
		t.Fatalf("%d token requests with 10 minutes left, want 1", n)
	}
	// 3 minutes left: still valid at the fake, but inside the refresh margin.
	b.clock.Advance(7 * time.Minute)
	charged(t, b, "early-3")
	if n := b.srv.TokenRequests(); n != 2 {
		t.Fatalf("%d token requests, want a refresh before expiry", n)
	}
}

func TestTokenRefreshedOnceOn401(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	charged(t, b, "revoked-1")
	b.srv.RevokeTokens()
	// Concurrent callers that all see 401 share one refresh.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.p.Charge(ctxT(t), chargeReq(fmt.Sprintf("revoked-%d", i+2), paypaltest.PaymentMethodVisa))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := b.srv.TokenRequests(); n != 2 {
		t.Fatalf("%d token requests, want 2 (one refresh after the revocation)", n)
	}
}

func TestConcurrentFirstCallsShareOneToken(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.Inject(paypaltest.Fault{Kind: paypaltest.Latency, Delay: 100 * time.Millisecond, Path: "/v1/oauth2/token"})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.p.Lookup(ctxT(t), provider.LookupRequest{ProviderID: fmt.Sprintf("ORDNONE%d", i)})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := b.srv.TokenRequests(); n != 1 {
		t.Fatalf("%d token requests, want 1", n)
	}
}

// A server that refuses every token: the adapter resends once after a refresh, then gives up.
func TestPersistent401IsRefusedCredentials(t *testing.T) {
	t.Parallel()
	var tokens, calls atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/oauth2/token" {
			tokens.Add(1)
			fmt.Fprintf(w, `{"access_token":"tok%d","token_type":"Bearer","expires_in":32400}`, tokens.Load())
			return
		}
		calls.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"name":"AUTHENTICATION_FAILURE","message":"Authentication failed"}`)
	}))
	defer ts.Close()
	p := stubProvider(t, ts.URL)
	_, err := p.Charge(ctxT(t), chargeReq("401", "pm_card_visa"))
	ce := errAs[*provider.CredentialsError](t, err)
	if ce.Code != "AUTHENTICATION_FAILURE" || !strings.Contains(ce.Setting, "Config.ClientID") || idempotency.SafeToRetry(err) ||
		errors.Is(err, provider.ErrInvalidRequest) {
		t.Fatalf("%+v", ce)
	}
	if tokens.Load() != 2 || calls.Load() != 2 {
		t.Fatalf("%d token requests and %d calls, want 2 and 2", tokens.Load(), calls.Load())
	}
}

func TestWrongCredentials(t *testing.T) {
	t.Parallel()
	srv := paypaltest.NewServer(nil)
	defer srv.Close()
	p := must(paypal.New(&paypal.Config{ClientID: paypaltest.DefaultClientID, Secret: "wrong", BaseURL: srv.URL()}))(t)
	_, err := p.Charge(ctxT(t), chargeReq("creds", paypaltest.PaymentMethodVisa))
	ce := errAs[*provider.CredentialsError](t, err)
	if ce.Code != "invalid_client" || !strings.Contains(ce.Setting, "Config.Secret") || !strings.Contains(err.Error(), "check the API key") {
		t.Fatalf("%+v", ce)
	}
}

func stubProvider(t *testing.T, url string) *paypal.Provider {
	t.Helper()
	return must(paypal.New(&paypal.Config{ClientID: "id", Secret: "s", BaseURL: url, WebhookID: "WH-1",
		HTTPClient: &http.Client{Timeout: testkit.Patience, Transport: &http.Transport{DisableKeepAlives: true}}}))(t)
}

// Answers the fake does not produce, from a stub server; the token endpoint works.
func TestStatusMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   string
		check  func(t *testing.T, err error)
	}{
		{"in progress", http.StatusConflict,
			`{"name":"RESOURCE_CONFLICT","details":[{"issue":"PREVIOUS_REQUEST_IN_PROGRESS"}]}`,
			func(t *testing.T, err error) { errAs[*provider.InProgressError](t, err) }},
		{"rate limited", http.StatusTooManyRequests, `{"name":"RATE_LIMIT_REACHED"}`,
			testkit.UnknownOutcome(429)},
		{"service unavailable", http.StatusServiceUnavailable, `{"name":"SERVICE_UNAVAILABLE"}`,
			testkit.UnknownOutcome(503)},
		{"proxy error page", http.StatusBadGateway, `<html>bad gateway</html>`,
			testkit.UnknownOutcome(http.StatusBadGateway)},
		{"garbled success", http.StatusCreated, `{"id":`,
			testkit.UnknownOutcome(http.StatusCreated)},
		// 403 NOT_AUTHORIZED, "Authorization failed due to insufficient
		// permissions": a configuration error, never a refusal of the payment.
		{"not authorized", http.StatusForbidden,
			`{"name":"NOT_AUTHORIZED","message":"Authorization failed due to insufficient permissions.","debug_id":"d1",` +
				`"details":[{"issue":"PERMISSION_DENIED"}]}`,
			func(t *testing.T, err error) {
				ce := errAs[*provider.CredentialsError](t, err)
				if ce.Status != 403 || ce.Code != "PERMISSION_DENIED" || errors.Is(err, provider.ErrInvalidRequest) || idempotency.SafeToRetry(err) ||
					!strings.Contains(err.Error(), "check the API key") {
					t.Fatalf("%v", err)
				}
			}},
		// PayPal marks no replayed error: no refusal claims to be one.
		{"not found", http.StatusNotFound,
			`{"name":"RESOURCE_NOT_FOUND","message":"The specified resource does not exist.","details":[{"issue":"INVALID_RESOURCE_ID"}]}`,
			func(t *testing.T, err error) {
				if ie := errAs[*provider.InvalidRequestError](t, err); ie.Code != "INVALID_RESOURCE_ID" || ie.Replayed {
					t.Fatalf("%+v", ie)
				}
			}},
		{"instrument declined", http.StatusUnprocessableEntity,
			`{"name":"UNPROCESSABLE_ENTITY","details":[{"issue":"INSTRUMENT_DECLINED"}]}`,
			func(t *testing.T, err error) {
				if de := errAs[*provider.DeclineError](t, err); de.DeclineCode != "INSTRUMENT_DECLINED" {
					t.Fatalf("%+v", de)
				}
			}},
		{"validation", http.StatusBadRequest,
			`{"name":"INVALID_REQUEST","details":[{"field":"/purchase_units/0/amount/value","issue":"DECIMAL_PRECISION"}]}`,
			func(t *testing.T, err error) {
				if ie := errAs[*provider.InvalidRequestError](t, err); ie.Code != "DECIMAL_PRECISION" || ie.Param != "/purchase_units/0/amount/value" {
					t.Fatalf("%+v", ie)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1/oauth2/token" {
					fmt.Fprint(w, `{"access_token":"tok","token_type":"Bearer","expires_in":32400}`)
					return
				}
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			}))
			defer ts.Close()
			_, err := stubProvider(t, ts.URL).Charge(ctxT(t), chargeReq("stub", "pm_card_visa"))
			tc.check(t, err)
		})
	}
}

func TestNotSent(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.NotFoundHandler())
	url := ts.URL
	ts.Close() // nothing listens there now
	_, err := stubProvider(t, url).Charge(ctxT(t), chargeReq("nowhere", "pm_card_visa"))
	if !errAs[*provider.NotSentError](t, err).Is(provider.ErrNotSent) || !idempotency.SafeToRetry(err) {
		t.Fatal(err)
	}

	// A token endpoint failing with 500: the charge itself never left.
	srv := paypaltest.NewServer(nil)
	defer srv.Close()
	srv.Inject(paypaltest.Fault{Kind: paypaltest.FailBefore, Path: "/v1/oauth2/token"})
	p := must(paypal.New(&paypal.Config{ClientID: paypaltest.DefaultClientID, Secret: paypaltest.DefaultSecret, BaseURL: srv.URL()}))(t)
	req := chargeReq("token-500", paypaltest.PaymentMethodVisa)
	_, err = p.Charge(ctxT(t), req)
	errAs[*provider.NotSentError](t, err)
	if c := srv.CountsByCustomID(req.ProviderKey); c.Orders != 0 {
		t.Fatalf("%+v", c)
	}
}

func TestHangIsUnknownAfterTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req := chargeReq("hang", paypaltest.PaymentMethodVisa)
	must(b.p.Lookup(ctxT(t), provider.LookupRequest{ProviderID: "ORDWARM"}))(t) // a token first
	b.srv.Inject(paypaltest.Fault{Kind: paypaltest.Hang, Path: "/v2/checkout/orders"})
	// The deadline passes once the fake holds the request, never before it was written.
	_, err := b.p.Charge(testkit.DeadlineWhenHeld(t, b.srv.WaitHeld), req)
	if !payments.OutcomeUnknown(err) {
		t.Fatalf("err = %v, want unknown (the request was written)", err)
	}
	// The fake frees the request id once it notices the client left: until then, in progress.
	var res provider.ChargeResult
	for deadline := time.Now().Add(testkit.Patience); ; time.Sleep(10 * time.Millisecond) {
		res, err = b.p.Charge(ctxT(t), req)
		if !errors.Is(err, provider.ErrInProgress) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || res.Status != provider.ChargeSucceeded {
		t.Fatalf("%+v %v", res, err)
	}
	wantCaptured(t, b, req.ProviderKey)
}
