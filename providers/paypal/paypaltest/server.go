package paypaltest

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// Defaults of [Config].
const (
	// DefaultClientID and DefaultSecret are the REST app credentials the fake accepts.
	DefaultClientID = "client_test"
	DefaultSecret   = "secret_test"

	// DefaultTokenLifetime is the expires_in of issued access tokens: PayPal's usual 9 hours.
	DefaultTokenLifetime = 9 * time.Hour

	// DefaultOrderRetention is how long a PayPal-Request-Id of an Orders v2 call (create and
	// capture) is remembered: "The server stores keys for 6 hours. The API callers can request
	// the times to up to 72 hours by speaking to their Account Manager", on both
	// https://developer.paypal.com/api/orders/v2/#orders_create and
	// https://developer.paypal.com/api/orders/v2/#orders_capture.
	DefaultOrderRetention = 6 * time.Hour

	// DefaultRefundRetention is how long a PayPal-Request-Id of a refund of a capture (Payments
	// v2, POST /v2/payments/captures/{id}/refund) is remembered: "The server stores keys for 45
	// days" (https://developer.paypal.com/api/payments/v2/#captures_refund).
	DefaultRefundRetention = 45 * 24 * time.Hour

	// DefaultWebhookID is the id of the fake's webhook subscription.
	DefaultWebhookID = "WH-FAKE-PAYONCE"

	// MaxRequestIDLen is the Orders API's limit on PayPal-Request-Id.
	MaxRequestIDLen = 108
)

// Config configures a Server. A nil *Config means all defaults.
type Config struct {
	// Clock returns the fake's current time. It stamps create_time, expires tokens and decides
	// when a request id has outlived its retention. Default: time.Now. See [ManualClock].
	Clock func() time.Time

	// ClientID and Secret are the credentials POST /v1/oauth2/token accepts (Basic auth).
	// Default: [DefaultClientID], [DefaultSecret].
	ClientID, Secret string

	// TokenLifetime is the expires_in of the access tokens the fake issues, measured on Clock;
	// an expired token gets 401. Default: [DefaultTokenLifetime] (9h). See also
	// [Server.RevokeTokens].
	TokenLifetime time.Duration

	// OrderRetention is how long the request id of an Orders v2 call (a create, a capture) is
	// remembered; a create reusing it later is a new request and makes (and, with a payment
	// source, captures) a new order. Default: [DefaultOrderRetention] (6h).
	OrderRetention time.Duration

	// RefundRetention is how long the request id of a refund of a capture is remembered.
	// Default: [DefaultRefundRetention] (45 days).
	RefundRetention time.Duration

	// Seed seeds the random source that decides the probabilistic Faults. Default: 1.
	Seed int64

	// Faults are applied by probability to every matching request, in order; the first one drawn
	// wins. One-shot faults from [Server.Inject] take precedence. Default: none.
	Faults []Fault

	// WebhookURL is the endpoint the fake POSTs webhook events to. Default: "", no delivery
	// (events are still recorded, see [Server.Events]).
	WebhookURL string

	// WebhookID is the id of the webhook subscription: deliveries are signed for it, and
	// POST /v1/notifications/verify-webhook-signature answers SUCCESS only for it.
	// Default: [DefaultWebhookID].
	WebhookID string

	// DuplicateWebhooks is how many extra times every event is delivered, with the same event id
	// (and a new transmission id), as PayPal's at-least-once delivery may do. Default: 0.
	DuplicateWebhooks int

	// WebhookRetryFor is how long a failing delivery is retried. The provider retries for days;
	// by default the fake gives up after 4 attempts over 175ms, so that a test of a receiver
	// that is down for good does not wait. Set it to outlast a receiver that restarts.
	WebhookRetryFor time.Duration

	// WebhookClient sends the deliveries. Default: a client with a 5 s timeout, whose idle
	// connections Close releases.
	WebhookClient *http.Client

	// SearchLag is Transaction Search's indexing delay: GET /v1/reporting/transactions does not
	// return transactions initiated after Clock() - SearchLag yet, and reports that time as
	// last_refreshed_datetime. PayPal's lag is up to 3 hours. Default: 0 (everything is
	// searchable at once).
	SearchLag time.Duration
}

