package stripetest

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// DefaultRetention is how long the fake remembers an idempotency key: Stripe keeps keys for at
// least 24 hours and may prune them afterwards.
const DefaultRetention = 24 * time.Hour

// Config configures a Server. A nil *Config means all defaults.
type Config struct {
	// Clock returns the fake's current time. It stamps `created` on objects and every answer's
	// Date header, and decides when an idempotency key has outlived Retention. Default:
	// time.Now. See [ManualClock].
	Clock func() time.Time

	// Retention is how long a completed idempotency key is remembered; a request reusing the key
	// after that starts a new request, as at Stripe. Default: [DefaultRetention] (24h).
	Retention time.Duration

	// Seed seeds the random source that decides the probabilistic Faults. The same seed and the
	// same sequence of requests give the same faults. Default: 1.
	Seed int64

	// Faults are applied by probability to every matching request (see [Fault.Probability]), in
	// order; the first one drawn wins. One-shot faults from [Server.Inject] take precedence.
	// Default: none.
	Faults []Fault

	// WebhookURL is the endpoint the fake POSTs signed events to (see "Webhooks" in the package
	// documentation). Default: "", no delivery (events are still recorded, see [Server.Events]).
	WebhookURL string

	// WebhookSecret is the endpoint's signing secret for the Stripe-Signature header.
	// Default: [DefaultWebhookSecret] ("whsec_test").
	WebhookSecret string

	// DuplicateWebhooks is how many extra times every event is delivered, with the same event
	// id, as Stripe's at-least-once delivery may do. Default: 0 (each event once).
	DuplicateWebhooks int

	// WebhookRetryFor is how long a failing delivery is retried. The provider retries for days;
	// by default the fake gives up after 4 attempts over 175ms, so that a test of a receiver
	// that is down for good does not wait. Set it to outlast a receiver that restarts.
	WebhookRetryFor time.Duration

	// WebhookClient sends the deliveries. Default: a client with a 5 s timeout, whose idle
	// connections Close releases.
	WebhookClient *http.Client

	// SearchLag is how far GET /v1/payment_intents/search lags behind writes: a PaymentIntent
	// is found only once it was created at least SearchLag ago on Clock (Stripe: usually under
	// a minute, up to an hour during outages). Must not be negative. Default: 0, visible at once.
	SearchLag time.Duration
}

// Server is a stateful fake of the Stripe API endpoints payonce's adapter uses. It is an
// [http.Handler]; [NewServer] also starts it on a loopback port. It is safe for concurrent use.
type Server struct {
	clock     func() time.Time
	retention time.Duration
	searchLag time.Duration

	life   *fakekit.Lifecycle
	faults *fakekit.Faults[Fault]
	keys   *fakekit.Keys[scopedKey, cached]

	mu      sync.Mutex
	seq     int64
	intents map[string]*paymentIntent
	order   []*paymentIntent // creation order
	refunds map[string]*refund
	rorder  []*refund
	balance map[string]*balanceTransaction
	border  []*balanceTransaction // creation order

	saved     map[string]savedMethod // PaymentMethods attached to a Customer, by id
	customers map[string]bool        // the Customers they are attached to

	wh *fakekit.Deliveries[Event] // event log and delivery queue; its own lock is taken after mu
}

// NewServer returns a started Server listening on a loopback port, like [httptest.NewServer].
// Callers must Close it. It panics if cfg is invalid, naming the bad field.
func NewServer(cfg *Config) *Server { return fakekit.Started(NewUnstartedServer(cfg)) }

// NewUnstartedServer returns a Server that is not listening: serve it with your own
// [http.Server] (a standalone fake), or call Start. It panics if cfg is invalid, naming the bad
// field.
func NewUnstartedServer(cfg *Config) *Server {
	cfg = fakekit.MustConfig("stripetest", cfg, (*Config).validate)
	life := fakekit.NewLifecycle("stripetest")
	s := &Server{
		clock:     fakekit.OrNow(cfg.Clock),
		retention: fakekit.Or(cfg.Retention, DefaultRetention),
		searchLag: cfg.SearchLag,
		life:      life,
		faults:    fakekit.NewFaults(faultType, life, cfg.Faults, cfg.Seed, 0x5354524950455445), // "STRIPETE"
		keys:      fakekit.NewKeys[scopedKey, cached](),
		intents:   make(map[string]*paymentIntent),
		refunds:   make(map[string]*refund),
		balance:   make(map[string]*balanceTransaction),
		saved:     make(map[string]savedMethod),
		customers: make(map[string]bool),
	}
	s.wh = newWebhooks(cfg, s.clock)
	return s
}

