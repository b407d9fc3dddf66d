package adyentest

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// DefaultRetention is how long the fake remembers an idempotency key: PROVIDERS.md tells
// payonce to design for 7 days at Adyen (Adyen's page has said 31; the shorter is the safe
// assumption for a fake that must expose what happens after a key is forgotten).
const DefaultRetention = 7 * 24 * time.Hour

// APIVersion is the Checkout API version the fake serves, as the first path segment.
const APIVersion = "v71"

// MaxIdempotencyKeyLen is Adyen's limit on an Idempotency-Key.
const MaxIdempotencyKeyLen = 64

// maxBody bounds a request body.
const maxBody = 1 << 20

// Config configures a Server. A nil *Config means all defaults.
type Config struct {
	// Clock returns the fake's current time. It decides when an idempotency key has outlived
	// Retention and stamps eventDate on notifications. Default: time.Now. See [ManualClock].
	Clock func() time.Time

	// Retention is how long an idempotency key is remembered; a request reusing the key after
	// that starts a new request. Default: [DefaultRetention] (7 days).
	Retention time.Duration

	// APIKey, when set, is the only X-API-Key accepted. Default: any non-empty key. Idempotency
	// keys are scoped to the API key that sent them.
	APIKey string

	// MerchantAccount, when set, is the only merchantAccount accepted (others get 403 errorCode
	// "901"). Default: any non-empty merchant account.
	MerchantAccount string

	// Seed seeds the random source that decides the probabilistic Faults. The same seed and the
	// same sequence of requests give the same faults. Default: 1.
	Seed int64

	// Faults are applied by probability to every matching request (see [Fault.Probability]), in
	// order; the first one drawn wins. One-shot faults from [Server.Inject] take precedence.
	// Default: none.
	Faults []Fault

	// WebhookURL is the endpoint the fake POSTs notifications to (see "Webhooks" in the package
	// documentation). Default: "", no delivery (notifications are still recorded, see
	// [Server.Events]).
	WebhookURL string

	// HMACKey is the hex-encoded HMAC key that signs every notification item, as in Adyen's
	// Customer Area. Default: [DefaultHMACKey].
	HMACKey string

	// DuplicateWebhooks is how many extra times every delivery is made, with the same items, as
	// Adyen's at-least-once delivery may do. Default: 0 (each delivery once).
	DuplicateWebhooks int

	// WebhookRetryFor is how long a failing delivery is retried. The provider retries for days;
	// by default the fake gives up after 4 attempts over 175ms, so that a test of a receiver
	// that is down for good does not wait. Set it to outlast a receiver that restarts.
	WebhookRetryFor time.Duration

	// WebhookClient sends the deliveries. Default: a client with a 5 s timeout, whose idle
	// connections Close releases.
	WebhookClient *http.Client

	// CaptureMode is the merchant account's capture setting (Customer Area > Account settings
	// > Capture delay: immediate, a delay, or manual; https://docs.adyen.com/online-payments/capture).
	// Default: [CaptureAutomatic], Adyen's default ("By default, payments are captured
	// automatically without a delay, immediately after authorization").
	CaptureMode CaptureMode

	// CaptureDelay is, under [CaptureAutomatic], the time between a payment's authorisation and
	// its automatic capture, on Config.Clock (advance a [ManualClock] past it). Meanwhile the
	// authorisation can still be cancelled. Default: 0, captured at authorisation. It must be 0
	// under [CaptureManual].
	CaptureDelay time.Duration
}

// CaptureMode is when the fake captures an authorised payment. See Config.CaptureMode.
type CaptureMode string

const (
	// CaptureAutomatic captures every Authorised payment in full, at authorisation or after
	// Config.CaptureDelay. The zero CaptureMode means it.
	CaptureAutomatic CaptureMode = "automatic"
	// CaptureManual leaves an Authorised payment uncaptured (no money moved, cancellable) until
	// POST /payments/{pspReference}/captures.
	CaptureManual CaptureMode = "manual"
)

