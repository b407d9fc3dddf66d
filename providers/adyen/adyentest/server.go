package adyentest

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"time"
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

	// WebhookClient sends the deliveries. Default: a client with a 5 s timeout, whose idle
	// connections Close releases.
	WebhookClient *http.Client
}

// Server is a stateful fake of the Adyen Checkout API endpoints payonce's adapter uses. It is
// an [http.Handler]; [NewServer] also starts it on a loopback port. It is safe for concurrent
// use.
type Server struct {
	clock     func() time.Time
	retention time.Duration
	apiKey    string
	merchant  string
	rules     []Fault

	ts      *httptest.Server
	closing chan struct{}
	once    sync.Once

	mu       sync.Mutex
	rng      *rand.Rand
	injected []Fault
	keys     map[scopedKey]*keyEntry
	seq      int64
	payments map[string]*payment // by pspReference
	porder   []*payment          // creation order
	mods     []*modification     // refunds, captures and cancels, in creation order

	wh *webhooks // notification log and delivery queue; its own lock is taken after mu
}

// NewServer returns a started Server listening on a loopback port, like [httptest.NewServer].
// Callers must Close it. It panics if cfg is invalid, naming the bad field.
func NewServer(cfg *Config) *Server {
	s := NewUnstartedServer(cfg)
	s.Start()
	return s
}

// NewUnstartedServer returns a Server that is not listening: serve it with your own
// [http.Server] (a standalone fake), or call Start. It panics if cfg is invalid, naming the bad
// field.
func NewUnstartedServer(cfg *Config) *Server {
	if cfg == nil {
		cfg = &Config{}
	}
	if err := cfg.validate(); err != nil {
		panic("adyentest: " + err.Error())
	}
	s := &Server{
		clock:     cfg.Clock,
		retention: cfg.Retention,
		apiKey:    cfg.APIKey,
		merchant:  cfg.MerchantAccount,
		rules:     append([]Fault(nil), cfg.Faults...),
		closing:   make(chan struct{}),
		keys:      make(map[scopedKey]*keyEntry),
		payments:  make(map[string]*payment),
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.retention == 0 {
		s.retention = DefaultRetention
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = 1
	}
	s.rng = rand.New(rand.NewPCG(uint64(seed), 0x414459454e544553)) // "ADYENTES"
	s.wh = newWebhooks(cfg, s.clock)
	return s
}

func (c *Config) validate() error {
	if c.Retention < 0 {
		return fmt.Errorf("Config.Retention must not be negative, got %v", c.Retention)
	}
	for i, f := range c.Faults {
		if f.Probability <= 0 || f.Probability > 1 {
			return fmt.Errorf("Config.Faults[%d].Probability must be in (0, 1], got %v", i, f.Probability)
		}
		if err := f.validate(); err != nil {
			return fmt.Errorf("Config.Faults[%d]: %w", i, err)
		}
	}
	if c.DuplicateWebhooks < 0 {
		return fmt.Errorf("Config.DuplicateWebhooks must not be negative, got %d", c.DuplicateWebhooks)
	}
	if c.WebhookURL != "" {
		u, err := url.Parse(c.WebhookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("Config.WebhookURL must be an absolute http(s) URL, got %q", c.WebhookURL)
		}
	}
	if c.HMACKey != "" {
		if k, err := hex.DecodeString(c.HMACKey); err != nil || len(k) == 0 {
			return fmt.Errorf("Config.HMACKey must be a hex-encoded key, got %d characters that do not decode", len(c.HMACKey))
		}
	}
	return nil
}

// Start starts listening on a loopback port. It panics if the server was already started.
func (s *Server) Start() {
	if s.ts != nil {
		panic("adyentest: Server already started")
	}
	s.ts = httptest.NewServer(s)
}

// URL returns the Checkout API base URL, "http://127.0.0.1:port/v71" (for the adapter's
// Config.BaseURL), or "" if the server is not started. The admin endpoints are at the root:
// strip "/v71" and add "/_fake/...".
func (s *Server) URL() string {
	if s.ts == nil {
		return ""
	}
	return s.ts.URL + "/" + APIVersion
}

// Close releases hung requests, stops webhook delivery (undelivered notifications are dropped)
// and waits for the delivery goroutine, and, if the server was started, shuts it down and waits
// for outstanding requests.
func (s *Server) Close() {
	s.once.Do(func() { close(s.closing) })
	s.wh.close()
	if s.ts != nil {
		s.ts.Close()
	}
}

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
	if strings.HasPrefix(r.URL.Path, adminPrefix) {
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
	fp, err := fingerprint(r.Method, apiPath, body)
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
	entry, replay, errResp := s.claim(scopedKey{apiKey, c.key}, fp)
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
		}
	}
	return nil, ""
}

// execute runs h under the fault chosen for the request. entry is the claimed idempotency key,
// or nil for a request without one.
func (s *Server) execute(w http.ResponseWriter, r *http.Request, c *call, h handler, entry *keyEntry) {
	fault := s.pickFault(c.path, c.key)
	if !s.before(r.Context(), fault) {
		s.release(entry)
		if fault.Kind == FailBefore {
			transientError("injected FailBefore: nothing was executed").write(w)
		}
		return // hung request abandoned
	}

	s.mu.Lock()
	resp := h(c)
	s.mu.Unlock()

	if fault.Kind == FailAfter {
		resp = apiError(http.StatusInternalServerError, "905", "internal", "Internal error (adyentest: injected FailAfter: the request was executed)")
	}
	if resp.transient() {
		s.release(entry)
	} else {
		s.complete(entry, resp)
	}
	if fault.Kind == ResetAfter {
		resetConnection(w)
		return
	}
	if c.key != "" {
		w.Header().Set("Idempotency-Key", c.key)
	}
	resp.write(w)
}

// replay answers a request whose key completed before. Adyen sends no replay marker: the
// response is the first one, byte for byte, with the key echoed as on every keyed response.
func (s *Server) replay(w http.ResponseWriter, r *http.Request, c *call, e *keyEntry) {
	fault := s.pickFault(c.path, c.key)
	if !s.before(r.Context(), fault) {
		if fault.Kind == FailBefore {
			transientError("injected FailBefore on a replay").write(w)
		}
		return
	}
	switch fault.Kind {
	case FailAfter:
		apiError(http.StatusInternalServerError, "905", "internal", "Internal error (adyentest: injected FailAfter on a replay)").write(w)
		return
	case ResetAfter:
		resetConnection(w)
		return
	}
	w.Header().Set("Idempotency-Key", c.key)
	e.resp.write(w)
}

// before applies the part of a fault that happens before execution. It reports whether the
// request should go on.
func (s *Server) before(ctx context.Context, f Fault) bool {
	switch f.Kind {
	case Latency:
		t := time.NewTimer(f.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		case <-s.closing:
			return false
		}
	case Hang:
		select {
		case <-ctx.Done():
		case <-s.closing:
		}
		return false
	case FailBefore:
		return false
	}
	return true
}

// resetConnection drops the connection without a response, with a TCP RST where possible, so
// the client sees the response as lost.
func resetConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
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
	for k, v := range r.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body)
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
// "905" (internal) are Adyen's; the validation codes are the fake's own, since payonce's adapter
// does not act on Adyen's numeric validation catalogue.
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
// maps this code to payments.KeyMismatchError.
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

func transientError(why string) *response {
	r := apiError(http.StatusInternalServerError, "905", "internal", "Internal error (adyentest: "+why+")")
	r.header.Set("Transient-Error", "true")
	return r
}