func (c *Config) validate() error {
	if c.Retention < 0 {
		return fmt.Errorf("Config.Retention must not be negative, got %v", c.Retention)
	}
	if err := faultType.ValidateRules(c.Faults); err != nil {
		return err
	}
	if err := c.validateSearch(); err != nil {
		return err
	}
	return fakekit.ValidateWebhooks(c.WebhookURL, c.DuplicateWebhooks)
}

// Start starts listening on a loopback port. It panics if the server was already started.
func (s *Server) Start() { s.life.Start(s) }

// URL returns the base URL (for stripe.BackendConfig.URL), or "" if the server is not started.
func (s *Server) URL() string { return s.life.URL() }

// ClientTimeout bounds each request of a [Server.Client] client, so that a test that
// forgot to end a [Hang] fails instead of hanging.
const ClientTimeout = fakekit.ClientTimeout

// Client returns an HTTP client for the Server's URL, for the adapter's Config.HTTPClient or
// stripe-go's BackendConfig.HTTPClient, with keep-alives off and a [ClientTimeout] timeout.
// Each request opens its own connection, so that a [ResetAfter] reaches the caller as the
// lost response it models. A client that keeps connections alive may never see it: when a
// reused connection breaks before the response, net/http resends a request that carries an
// Idempotency-Key on its own, the fake replays the cached response, and the fault heals
// unseen. Each call returns a new client.
func (s *Server) Client() *http.Client { return fakekit.NewClient() }

// Close releases hung requests, stops webhook delivery (undelivered events are dropped) and
// waits for the delivery goroutine, and, if the server was started, shuts it down and waits for
// outstanding requests.
func (s *Server) Close() { s.life.Close(s.wh.Close) }

// ServeHTTP implements [http.Handler].
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if fakekit.IsAdmin(r) {
		s.serveAdmin(w, r)
		return
	}
	w.Header().Set("Request-Id", s.newID("req"))
	// Stripe's clock, the one that stamps created (RFC 9110 section 6.6.1:
	// an origin server with a clock sends Date); net/http would send the
	// host's.
	w.Header().Set("Date", s.clock().UTC().Format(http.TimeFormat))
	apiKey, errResp := authenticate(r)
	if errResp != nil {
		errResp.write(w)
		return
	}
	if err := r.ParseForm(); err != nil {
		errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Message: "Invalid request body: " + err.Error()}).write(w)
		return
	}
	h := s.route(r)
	if h == nil {
		errorResponse(http.StatusNotFound, apiError{Type: typeInvalidRequest,
			Message: fmt.Sprintf("Unrecognized request URL (%s: %s).", r.Method, r.URL.Path)}).write(w)
		return
	}
	key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if r.Method != http.MethodPost || key == "" {
		s.execute(w, r, key, h, nil)
		return
	}
	if len(key) > 255 {
		errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest,
			Message: "Idempotency-Key must be at most 255 characters."}).write(w)
		return
	}
	entry, replay, errResp := s.claim(scopedKey{apiKey, key}, r)
	if errResp != nil {
		errResp.write(w)
		return
	}
	if replay != nil {
		s.replay(w, r, key, replay)
		return
	}
	s.execute(w, r, key, h, entry)
}

// handler runs one API operation. It is called with s.mu held and returns the response and
// whether the operation started executing (its response is then cached for the key).
type handler func(c *call) (resp *response, executed bool)

type call struct {
	r     *http.Request
	form  url.Values
	key   string // Idempotency-Key, "" if none
	id    string // path parameter
	reqID string // Request-Id of the response
}

func (s *Server) route(r *http.Request) handler {
	p := strings.TrimSuffix(r.URL.Path, "/")
	post, get := r.Method == http.MethodPost, r.Method == http.MethodGet
	// item reports whether p is collection/{id}.
	item := func(collection string) bool {
		return strings.HasPrefix(p, collection+"/") && strings.Count(p, "/") == 3
	}
	switch {
	case post && p == "/v1/payment_intents":
		return s.createPaymentIntent
	case get && p == "/v1/payment_intents":
		return s.listPaymentIntents
	case get && p == "/v1/payment_intents/search":
		return s.searchPaymentIntents
	case get && item("/v1/payment_intents"):
		return withID(p, s.getPaymentIntent)
	case post && p == "/v1/refunds":
		return s.createRefund
	case get && p == "/v1/refunds":
		return s.listRefunds
	case get && item("/v1/refunds"):
		return withID(p, s.getRefund)
	case get && p == "/v1/balance_transactions":
		return s.listBalanceTransactions
	case get && item("/v1/balance_transactions"):
		return withID(p, s.getBalanceTransaction)
	}
	return nil
}