// Server is a stateful fake of the Adyen Checkout API endpoints payonce's adapter uses. It is
// an [http.Handler]; [NewServer] also starts it on a loopback port. It is safe for concurrent
// use.
type Server struct {
	clock     func() time.Time
	retention time.Duration
	apiKey    string
	merchant  string
	hmacKey   string // hex

	captureMode  CaptureMode
	captureDelay time.Duration

	life   *fakekit.Lifecycle
	faults *fakekit.Faults[Fault]
	keys   *fakekit.Keys[scopedKey, *response]

	mu       sync.Mutex
	seq      int64
	payments map[string]*payment // by pspReference
	porder   []*payment          // creation order
	mods     []*modification     // refunds, captures and cancels, in creation order

	wh *fakekit.Deliveries[Event] // notification log and delivery queue; its own lock is taken after mu
}

// NewServer returns a started Server listening on a loopback port, like [httptest.NewServer].
// Callers must Close it. It panics if cfg is invalid, naming the bad field.
func NewServer(cfg *Config) *Server { return fakekit.Started(NewUnstartedServer(cfg)) }

// NewUnstartedServer returns a Server that is not listening: serve it with your own
// [http.Server] (a standalone fake), or call Start. It panics if cfg is invalid, naming the bad
// field.
func NewUnstartedServer(cfg *Config) *Server {
	cfg = fakekit.MustConfig("adyentest", cfg, (*Config).validate)
	life := fakekit.NewLifecycle("adyentest")
	s := &Server{
		clock:        fakekit.OrNow(cfg.Clock),
		retention:    fakekit.Or(cfg.Retention, DefaultRetention),
		apiKey:       cfg.APIKey,
		merchant:     cfg.MerchantAccount,
		hmacKey:      fakekit.Or(cfg.HMACKey, DefaultHMACKey),
		captureMode:  fakekit.Or(cfg.CaptureMode, CaptureAutomatic),
		captureDelay: cfg.CaptureDelay,
		life:         life,
		faults:       fakekit.NewFaults(faultType, life, cfg.Faults, cfg.Seed, 0x414459454e544553), // "ADYENTES"
		keys:         fakekit.NewKeys[scopedKey, *response](),
		payments:     make(map[string]*payment),
	}
	s.wh = newWebhooks(cfg)
	return s
}

func (c *Config) validate() error {
	if c.Retention < 0 {
		return fmt.Errorf("Config.Retention must not be negative, got %v", c.Retention)
	}
	switch c.CaptureMode {
	case "", CaptureAutomatic, CaptureManual:
	default:
		return fmt.Errorf("Config.CaptureMode must be %q or %q, got %q", CaptureAutomatic, CaptureManual, c.CaptureMode)
	}
	switch {
	case c.CaptureDelay < 0:
		return fmt.Errorf("Config.CaptureDelay must not be negative, got %v", c.CaptureDelay)
	case c.CaptureDelay > 0 && c.CaptureMode == CaptureManual:
		return fmt.Errorf("Config.CaptureDelay is %v: a capture delay applies to automatic capture only", c.CaptureDelay)
	}
	if err := faultType.ValidateRules(c.Faults); err != nil {
		return err
	}
	if err := fakekit.ValidateWebhooks(c.WebhookURL, c.DuplicateWebhooks); err != nil {
		return err
	}
	if c.HMACKey != "" {
		if k, err := hex.DecodeString(c.HMACKey); err != nil || len(k) == 0 {
			return fmt.Errorf("Config.HMACKey must be a hex-encoded key, got %d characters that do not decode", len(c.HMACKey))
		}
	}
	return nil
}

// Start starts listening on a loopback port. It panics if the server was already started.
func (s *Server) Start() { s.life.Start(s) }

// ClientTimeout bounds each request of a [Server.Client] client, so that a test that
// forgot to end a [Hang] fails instead of hanging.
const ClientTimeout = fakekit.ClientTimeout