// Server is a stateful fake of the PayPal REST endpoints payonce's adapter uses. It is an
// [http.Handler]; [NewServer] also starts it on a loopback port. It is safe for concurrent use.
type Server struct {
	clock            func() time.Time
	clientID, secret string
	tokenLifetime    time.Duration
	orderRetention   time.Duration
	refundRetention  time.Duration
	webhookID        string
	searchLag        time.Duration
	mux              *http.ServeMux

	life       *fakekit.Lifecycle
	faults     *fakekit.Faults[Fault]
	requestIDs *fakekit.Keys[requestScope, resourceRef]

	mu          sync.Mutex
	seq         int64
	tokens      map[string]*token
	tokenCount  int
	mismatches  int
	orders      map[string]*order
	orderList   []*order // creation order
	captures    map[string]*capture
	refunds     map[string]*refund
	refundList  []*refund
	transmitted map[string]transmission // PAYPAL-TRANSMISSION-ID -> what was sent

	transactions    []*transaction // Transaction Search history, in recording order
	transactionByID map[string]*transaction

	wh *fakekit.Deliveries[Event] // event log and delivery queue; its own lock is taken after mu
}

type token struct {
	clientID string
	expires  time.Time
	revoked  bool
}

// NewServer returns a started Server listening on a loopback port, like [httptest.NewServer].
// Callers must Close it. It panics if cfg is invalid, naming the bad field.
func NewServer(cfg *Config) *Server { return fakekit.Started(NewUnstartedServer(cfg)) }

// NewUnstartedServer returns a Server that is not listening: serve it with your own
// [http.Server], or call Start. It panics if cfg is invalid, naming the bad field.
func NewUnstartedServer(cfg *Config) *Server {
	cfg = fakekit.MustConfig("paypaltest", cfg, (*Config).validate)
	life := fakekit.NewLifecycle("paypaltest")
	s := &Server{
		clock:           fakekit.OrNow(cfg.Clock),
		clientID:        fakekit.Or(cfg.ClientID, DefaultClientID),
		secret:          fakekit.Or(cfg.Secret, DefaultSecret),
		tokenLifetime:   fakekit.Or(cfg.TokenLifetime, DefaultTokenLifetime),
		orderRetention:  fakekit.Or(cfg.OrderRetention, DefaultOrderRetention),
		refundRetention: fakekit.Or(cfg.RefundRetention, DefaultRefundRetention),
		webhookID:       fakekit.Or(cfg.WebhookID, DefaultWebhookID),
		searchLag:       cfg.SearchLag,
		life:            life,
		faults:          fakekit.NewFaults(faultType, life, cfg.Faults, cfg.Seed, 0x50415950414c5445), // "PAYPALTE"
		requestIDs:      fakekit.NewKeys[requestScope, resourceRef](),
		tokens:          make(map[string]*token),
		orders:          make(map[string]*order),
		captures:        make(map[string]*capture),
		refunds:         make(map[string]*refund),
		transmitted:     make(map[string]transmission),
		transactionByID: make(map[string]*transaction),
	}
	s.wh = newWebhooks(cfg, s)
	s.routes()
	return s
}

func (c *Config) validate() error {
	for name, d := range map[string]time.Duration{"TokenLifetime": c.TokenLifetime,
		"OrderRetention": c.OrderRetention, "RefundRetention": c.RefundRetention, "SearchLag": c.SearchLag} {
		if d < 0 {
			return fmt.Errorf("Config.%s must not be negative, got %v", name, d)
		}
	}
	if c.TokenLifetime != 0 && c.TokenLifetime < time.Second {
		return fmt.Errorf("Config.TokenLifetime must be at least 1s (expires_in is in seconds), got %v", c.TokenLifetime)
	}
	if err := faultType.ValidateRules(c.Faults); err != nil {
		return err
	}
	return fakekit.ValidateWebhooks(c.WebhookURL, c.DuplicateWebhooks)
}

