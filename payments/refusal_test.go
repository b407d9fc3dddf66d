package payments_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers/adyen"
	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/fakes"
	"github.com/payonce/payonce/providers/paypal"
	"github.com/payonce/payonce/providers/paypal/paypaltest"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// A refusal of a resumed attempt (a retry re-sending the references of an
// attempt whose answer was lost) proves nothing about that attempt: the
// first send may have charged. Whatever the provider refuses the retry
// with, the intent stays open, no record answers FAILED, and the next
// retry the provider answers normally gets the original charge. Refused
// credentials are never final, on a first attempt either.

var refusalProviders = []string{"stripe", "adyen", "paypal"}

// refuser stands between an adapter and its fake: while armed with a
// status, it answers every money-moving request itself with the
// provider's documented error body for that status (the fakes produce
// only some of these answers), as the provider's edge would before
// looking at the request. Other requests (PayPal's token, reads) pass.
type refuser struct {
	next http.RoundTripper

	mu      sync.Mutex
	status  int
	refused int
}

func (r *refuser) arm(status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status = status
}

// count is how many requests it refused.
func (r *refuser) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

func (r *refuser) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	status := r.status
	if status != 0 && movesMoney(req) {
		r.refused++
	}
	r.mu.Unlock()
	if status == 0 || !movesMoney(req) {
		return r.next.RoundTrip(req)
	}
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	body := refusalBody(req.URL.Path, status)
	return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: req, ContentLength: int64(len(body)),
		Header: http.Header{"Content-Type": {"application/json"}, "Request-Id": {"req_refused"}},
		Body:   io.NopCloser(strings.NewReader(body))}, nil
}

// movesMoney: Stripe's PaymentIntent create and refund, Adyen's payment
// and its refund, PayPal's order create (captured on creation with a
// vaulted card), capture and refund.
func movesMoney(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	p := r.URL.Path
	return p == "/v1/payment_intents" || p == "/v1/refunds" || p == "/v2/checkout/orders" ||
		strings.HasSuffix(p, "/payments") || strings.HasSuffix(p, "/refunds") ||
		strings.HasSuffix(p, "/capture") || strings.HasSuffix(p, "/refund")
}

// refusalBody is the provider's error body for status, in its documented
// shape: Stripe's {"error":{type,code,message}}
// (https://docs.stripe.com/api/errors; 409 idempotency_key_in_use,
// https://docs.stripe.com/error-codes), Adyen's {status, errorCode,
// message, errorType} (https://docs.adyen.com/development-resources/error-codes;
// 704 for a key in progress,
// https://docs.adyen.com/development-resources/api-idempotency), PayPal's
// {name, message, debug_id, details[].issue}
// (https://developer.paypal.com/api/rest/responses/).
func refusalBody(path string, status int) string {
	switch {
	case strings.HasPrefix(path, "/v1/"): // Stripe
		e := map[int][2]string{
			401: {"", "Invalid API Key provided: sk_live_****olled"},
			403: {"", "The provided key 'rk_live_****1234' does not have the required permissions for this endpoint."},
			404: {"resource_missing", "No such PaymentMethod: 'pm_card_visa'"},
			409: {"idempotency_key_in_use", "There is currently another in-progress request using this Idempotent Key."},
			429: {"rate_limit", "Too many requests hit the API too quickly."},
			400: {"parameter_invalid_empty", "You passed an empty string for 'description'."},
		}[status]
		return fmt.Sprintf(`{"error":{"type":"invalid_request_error","code":%q,"message":%q}}`, e[0], e[1])
	case strings.HasPrefix(path, "/v2/"): // PayPal
		e := map[int][3]string{
			401: {"AUTHENTICATION_FAILURE", "Authentication failed due to invalid authentication credentials or a missing Authorization header.", ""},
			403: {"NOT_AUTHORIZED", "Authorization failed due to insufficient permissions.", "PERMISSION_DENIED"},
			404: {"RESOURCE_NOT_FOUND", "The specified resource does not exist.", "INVALID_RESOURCE_ID"},
			409: {"RESOURCE_CONFLICT", "The server has detected a conflict while processing this request.", "PREVIOUS_REQUEST_IN_PROGRESS"},
			429: {"RATE_LIMIT_REACHED", "Too many requests. Blocked due to rate limiting.", ""},
			400: {"INVALID_REQUEST", "Request is not well-formed, syntactically incorrect, or violates schema.", "MISSING_REQUIRED_PARAMETER"},
		}[status]
		details := ""
		if e[2] != "" {
			details = fmt.Sprintf(`,"details":[{"issue":%q}]`, e[2])
		}
		return fmt.Sprintf(`{"name":%q,"message":%q,"debug_id":"f00refused"%s}`, e[0], e[1], details)
	default: // Adyen
		e := map[int][3]string{
			401: {"000", "HTTP Status Response - Unauthorized", "security"},
			403: {"010", "Not allowed", "security"},
			404: {"000", "HTTP Status Response - Not Found", "validation"},
			409: {"704", "request already processed or in progress", "validation"},
			429: {"429", "Too many requests", "validation"},
			400: {"702", "Structure of the request is invalid", "validation"},
		}[status]
		return fmt.Sprintf(`{"status":%d,"errorCode":%q,"message":%q,"errorType":%q}`, status, e[0], e[1], e[2])
	}
}