// Client returns an HTTP client for the Server's URL, for the adapter's Config.HTTPClient, with
// keep-alives off and a [ClientTimeout] timeout. Each request opens its own connection, so that a
// [ResetAfter] reaches the caller as the lost response it models. A client that keeps
// connections alive may never see it: when a reused connection breaks before the response,
// net/http resends a request that carries an Idempotency-Key (every payment and modification the
// adapter sends) on its own, the fake replays the stored response, and the fault heals unseen.
// Each call returns a new client.
func (s *Server) Client() *http.Client { return fakekit.NewClient() }

// URL returns the Checkout API base URL, "http://127.0.0.1:port/v71" (for the adapter's
// Config.BaseURL), or "" if the server is not started. The admin endpoints are at the root:
// strip "/v71" and add "/_fake/...".
func (s *Server) URL() string {
	if s.life.URL() == "" {
		return ""
	}
	return s.life.URL() + "/" + APIVersion
}

// Close releases hung requests, stops webhook delivery (undelivered notifications are dropped)
// and waits for the delivery goroutine, and, if the server was started, shuts it down and waits
// for outstanding requests.
func (s *Server) Close() { s.life.Close(s.wh.Close) }

// handler runs one API operation. It is called with s.mu held. Every response it returns is
// cached for the request's idempotency key, unless it is transient.
type handler func(c *call) *response

type call struct {
	path   string // API path without the version, e.g. "/payments/X/refunds"
	psp    string // path parameter
	body   []byte
	key    string // Idempotency-Key, "" if none
	apiKey string
}

// ServeHTTP implements [http.Handler].
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if fakekit.IsAdmin(r) {
		s.serveAdmin(w, r)
		return
	}
	apiPath, ok := strings.CutPrefix(r.URL.Path, "/"+APIVersion)
	if !ok || !strings.HasPrefix(apiPath, "/") {
		apiError(http.StatusNotFound, "000", "security", "Unknown API version or path: "+r.URL.Path).write(w)
		return
	}
	apiPath = strings.TrimSuffix(apiPath, "/")
	apiKey := r.Header.Get("X-API-Key")
	if apiKey == "" || (s.apiKey != "" && apiKey != s.apiKey) {
		apiError(http.StatusUnauthorized, "000", "security", "HTTP Status Response - Unauthorized").write(w)
		return
	}
	h, psp := s.route(r.Method, apiPath)
	if h == nil {
		apiError(http.StatusNotFound, "000", "validation", fmt.Sprintf("No endpoint %s %s", r.Method, apiPath)).write(w)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		apiError(http.StatusBadRequest, codeMalformed, "validation", "Request body unreadable or over 1 MiB").write(w)
		return
	}
	params, err := canonicalBody(body)
	if err != nil {
		apiError(http.StatusBadRequest, codeMalformed, "validation", "Malformed JSON: "+err.Error()).write(w)
		return
	}
	c := &call{path: apiPath, psp: psp, body: body, apiKey: apiKey, key: r.Header.Get("Idempotency-Key")}
	if c.key == "" {
		s.execute(w, r, c, h, nil)
		return
	}
	if len(c.key) > MaxIdempotencyKeyLen {
		apiError(http.StatusUnprocessableEntity, codeKeyInvalid, "validation",
			fmt.Sprintf("Idempotency-Key is %d characters; at most %d are allowed", len(c.key), MaxIdempotencyKeyLen)).write(w)
		return
	}
	entry, replay, errResp := s.claim(scopedKey{apiKey, c.key}, r.Method+" "+apiPath, params)
	if errResp != nil {
		errResp.write(w)
		return
	}
	if replay != nil {
		s.replay(w, r, c, replay)
		return
	}
	s.execute(w, r, c, h, entry)
}

func (s *Server) route(method, p string) (handler, string) {
	if method != http.MethodPost {
		return nil, ""
	}
	switch {
	case p == "/payments":
		return s.createPayment, ""
	case p == "/cancels":
		return s.createCancel, ""
	}
	parts := strings.Split(p, "/") // "", "payments", psp, "refunds"
	if len(parts) == 4 && parts[1] == "payments" && parts[2] != "" {
		switch parts[3] {
		case "refunds":
			return s.createRefund, parts[2]
		case "captures":
			return s.createCapture, parts[2]
		case "reversals":
			return s.createReversal, parts[2]
		}
	}
	return nil, ""
}