// Start starts listening on a loopback port. It panics if the server was already started.
func (s *Server) Start() { s.life.Start(s) }

// ClientTimeout bounds each request of a [Server.Client] client, so that a test that
// forgot to end a [Hang] fails instead of hanging.
const ClientTimeout = fakekit.ClientTimeout

// Client returns an HTTP client for the Server's URL, for the adapter's Config.HTTPClient, with
// keep-alives off and a [ClientTimeout] timeout. Each request opens its own connection, so that a
// [ResetAfter] reaches the caller as the lost response it models. net/http does not resend a
// POST that carries only a PayPal-Request-Id, but over a kept-alive connection that breaks
// before the response it resends a GET (an order's or a capture's read) on its own, and the
// fault on that read heals unseen. Each call returns a new client.
func (s *Server) Client() *http.Client { return fakekit.NewClient() }

// URL returns the base URL (for the adapter's Config.BaseURL), or "" if the server is not
// started.
func (s *Server) URL() string { return s.life.URL() }

// Close releases hung requests, stops webhook delivery (undelivered events are dropped) and
// waits for the delivery goroutine, and, if the server was started, shuts it down and waits for
// outstanding requests.
func (s *Server) Close() { s.life.Close(s.wh.Close) }

// RevokeTokens invalidates every access token issued so far: the next API call with one gets
// 401, as after a revocation or an expiry PayPal did not announce.
func (s *Server) RevokeTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tokens {
		t.revoked = true
	}
}

// TokenRequests counts the access tokens issued by POST /v1/oauth2/token.
func (s *Server) TokenRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenCount
}

// MismatchedReplays counts replays whose request id came with other parameters (another body or
// endpoint) than its first use. PayPal answers them with the original resource's latest status,
// silently; the fake does too, and counts them so that tests can assert there were none.
func (s *Server) MismatchedReplays() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mismatches
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/oauth2/token", s.serveToken)
	m.Handle("POST /v2/checkout/orders", s.api(opCreateOrder, s.createOrder))
	m.Handle("GET /v2/checkout/orders/{id}", s.api(opRead, s.getOrder))
	m.Handle("POST /v2/checkout/orders/{id}/capture", s.api(opCapture, s.captureOrder))
	m.Handle("GET /v2/payments/captures/{id}", s.api(opRead, s.getCapture))
	m.Handle("POST /v2/payments/captures/{id}/refund", s.api(opRefund, s.refundCapture))
	m.Handle("GET /v2/payments/refunds/{id}", s.api(opRead, s.getRefund))
	m.Handle("POST /v1/notifications/verify-webhook-signature", s.api(opRead, s.verifyWebhookSignature))
	m.Handle("GET /v1/reporting/transactions", s.api(opRead, s.searchTransactions))
	m.HandleFunc(fakekit.AdminPrefix, s.serveAdmin)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		apiError(http.StatusNotFound, "RESOURCE_NOT_FOUND", "The specified resource does not exist.",
			detail{Issue: "INVALID_RESOURCE_ID", Description: fmt.Sprintf("No endpoint %s %s in paypaltest.", r.Method, r.URL.Path)}).write(w)
	})
	s.mux = m
}

// ServeHTTP implements [http.Handler].
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// serveToken is POST /v1/oauth2/token: client credentials in Basic auth, form
// grant_type=client_credentials.
func (s *Server) serveToken(w http.ResponseWriter, r *http.Request) {
	if !s.faults.Apply(w, r, faultRequest(r, "")) {
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok || id != s.clientID || secret != s.secret {
		oauthError(w, http.StatusUnauthorized, "invalid_client", "Client Authentication failed")
		return
	}
	// grant_type=client_credentials is required (https://developer.paypal.com/api/rest/authentication/);
	// anything else is the OAuth 2.0 error unsupported_grant_type (RFC 6749 section 5.2).
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "client_credentials" {
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "Grant Type is NULL or not client_credentials")
		return
	}
	s.mu.Lock()
	s.seq++
	seq := s.seq // read under the lock: webhooks and new objects move it too
	tok := fmt.Sprintf("A21AAfake%014d", seq)
	s.tokens[tok] = &token{clientID: id, expires: s.clock().Add(s.tokenLifetime)}
	s.tokenCount++
	s.mu.Unlock()
	jsonResponse(http.StatusOK, map[string]any{
		"scope":        "https://uri.paypal.com/services/payments/payment",
		"access_token": tok,
		"token_type":   "Bearer",
		"app_id":       "APP-FAKE",
		"expires_in":   int64(s.tokenLifetime / time.Second),
		"nonce":        fmt.Sprintf("%s#fake%d", s.clock().UTC().Format(time.RFC3339), seq),
	}).write(w)
}