// refusalRig is one provider's fake, an adapter on it behind a refuser,
// and a payments client.
type refusalRig struct {
	provider string
	pool     *pgxpool.Pool
	fakes    *fakes.Set
	gate     *refuser
	client   *payments.Client
}

func newRefusalRig(t *testing.T, provider string) refusalRig {
	t.Helper()
	pool := pgtest.Pool(t)
	var s *fakes.Set
	if provider == "stripe" {
		s = &fakes.Set{Stripe: stripetest.NewServer(nil)}
		t.Cleanup(s.Close)
	} else {
		s = pvFakes(t, provider, "", 0)
	}
	gate := &refuser{next: &http.Transport{DisableKeepAlives: true}}
	c, _ := pvClient(t, pool, refusalProvider(t, provider, s, noKeepAliveClient(gate), ""), 2*time.Second)
	return refusalRig{provider: provider, pool: pool, fakes: s, gate: gate, client: c}
}

// refusalProvider is provider's adapter on its fake in s, with the fake's
// credentials, or with the key (secret) rolled when rolled is set.
func refusalProvider(t *testing.T, provider string, s *fakes.Set, hc *http.Client, rolled string) provider.Provider {
	t.Helper()
	switch provider {
	case "stripe":
		key := fakes.StripeSecretKey
		if rolled != "" {
			key = rolled
		}
		p, err := paystripe.New(&paystripe.Config{SecretKey: key, BaseURL: s.Stripe.URL(), HTTPClient: hc})
		if err != nil {
			t.Fatal(err)
		}
		return p
	case "adyen":
		if rolled == "" {
			return pvProvider(t, provider, s.Adyen.URL(), hc)
		}
		p, err := adyen.New(&adyen.Config{APIKey: rolled, MerchantAccount: fakes.AdyenMerchantAccount,
			BaseURL: s.Adyen.URL(), HTTPClient: hc, ReturnURL: "https://shop.example/return", HMACKeys: []string{fakes.AdyenHMACKey}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if rolled == "" {
		return pvProvider(t, provider, s.PayPal.URL(), hc)
	}
	p, err := paypal.New(&paypal.Config{ClientID: fakes.PayPalClientID, Secret: rolled, BaseURL: s.PayPal.URL(),
		HTTPClient: hc, WebhookID: fakes.PayPalWebhookID})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// loseNext has the fake execute the next charge (step
// provider.StepCharge) or refund and lose its answer.
func (r refusalRig) loseNext(step string) {
	charge := step == provider.StepCharge
	switch r.provider {
	case "stripe":
		path := "/v1/refunds"
		if charge {
			path = "/v1/payment_intents"
		}
		r.fakes.Stripe.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: path})
	case "adyen":
		path := "/payments/*/refunds"
		if charge {
			path = "/payments"
		}
		r.fakes.Adyen.Inject(adyentest.Fault{Kind: adyentest.ResetAfter, Path: path})
	default:
		path := "/v2/payments/captures/*/refund"
		if charge {
			path = "/v2/checkout/orders"
		}
		r.fakes.PayPal.Inject(paypaltest.Fault{Kind: paypaltest.ResetAfter, Method: "POST", Path: path})
	}
}

func (r refusalRig) params(t *testing.T, key string) payments.ChargeParams {
	p := pvParams(t, r.provider, key, "12.34")
	p.Metadata = map[string]string{"order": key}
	return p
}

// recordStatus is the idempotency record's status for a composed key.
func recordStatus(t *testing.T, pool *pgxpool.Pool, key string) string {
	t.Helper()
	var st string
	if err := pool.QueryRow(context.Background(), `SELECT status FROM idempotency_store WHERE idempotency_key = $1 AND user_id = 'cus_1'`,
		key).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// wantOpen fails unless err is not final for the key: the intent (charge
// or refund) is UNKNOWN and its record is not FAILED.
func wantOpen(t *testing.T, r refusalRig, action, key string, err error) {
	t.Helper()
	if err == nil || errors.Is(err, provider.ErrInvalidRequest) || errors.Is(err, provider.ErrDeclined) {
		t.Fatalf("answer %v: a refusal of this send was taken as final", err)
	}
	noFullKey(t, err, composed(t, action, key))
	read := r.client.Intent
	if action == "refund" {
		read = r.client.RefundIntent
	}
	in, ierr := read(context.Background(), "cus_1", key)
	if ierr != nil || in.Status != payments.IntentUnknown {
		t.Fatalf("%s intent after %v: %+v %v, want UNKNOWN", action, err, in, ierr)
	}
	if st := recordStatus(t, r.pool, composed(t, action, key)); st == string(idempotency.StatusFailed) {
		t.Fatalf("the %s's record is %s after %v", action, st, err)
	}
}

// wantClass checks the error a refusal of status gives: refused
// credentials for 401 and 403 (saying to check the key), an unknown
// outcome for the rest, 409 being the provider still processing the key.
func wantClass(t *testing.T, status int, err error) {
	t.Helper()
	switch status {
	case 401, 403:
		var ce *provider.CredentialsError
		if !errors.As(err, &ce) || ce.Status != status || idempotency.SafeToRetry(err) ||
			!strings.Contains(err.Error(), "refused our credentials: check the API key") {
			t.Fatalf("%d: %v, want the configuration error", status, err)
		}
	case 409:
		if !errors.Is(err, provider.ErrInProgress) || !idempotency.SafeToRetry(err) {
			t.Fatalf("409: %v, want in progress", err)
		}
	default:
		if !payments.OutcomeUnknown(err) || !idempotency.SafeToRetry(err) {
			t.Fatalf("%d: %v, want an unknown outcome", status, err)
		}
	}
}

func TestResumedChargeRefusedStaysOpen(t *testing.T) {
	t.Parallel()
	for _, provName := range refusalProviders {
		for _, status := range []int{401, 403, 404, 409, 429, 400} {
			t.Run(fmt.Sprintf("%s/%d", provName, status), func(t *testing.T) {
				t.Parallel()
				r := newRefusalRig(t, provName)
				ctx := context.Background()
				p := r.params(t, "lost")
				k := composed(t, "charge", p.Key)

				r.loseNext(provider.StepCharge)
				if _, err := r.client.Charge(ctx, p); !payments.OutcomeUnknown(err) {
					t.Fatalf("first attempt: %v, want its answer lost", err)
				}
				if n := r.fakes.Charges(provName, k); n != 1 {
					t.Fatalf("%d charges at the provider after the first attempt, want 1 (it charged)", n)
				}

				r.gate.arm(status)
				for i := range 2 { // twice: the first refusal recorded nothing a retry would replay
					_, err := r.client.Charge(ctx, p)
					wantOpen(t, r, "charge", p.Key, err)
					wantClass(t, status, err)
					if i == 0 && status == 404 && !errors.As(err, new(*payments.RefusedRetryError)) {
						t.Fatalf("404: %v, want a *RefusedRetryError", err)
					}
				}
				if r.gate.count() == 0 {
					t.Fatal("no retry reached the provider's edge")
				}

				r.gate.arm(0)
				out, err := r.client.Charge(ctx, p)
				if err != nil || out.Status != payments.IntentSucceeded || out.Replayed {
					t.Fatalf("retry once the provider answers: %+v %v, want the original charge", out, err)
				}
				pvCheckOneCharge(t, r.pool, r.client, r.fakes, provName, p.Key, out.ProviderID, 1234)
			})
		}
	}
}

// A refund's resumed attempt refused: the refund stays open with its
// reservation, and the next retry gets the original refund.
func TestResumedRefundRefusedStaysOpen(t *testing.T) {
	t.Parallel()
	for _, provName := range refusalProviders {
		for _, status := range []int{403, 404, 400} {
			t.Run(fmt.Sprintf("%s/%d", provName, status), func(t *testing.T) {
				t.Parallel()
				r := newRefusalRig(t, provName)
				ctx := context.Background()
				if _, err := r.client.Charge(ctx, r.params(t, "c1")); err != nil {
					t.Fatal(err)
				}
				rp := payments.RefundParams{Scope: "cus_1", Key: "r1", ChargeKey: "c1", Amount: pvEUR(t, "4.00")}
				rk := composed(t, "refund", "r1")
				r.loseNext(provider.StepRefund)
				if _, err := r.client.Refund(ctx, rp); !payments.OutcomeUnknown(err) {
					t.Fatalf("first attempt: %v, want its answer lost", err)
				}
				if n := r.fakes.Refunds(provName, rk); n != 1 {
					t.Fatalf("%d refunds at the provider after the first attempt, want 1", n)
				}

				r.gate.arm(status)
				_, err := r.client.Refund(ctx, rp)
				wantOpen(t, r, "refund", "r1", err)
				wantClass(t, status, err)
				// The reservation holds: the rest of the charge can be
				// refunded, not more.
				over := payments.RefundParams{Scope: "cus_1", Key: "r2", ChargeKey: "c1", Amount: pvEUR(t, "8.35")}
				if _, err := r.client.Refund(ctx, over); !errors.Is(err, provider.ErrRefundExceedsCharge) {
					t.Fatalf("a refund beyond what the open one left: %v, want refund_exceeds_charge", err)
				}

				r.gate.arm(0)
				out, err := r.client.Refund(ctx, rp)
				want := payments.IntentSucceeded
				if provName == "adyen" { // acknowledged: the REFUND notification decides
					want = payments.IntentPending
				}
				if err != nil || out.Status != want || out.ProviderID == "" {
					t.Fatalf("retry once the provider answers: %+v %v, want %s", out, err, want)
				}
				if n := r.fakes.Refunds(provName, rk); n != 1 {
					t.Fatalf("%d refunds at the provider, want 1", n)
				}
			})
		}
	}
}

// Refused credentials on a first attempt: nothing was charged, the
// intent stays open, the error says to check the key, and once the key is
// fixed a retry with the same key charges, once. Each fake refuses the
// rolled key itself.
func TestFirstAttemptCredentialsRefused(t *testing.T) {
	t.Parallel()
	rolled := map[string]string{"stripe": "sk_live_rolled", "adyen": "AQE_rolled_key", "paypal": "rolled-secret"}
	for _, provName := range refusalProviders {
		t.Run(provName, func(t *testing.T) {
			t.Parallel()
			r := newRefusalRig(t, provName)
			ctx := context.Background()
			stale, _ := pvClient(t, r.pool, refusalProvider(t, provName, r.fakes, noKeepAliveClient(nil), rolled[provName]), 2*time.Second)
			p := r.params(t, "creds")
			k := composed(t, "charge", p.Key)

			_, err := stale.Charge(ctx, p)
			var ce *provider.CredentialsError
			if !errors.As(err, &ce) || ce.Status != http.StatusUnauthorized || errors.Is(err, provider.ErrInvalidRequest) ||
				!strings.Contains(err.Error(), "refused our credentials: check the API key") {
				t.Fatalf("a charge with a rolled key: %v, want the configuration error", err)
			}
			noFullKey(t, err, k)
			in, ierr := stale.Intent(ctx, "cus_1", p.Key)
			if ierr != nil || (in.Status != payments.IntentUnknown && in.Status != payments.IntentPending) {
				t.Fatalf("intent after refused credentials: %+v %v, want it open", in, ierr)
			}
			if st := recordStatus(t, r.pool, k); st == string(idempotency.StatusFailed) {
				t.Fatalf("record %s after refused credentials", st)
			}
			if n := r.fakes.Charges(provName, k); n != 0 {
				t.Fatalf("%d charges at the provider, want none", n)
			}

			out, err := r.client.Charge(ctx, p) // the key fixed
			if err != nil || out.Status != payments.IntentSucceeded || out.Replayed {
				t.Fatalf("retry with the fixed key: %+v %v", out, err)
			}
			pvCheckOneCharge(t, r.pool, r.client, r.fakes, provName, p.Key, out.ProviderID, 1234)
		})
	}
}

// What Stripe replays to a resumed attempt is the attempt's own answer,
// and final: a decline, or a refusal the first send got after it began
// executing (Idempotent-Replayed: true).
func TestResumedAttemptReplayedRefusalIsFinal(t *testing.T) {
	t.Parallel()
	r := newRefusalRig(t, "stripe")
	ctx := context.Background()

	declined := r.params(t, "declined")
	declined.PaymentMethod = stripetest.PaymentMethodDeclined
	r.loseNext(provider.StepCharge)
	if _, err := r.client.Charge(ctx, declined); !payments.OutcomeUnknown(err) {
		t.Fatalf("first attempt: %v, want its answer lost", err)
	}
	if _, err := r.client.Charge(ctx, declined); !errors.Is(err, provider.ErrDeclined) {
		t.Fatalf("retry: %v, want Stripe's replayed decline", err)
	}
	if in, err := r.client.Intent(ctx, "cus_1", "declined"); err != nil || in.Status != payments.IntentDeclined {
		t.Fatalf("intent %+v %v, want DECLINED", in, err)
	}

	// A refund the first send had refused at execution (the charge was
	// refunded in full at Stripe meanwhile): the replayed refusal settles
	// it and gives its reservation back.
	ch, err := r.client.Charge(ctx, r.params(t, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	oob := refusalProvider(t, "stripe", r.fakes, noKeepAliveClient(nil), "")
	if _, err := oob.Refund(ctx, provider.RefundRequest{Key: "dashboard", ProviderKey: "dashboard_refund", ChargeID: ch.ProviderID,
		Amount: pvEUR(t, "12.34")}); err != nil {
		t.Fatal(err)
	}
	rp := payments.RefundParams{Scope: "cus_1", Key: "r1", ChargeKey: "c1", Amount: pvEUR(t, "4.00")}
	r.loseNext(provider.StepRefund)
	if _, err := r.client.Refund(ctx, rp); !payments.OutcomeUnknown(err) {
		t.Fatalf("first refund attempt: %v, want its answer lost", err)
	}
	_, err = r.client.Refund(ctx, rp)
	var inv *provider.InvalidRequestError
	if !errors.As(err, &inv) || inv.Code != "charge_already_refunded" {
		t.Fatalf("retry: %v, want Stripe's replayed refusal, final", err)
	}
	if in, err := r.client.RefundIntent(ctx, "cus_1", "r1"); err != nil || in.Status != payments.IntentFailed {
		t.Fatalf("refund intent %+v %v, want FAILED", in, err)
	}
	if st := recordStatus(t, r.pool, composed(t, "refund", "r1")); st != string(idempotency.StatusFailed) {
		t.Fatalf("record %s, want FAILED", st)
	}
}

// noFullKey fails when err's text holds the composed key, or the provider
// reference derived from it.
func noFullKey(t *testing.T, err error, key string) {
	t.Helper()
	text := err.Error()
	for _, k := range []string{key, provider.DeriveKey(key, provider.StepCharge, 0, 255), provider.DeriveKey(key, provider.StepRefund, 0, 255)} {
		if strings.Contains(text, k) {
			t.Fatalf("the error's text holds a full key: %s", text)
		}
	}
}