// execute runs h under the fault chosen for the request. entry is the claimed idempotency key,
// or nil for a request without one.
func (s *Server) execute(w http.ResponseWriter, r *http.Request, c *call, h handler, entry *keyEntry) {
	kind, ok := s.faults.BeforeExecute(w, r, faultRequest(c), func() { s.release(entry) })
	if !ok {
		return
	}

	s.mu.Lock()
	s.capturesDueLocked()
	resp := h(c)
	s.mu.Unlock()

	if kind == FailAfter {
		resp = internalError("injected FailAfter: the request was executed")
	}
	if resp.transient() {
		s.release(entry)
	} else {
		s.complete(entry, resp)
	}
	fakekit.AnswerExecuted(w, kind, c.key, resp.write)
}

// replay answers a request whose key completed before. Adyen sends no replay marker: the
// response is the first one, byte for byte, with the key echoed as on every keyed response.
func (s *Server) replay(w http.ResponseWriter, r *http.Request, c *call, e *keyEntry) {
	if !s.faults.Apply(w, r, faultRequest(c)) {
		return
	}
	w.Header().Set("Idempotency-Key", c.key)
	e.Result().write(w)
}

// newPSPLocked returns a fresh 16-character pspReference. Called with s.mu held.
func (s *Server) newPSPLocked() string {
	s.seq++
	return fmt.Sprintf("FK%014d", s.seq)
}

// response is a status, headers and a JSON body, as cached for an idempotency key.
type response struct {
	status int
	body   []byte
	header http.Header
}

func (r *response) transient() bool { return r.header.Get("Transient-Error") == "true" }

func (r *response) write(w http.ResponseWriter) {
	fakekit.WriteResponse(w, r.header, "application/json;charset=UTF-8", r.status, r.body)
}

func jsonResponse(status int, v any) *response {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		panic(err) // only our own types are encoded
	}
	return &response{status: status, body: buf.Bytes(), header: http.Header{}}
}

// Error codes. "000" (security), "901" (invalid merchant account), "704" (in progress) and
// "905" (internal) are Adyen's, as are those of missing fields Adyen documents (required.go);
// the other validation codes are the fake's own, since payonce's adapter does not act on Adyen's
// numeric validation catalogue.
const (
	codeInProgress    = "704"
	codeKeyMismatch   = ErrorCodeKeyMismatch
	codeKeyInvalid    = "idempotency_key_invalid"
	codeMalformed     = "malformed_json"
	codeRequired      = "required_field"
	codeInvalidField  = "invalid_field"
	codeInvalidMethod = "invalid_payment_method"
	codeUnknownPSP    = "unknown_psp_reference"
	codeMerchant      = "901"
)

// ErrorCodeKeyMismatch is the errorCode the fake answers (HTTP 422) for an Idempotency-Key
// reused with another body or endpoint. Adyen does not document its answer; payonce's adapter
// maps this code to provider.KeyMismatchError.
const ErrorCodeKeyMismatch = "idempotency_key_reused"

// errorBody is Adyen's error response.
type errorBody struct {
	Status       int    `json:"status"`
	ErrorCode    string `json:"errorCode"`
	Message      string `json:"message"`
	ErrorType    string `json:"errorType"`
	PSPReference string `json:"pspReference,omitempty"`
}

func apiError(status int, code, typ, msg string) *response {
	return jsonResponse(status, errorBody{Status: status, ErrorCode: code, Message: msg, ErrorType: typ})
}

func validation(code, msg string) *response {
	return apiError(http.StatusUnprocessableEntity, code, "validation", msg)
}

// internalError is Adyen's 500; final for its key, since it lacks Transient-Error.
func internalError(why string) *response {
	return apiError(http.StatusInternalServerError, "905", "internal", "Internal error (adyentest: "+why+")")
}

// transientError is the 500 Adyen marks "Transient-Error: true": retry with the same key.
func transientError(why string) *response {
	r := internalError(why)
	r.header.Set("Transient-Error", "true")
	return r
}