// authenticate checks "Authorization: Bearer <token>" against the issued tokens. It returns the
// client id the token was issued to.
func (s *Server) authenticate(r *http.Request) (string, *response) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tokens[tok]
	if !ok || t == nil || t.revoked || !s.clock().Before(t.expires) {
		return "", apiError(http.StatusUnauthorized, "AUTHENTICATION_FAILURE",
			"Authentication failed due to invalid authentication credentials or a missing Authorization header.")
	}
	return t.clientID, nil
}

func (s *Server) newIDLocked(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s%014d", prefix, s.seq)
}

// response is a status and a JSON body.
type response struct {
	status int
	body   []byte
}

func (r *response) write(w http.ResponseWriter) {
	fakekit.WriteResponse(w, nil, "application/json", r.status, r.body)
}

func jsonResponse(status int, v any) *response {
	return &response{status: status, body: append(fakekit.MustMarshal(v), '\n')}
}

// detail is one entry of an error's details, as PayPal sends them.
type detail struct {
	Field       string `json:"field,omitempty"`
	Value       string `json:"value,omitempty"`
	Location    string `json:"location,omitempty"`
	Issue       string `json:"issue"`
	Description string `json:"description,omitempty"`
}

// apiError is PayPal's error body: {name, message, debug_id, details[]}.
func apiError(status int, name, message string, details ...detail) *response {
	return jsonResponse(status, struct {
		Name    string   `json:"name"`
		Message string   `json:"message"`
		DebugID string   `json:"debug_id"`
		Details []detail `json:"details,omitempty"`
	}{name, message, "fakedebug", details})
}

func unprocessable(issue, description string) *response {
	return apiError(http.StatusUnprocessableEntity, "UNPROCESSABLE_ENTITY",
		"The requested action could not be performed, semantically incorrect, or failed business validation.",
		detail{Issue: issue, Description: description})
}

// unprocessableAt is a 422 naming the body field and value at fault.
func unprocessableAt(field, value, issue, description string) *response {
	return apiError(http.StatusUnprocessableEntity, "UNPROCESSABLE_ENTITY",
		"The requested action could not be performed, semantically incorrect, or failed business validation.",
		detail{Field: field, Value: value, Location: "body", Issue: issue, Description: description})
}

func invalidRequest(field, issue, description string) *response {
	return apiError(http.StatusBadRequest, "INVALID_REQUEST",
		"Request is not well-formed, syntactically incorrect, or violates schema.",
		detail{Field: field, Location: "body", Issue: issue, Description: description})
}

func notFound(what, id string) *response {
	return apiError(http.StatusNotFound, "RESOURCE_NOT_FOUND", "The specified resource does not exist.",
		detail{Issue: "INVALID_RESOURCE_ID", Description: fmt.Sprintf("Specified resource ID (%s %q) does not exist. Please check the resource ID and try again.", what, id)})
}

func internalError(why string) *response {
	return apiError(http.StatusInternalServerError, "INTERNAL_SERVER_ERROR",
		"An internal server error has occurred (paypaltest: "+why+").")
}

func oauthError(w http.ResponseWriter, status int, code, desc string) {
	jsonResponse(status, map[string]string{"error": code, "error_description": desc}).write(w)
}

// readBody reads a JSON request body (at most 1 MiB).
func readBody(r *http.Request) ([]byte, *response) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return nil, invalidRequest("", "MALFORMED_REQUEST_JSON", "reading the body: "+err.Error())
	}
	return b, nil
}