func withID(path string, h handler) handler {
	id := path[strings.LastIndexByte(path, '/')+1:]
	return func(c *call) (*response, bool) {
		c.id = id
		return h(c)
	}
}

// execute runs h under the fault chosen for the request. entry is the claimed idempotency key,
// or nil for a request without one.
func (s *Server) execute(w http.ResponseWriter, r *http.Request, key string, h handler, entry *keyEntry) {
	kind, ok := s.faults.BeforeExecute(w, r, faultRequest(r, key), func() { s.release(entry) })
	if !ok {
		return
	}

	s.mu.Lock()
	resp, executed := h(&call{r: r, form: r.Form, key: key, reqID: w.Header().Get("Request-Id")})
	s.mu.Unlock()

	if !executed {
		s.release(entry)
		resp.write(w)
		return
	}
	if kind == FailAfter {
		resp = internalError("injected FailAfter: the request was executed")
		// A cached 500 will replay, so Stripe tells its clients retrying is pointless.
		resp.header = http.Header{"Stripe-Should-Retry": {"false"}}
	}
	s.complete(entry, w.Header().Get("Request-Id"), resp)
	fakekit.AnswerExecuted(w, kind, key, resp.write)
}

func (s *Server) replay(w http.ResponseWriter, r *http.Request, key string, e *keyEntry) {
	if !s.faults.Apply(w, r, faultRequest(r, key)) {
		return
	}
	w.Header().Set("Idempotency-Key", key)
	w.Header().Set("Idempotent-Replayed", "true")
	w.Header().Set("Original-Request", e.Result().requestID)
	e.Result().resp.write(w)
}

func (s *Server) newID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newIDLocked(prefix)
}

func (s *Server) newIDLocked(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s_fake%014d", prefix, s.seq)
}

// response is a status and a JSON body, as cached for an idempotency key.
type response struct {
	status int
	body   []byte
	header http.Header
}

func (r *response) write(w http.ResponseWriter) {
	fakekit.WriteResponse(w, r.header, "application/json", r.status, r.body)
}

func jsonResponse(status int, v any) *response {
	return &response{status: status, body: append(fakekit.MustMarshalIndent(v), '\n')}
}

// Error types and codes as Stripe sends them.
const (
	typeInvalidRequest = "invalid_request_error"
	typeCard           = "card_error"
	typeAPI            = "api_error"
	typeIdempotency    = "idempotency_error"
)

// apiError is Stripe's error object, the value of "error" in an error response.
type apiError struct {
	Type          string         `json:"type"`
	Code          string         `json:"code,omitempty"`
	DeclineCode   string         `json:"decline_code,omitempty"`
	Message       string         `json:"message"`
	Param         string         `json:"param,omitempty"`
	Charge        string         `json:"charge,omitempty"`
	PaymentIntent *paymentIntent `json:"payment_intent,omitempty"`
}

func errorResponse(status int, e apiError) *response {
	return jsonResponse(status, struct {
		Error apiError `json:"error"`
	}{e})
}

func internalError(why string) *response {
	return errorResponse(http.StatusInternalServerError, apiError{Type: typeAPI,
		Message: "An unknown error occurred (stripetest: " + why + ")."})
}

func authenticate(r *http.Request) (string, *response) {
	auth := r.Header.Get("Authorization")
	key, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || key == "" {
		return "", errorResponse(http.StatusUnauthorized, apiError{Type: typeInvalidRequest,
			Message: "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."})
	}
	if !strings.HasPrefix(key, "sk_test_") {
		return "", errorResponse(http.StatusUnauthorized, apiError{Type: typeInvalidRequest,
			Message: "Invalid API Key provided: " + redact(key) + " (stripetest accepts sk_test_ keys only)"})
	}
	return key, nil
}

func redact(key string) string {
	if len(key) <= 12 {
		return strings.Repeat("*", len(key))
	}
	return key[:8] + strings.Repeat("*", len(key)-12) + key[len(key)-4:]
}
