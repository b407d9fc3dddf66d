package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Mode is the middleware's rollout mode.
type Mode int

const (
	// Enforce blocks duplicates: replays, 409 while in progress, refusal
	// of mismatched reuse. The default.
	Enforce Mode = iota
	// LogOnly claims and records keys, counts and logs what it would have
	// blocked (replays, requests in progress, keys reused with other
	// fields), and lets those requests through: switch it on in
	// production, watch the metrics and logs, then enforce. A key that
	// would be refused for its entropy passes through unprotected and
	// unrecorded, with a warning. Input that is refused in any mode still
	// is: a missing required key or a malformed one (400), a body over
	// MaxRequestBody (413), an expired key (422), another scope's key
	// (404).
	LogOnly
)

// Route says how the middleware protects one route.
type Route struct {
	// Pattern is a net/http ServeMux pattern with a method, e.g.
	// "POST /orders" or "PUT /carts/{id}/items". Required.
	Pattern string
	// Action names the operation in keys ("createOrder"): letters, digits
	// and . : - only. Required.
	Action string
	// RequireKey refuses requests without a key (400). Default false: such
	// requests pass through unprotected.
	RequireKey bool
	// Fields lists the significant top-level JSON body fields. The
	// fingerprint covers the method, the pattern and these fields' values
	// (canonical JSON: key order and whitespace do not matter; a missing
	// field counts as null). Default: the whole canonical JSON body (or the
	// raw bytes of a body that is not JSON).
	Fields []string
	// StoreHashOnly stores only the status and the SHA-256 of the body, for
	// routes whose answers need not be replayed in full (or must not be
	// kept, such as answers carrying personal data): a replay answers the
	// stored status, an empty body and the header Idempotent-Body-Sha256.
	// Default false: the full response is stored.
	StoreHashOnly bool
	// Fingerprint, when set, replaces Fields: it computes the fingerprint
	// from the request and its body (already read; r.Body must not be
	// read). An error answers 400 with its message.
	Fingerprint func(r *http.Request, body []byte) (Fingerprint, error)
	// NoReplayCache keeps the route's replays out of the executor's
	// [ReplayCache]: each goes to the store (answers that must not be
	// held in memory, or a route whose records an operator rewrites).
	// Default false.
	NoReplayCache bool
}

// MiddlewareConfig configures [Middleware]. Every field but Scope and
// Routes has a default. The lock timeout (lease) and the retention are the
// executor's: [Config].LockTimeout (default 30s) and [Config].Retention
// (default 24h).
type MiddlewareConfig struct {
	// Scope returns the authenticated user, account or tenant of a
	// request, from its authentication, never from its body. A request
	// without a scope on a protected route is refused (401), never treated
	// as an anonymous shared scope. Required.
	Scope func(r *http.Request) string
	// Routes are the protected routes; any other request passes through.
	// Required (at least one).
	Routes []Route
	// KeyHeader is the request header carrying the key; bare tokens and
	// Structured Field strings ("...") are both accepted. Default
	// "Idempotency-Key".
	KeyHeader string
	// AllowLowEntropyKeys accepts client keys that cannot carry 128 bits
	// of entropy. Default false: a key must be a UUIDv4, a ULID or another
	// string long enough for 128 bits ([CheckEntropy]); any other key is
	// answered 400 (problem type idempotency-key-low-entropy, telling the
	// client to send a UUIDv4 or a ULID) before the body is read or
	// anything is stored. Such keys cannot be guessed, so each scope's keys
	// are its own: the same key under two scopes is two records, and
	// nothing one scope sends changes what another gets.
	//
	// Setting it keeps the behaviour of earlier versions, for clients that
	// cannot yet send random keys: keys of any shape are accepted, and a
	// key that another scope holds is answered 404 for that record's whole
	// retention. The trade-off: a guessable key ("order-1", "retry-1")
	// used first by one tenant, by accident or on purpose, blocks every
	// other tenant's requests with that key (404) until it expires, and the
	// 404 tells a caller which guessable keys other tenants use. Move the
	// clients to random keys and leave this false.
	AllowLowEntropyKeys bool
	// MaxRequestBody bounds protected request bodies; beyond it the answer
	// is 413 and nothing is recorded. Default 1 MiB.
	MaxRequestBody int64
	// MaxStoredResponse bounds a stored response body. A larger response
	// is still sent, but its key is released rather than stored, so a
	// retry runs the handler again; it is logged. A route with
	// StoreHashOnly stores no body, so its answers are never released for
	// their size: give large answers that route option. Default 1 MiB.
	MaxStoredResponse int64
	// ReplayHeaders is the allowlist of response headers stored and
	// replayed (canonical names). Set-Cookie is never stored, whatever
	// this says. Default Content-Type, Content-Language, Location, ETag,
	// Last-Modified, Cache-Control.
	ReplayHeaders []string
	// MismatchStatus answers a key reused with other significant fields:
	// 409 (default) or 422 (IETF draft style).
	MismatchStatus int
	// Mode is Enforce (default) or LogOnly.
	Mode Mode
	// WaitInFlight, when positive, makes a request whose key is being
	// processed wait up to this long for the outcome and replay it (what
	// browser double clicks want), polling with backoff; after it, 409.
	// Default 0: answer 409 with Retry-After at once.
	WaitInFlight time.Duration
	// Store5xx stores 5xx responses (FAILED, replayed) instead of releasing
	// the key, for handlers whose 5xx may follow a side effect. Default
	// false: a 5xx releases the key and a retry runs the handler again.
	Store5xx bool
	// Limiter bounds the new keys a scope may create; beyond it the answer
	// is 429 with Retry-After, the claim is taken back (no record is left),
	// and idempotency.rate_limited counts it. Replays are never counted.
	// Default: a [MemLimiter] of RateLimit keys per RateWindow, counted in
	// this process only; with several instances, pass pgstore.NewLimiter
	// (or redisstore.NewLimiter) for one limit shared through the database.
	Limiter Limiter
	// RateLimit is the default limiter's new keys per scope per RateWindow.
	// Default 100; a negative value turns rate limiting off.
	RateLimit int
	// RateWindow is the default limiter's window. Default 1 minute.
	RateWindow time.Duration
	// MeterProvider receives idempotency.rate_limited. Default: no-op.
	MeterProvider metric.MeterProvider
	// Logger receives what the middleware blocked or would have blocked
	// (LogOnly), with keys as short hashes only. Default: discarded.
	Logger *slog.Logger
}

var defaultReplayHeaders = []string{"Content-Type", "Content-Language", "Location", "ETag", "Last-Modified", "Cache-Control"}

type middleware struct {
	limited metric.Int64Counter
	exec    Doer
	cfg     MiddlewareConfig
	mux     *http.ServeMux
	routes  map[string]*Route
	allow   map[string]bool
	log     *slog.Logger
}

// Middleware returns net/http middleware that makes the configured routes
// idempotent with exec (an [Executor], or pgstore's Executor.WithTx() so
// that the handler's writes and the outcome commit in one transaction). It works with any router built on net/http. See
// the package documentation for the HTTP mapping. It returns an
// *InvalidError naming a bad configuration field.
//
// Responses of protected routes are buffered until the handler returns:
// the response writer implements neither http.Flusher nor http.Hijacker.
// Requests that ask for a stream (Accept: text/event-stream) or a protocol
// upgrade (Upgrade header) are passed through unprotected, with a logged
// warning.
func Middleware(exec Doer, cfg MiddlewareConfig) (func(http.Handler) http.Handler, error) {
	if exec == nil {
		return nil, invalid("exec", "nil")
	}
	if cfg.Scope == nil {
		return nil, invalid("MiddlewareConfig.Scope", "required: a function returning the authenticated scope")
	}
	if len(cfg.Routes) == 0 {
		return nil, invalid("MiddlewareConfig.Routes", "at least one route is required")
	}
	if cfg.KeyHeader == "" {
		cfg.KeyHeader = "Idempotency-Key"
	}
	if cfg.MaxRequestBody == 0 {
		cfg.MaxRequestBody = 1 << 20
	}
	if cfg.MaxStoredResponse == 0 {
		cfg.MaxStoredResponse = 1 << 20
	}
	if cfg.ReplayHeaders == nil {
		cfg.ReplayHeaders = defaultReplayHeaders
	}
	if cfg.MismatchStatus == 0 {
		cfg.MismatchStatus = http.StatusConflict
	}
	switch {
	case cfg.MaxRequestBody < 0:
		return nil, invalid("MiddlewareConfig.MaxRequestBody", "must be positive")
	case cfg.MaxStoredResponse < 0:
		return nil, invalid("MiddlewareConfig.MaxStoredResponse", "must be positive")
	case cfg.MismatchStatus != http.StatusConflict && cfg.MismatchStatus != http.StatusUnprocessableEntity:
		return nil, invalid("MiddlewareConfig.MismatchStatus", "must be 409 or 422, got %d", cfg.MismatchStatus)
	case cfg.Mode != Enforce && cfg.Mode != LogOnly:
		return nil, invalid("MiddlewareConfig.Mode", "unknown mode %d", cfg.Mode)
	case cfg.WaitInFlight < 0:
		return nil, invalid("MiddlewareConfig.WaitInFlight", "must not be negative")
	}
	if cfg.Limiter == nil && cfg.RateLimit >= 0 {
		limit, window := cfg.RateLimit, cfg.RateWindow
		if limit == 0 {
			limit = 100
		}
		if window == 0 {
			window = time.Minute
		}
		l, err := NewMemLimiter(limit, window, nil)
		if err != nil {
			return nil, invalid("MiddlewareConfig.RateWindow", "%v", reasonOf(err))
		}
		cfg.Limiter = l
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	limited, err := mp.Meter("github.com/payonce/payonce/idempotency").Int64Counter(MetricRateLimited,
		metric.WithDescription("New keys refused because their scope created too many (429)."))
	if err != nil {
		return nil, fmt.Errorf("idempotency: metrics: %w", err)
	}
	m := &middleware{limited: limited, exec: exec, cfg: cfg, mux: http.NewServeMux(), routes: map[string]*Route{}, allow: map[string]bool{}, log: cfg.Logger}
	if m.log == nil {
		m.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	for _, h := range cfg.ReplayHeaders {
		if c := http.CanonicalHeaderKey(h); c != "Set-Cookie" {
			m.allow[c] = true
		}
	}
	for i, rt := range cfg.Routes {
		field := fmt.Sprintf("MiddlewareConfig.Routes[%d]", i)
		method, _, ok := strings.Cut(rt.Pattern, " ")
		if !ok || method == "" || strings.Contains(method, "/") {
			return nil, invalid(field+".Pattern", "want \"METHOD /path\", got %q", rt.Pattern)
		}
		if err := ValidateAction(rt.Action); err != nil {
			return nil, invalid(field+".Action", "%v", err)
		}
		if _, dup := m.routes[rt.Pattern]; dup {
			return nil, invalid(field+".Pattern", "%q appears twice", rt.Pattern)
		}
		if err := registerPattern(m.mux, rt.Pattern); err != nil {
			return nil, invalid(field+".Pattern", "%v", err)
		}
		m.routes[rt.Pattern] = &rt
	}
	return m.wrap, nil
}

func registerPattern(mux *http.ServeMux, pattern string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	mux.HandleFunc(pattern, func(http.ResponseWriter, *http.Request) {})
	return nil
}

func (m *middleware) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := m.mux.Handler(r)
		rt := m.routes[pattern]
		if rt == nil {
			next.ServeHTTP(w, r)
			return
		}
		m.serve(w, r, rt, next)
	})
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, rt *Route, next http.Handler) {
	ctx := r.Context()
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") || r.Header.Get("Upgrade") != "" {
		m.log.Warn("idempotency: streaming or upgrade request passed through unprotected", "route", rt.Pattern)
		next.ServeHTTP(w, r)
		return
	}
	scope := m.cfg.Scope(r)
	if scope == "" {
		problem(w, http.StatusUnauthorized, "unauthenticated", "This route needs an authenticated caller.", 0)
		return
	}
	if err := ValidateScope(scope); err != nil {
		problem(w, http.StatusUnauthorized, "unauthenticated", "The caller's scope is not usable.", 0)
		return
	}
	raw := r.Header.Values(m.cfg.KeyHeader)
	if len(raw) == 0 {
		if rt.RequireKey {
			problem(w, http.StatusBadRequest, "idempotency-key-missing", "This route requires an "+m.cfg.KeyHeader+" header.", 0)
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	intent, err := parseKeyHeader(raw)
	if err == nil {
		_, err = ComposeKey(scope, rt.Action, intent)
	}
	if err != nil {
		// The reason names what is wrong; the key itself is never echoed.
		problem(w, http.StatusBadRequest, "idempotency-key-malformed", "The "+m.cfg.KeyHeader+" header is malformed: "+reasonOf(err), 0)
		return
	}
	// A guessable key is refused before anything is stored: it can then
	// neither collide with another caller's nor be taken first by one.
	if why := entropyShortfall(intent); why != "" && !m.cfg.AllowLowEntropyKeys {
		if m.cfg.Mode == LogOnly {
			m.log.Warn("idempotency: log-only: would have refused a low-entropy key; passed through unprotected", "route", rt.Pattern)
			next.ServeHTTP(w, r)
			return
		}
		problem(w, http.StatusBadRequest, "idempotency-key-low-entropy", "The "+m.cfg.KeyHeader+" header must carry at least 128 bits of entropy, so that no other caller can guess it ("+why+"). Send a random UUIDv4 or a ULID, new for each operation and the same on its retries.", 0)
		return
	}
	// The stored key is the action and the client's key; the scope is the
	// record's other primary-key column (user_id). So the same client key
	// under two scopes is two records. Under AllowLowEntropyKeys a key
	// that exists only under another scope is refused (RefuseForeign):
	// the claim finds it through the primary key's leading column and it
	// is answered 404 without a second round trip.
	key := rt.Action + "_" + intent

	body, err := io.ReadAll(io.LimitReader(r.Body, m.cfg.MaxRequestBody+1))
	if err != nil {
		problem(w, http.StatusBadRequest, "body-unreadable", "The request body could not be read.", 0)
		return
	}
	if int64(len(body)) > m.cfg.MaxRequestBody {
		problem(w, http.StatusRequestEntityTooLarge, "body-too-large", fmt.Sprintf("The request body exceeds %d bytes.", m.cfg.MaxRequestBody), 0)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var fp Fingerprint
	if rt.Fingerprint != nil {
		fp, err = rt.Fingerprint(r, body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	} else {
		fp, err = defaultFingerprint(r.Method, rt.Pattern, rt.Fields, body)
	}
	if err != nil {
		problem(w, http.StatusBadRequest, "request-invalid", reasonOf(err), 0)
		return
	}
	req := Request{Scope: scope, Key: key, Fingerprint: fp, RefuseForeign: m.cfg.AllowLowEntropyKeys, NoCache: rt.NoReplayCache}
	log := m.log.With("route", rt.Pattern, "key", ShortHash(key))

	var rec *recorder
	var limitedFor time.Duration
	action := func(actx context.Context) (Response, error) {
		if m.cfg.Limiter != nil && !ReclaimedFromContext(actx) {
			ok, after, err := m.cfg.Limiter.Allow(actx, scope)
			if err != nil {
				return Response{}, err // transient: the key is released
			}
			if !ok && m.cfg.Mode == LogOnly {
				log.Warn("idempotency: log-only: would have refused a new key: too many from this scope", "scope_bucket", ScopeBucket(scope))
			} else if !ok {
				limitedFor = max(after, time.Second)
				return Response{}, Abandon(errRateLimited)
			}
		}
		rec = newRecorder()
		next.ServeHTTP(rec, r.WithContext(actx))
		resp := rec.response(m.allow)
		if rt.StoreHashOnly {
			sum := sha256.Sum256(resp.Body)
			resp = Response{Code: resp.Code, Header: http.Header{"Idempotent-Body-Sha256": {hex.EncodeToString(sum[:])}}}
		}
		switch {
		case int64(len(resp.Body)) > m.cfg.MaxStoredResponse: // a hash-only route stores no body
			log.Warn("idempotency: response too large to store; key released", "bytes", rec.body.Len())
			return Response{}, errNotStored
		case rec.status >= 500 && !m.cfg.Store5xx:
			return Response{}, errServerError
		case rec.status >= 400:
			return Response{}, Permanent(errClientError, resp)
		}
		return resp, nil
	}

	deadline := time.Now().Add(m.cfg.WaitInFlight)
	for wait := firstPoll; ; wait = nextPoll(wait) {
		res, err := m.exec.Do(ctx, req, action)
		var fe *FailedError
		var ip *InProgressError
		switch {
		case rec != nil:
			// This request ran the handler.
			switch {
			case err == nil || errors.As(err, &fe) || errors.Is(err, errServerError) || errors.Is(err, errNotStored):
				rec.writeTo(w) // what the handler answered
			case errors.Is(err, ErrLeaseLost):
				// Another request took the key over meanwhile; its outcome
				// stands and a retry gets it.
				problem(w, http.StatusConflict, "request-superseded", "This request was superseded by another with the same key; retry to get its outcome.", time.Second)
			default:
				// The outcome could not be recorded (and, for handlers
				// that write in the outcome's transaction, nothing was
				// kept): do not claim a success that may not last.
				log.Error("idempotency: outcome not recorded", "err", err)
				problem(w, http.StatusServiceUnavailable, "outcome-not-recorded", "The request's outcome could not be recorded; retry later.", 2*time.Second)
			}
			return
		case err == nil || errors.As(err, &fe):
			if m.cfg.Mode == LogOnly {
				log.Info("idempotency: log-only: would have replayed")
				next.ServeHTTP(w, r)
				return
			}
			if fe != nil {
				res.Response = fe.Response
			}
			writeReplay(w, res.Response)
			return
		case errors.As(err, &ip):
			if m.cfg.Mode == LogOnly {
				log.Info("idempotency: log-only: would have answered in progress")
				next.ServeHTTP(w, r)
				return
			}
			if time.Now().Add(wait).Before(deadline) {
				select {
				case <-time.After(wait):
					continue
				case <-ctx.Done():
					return
				}
			}
			problem(w, http.StatusConflict, "request-in-progress", "A request with this key is still being processed; retry later.", max(ip.RetryAfter, time.Second))
			return
		case errors.Is(err, errRateLimited):
			m.limited.Add(ctx, 1, metric.WithAttributes(attribute.String("scope_bucket", ScopeBucket(scope))))
			log.Warn("idempotency: new key refused: too many from this scope", "scope_bucket", ScopeBucket(scope))
			problem(w, http.StatusTooManyRequests, "too-many-keys", "Too many new requests from this caller; retry later.", limitedFor)
			return
		case errors.Is(err, ErrFingerprintMismatch):
			if m.cfg.Mode == LogOnly {
				log.Warn("idempotency: log-only: would have refused a key reused with other fields")
				next.ServeHTTP(w, r)
				return
			}
			log.Warn("idempotency: key reused with other fields; refused")
			problem(w, m.cfg.MismatchStatus, "idempotency-key-reused", "This key was already used with a different request.", 0)
			return
		case errors.Is(err, ErrForeignKey):
			// Only under AllowLowEntropyKeys. Never 403, never the other
			// scope's answer: as if it did not exist.
			log.Warn("idempotency: key of another scope refused")
			problem(w, http.StatusNotFound, "idempotency-key-unknown", "No request with this key exists for this caller.", 0)
			return
		case errors.Is(err, ErrExpired):
			problem(w, http.StatusUnprocessableEntity, "idempotency-key-expired", "This key has expired; use a new key.", 0)
			return
		case errors.Is(err, ErrInvalid):
			problem(w, http.StatusBadRequest, "request-invalid", reasonOf(err), 0)
			return
		default:
			log.Error("idempotency: store unavailable", "err", err)
			problem(w, http.StatusServiceUnavailable, "idempotency-unavailable", "The request could not be processed safely; retry later.", 2*time.Second)
			return
		}
	}
}

var (
	errRateLimited = errors.New("idempotency: too many new keys from this scope")
	errServerError = errors.New("idempotency: handler answered 5xx; key released")
	errClientError = errors.New("idempotency: handler answered 4xx; stored as failed")
	errNotStored   = errors.New("idempotency: response too large to store; key released")
)

func reasonOf(err error) string {
	var ie *InvalidError
	if errors.As(err, &ie) {
		return ie.Field + ": " + ie.Reason
	}
	return err.Error()
}

// parseKeyHeader accepts a bare token or a Structured Field string.
func parseKeyHeader(values []string) (string, error) {
	if len(values) != 1 {
		return "", invalid("key header", "sent %d times", len(values))
	}
	// Only HTTP's optional whitespace (SP, HTAB) surrounds a field value:
	// TrimSpace would also take "k\u00a0" or "k\v", which are no token.
	v := strings.Trim(values[0], " \t")
	if strings.HasPrefix(v, `"`) {
		if len(v) < 2 || !strings.HasSuffix(v, `"`) {
			return "", invalid("key header", "unterminated string")
		}
		var b strings.Builder
		inner := v[1 : len(v)-1]
		for i := 0; i < len(inner); i++ {
			c := inner[i]
			switch {
			case c == '\\':
				if i+1 >= len(inner) || (inner[i+1] != '"' && inner[i+1] != '\\') {
					return "", invalid("key header", "bad escape in string")
				}
				i++
				b.WriteByte(inner[i])
			case c == '"':
				return "", invalid("key header", "unescaped quote in string")
			default:
				b.WriteByte(c)
			}
		}
		v = b.String()
	}
	if v == "" {
		return "", invalid("key header", "empty")
	}
	return v, nil
}

// defaultFingerprint covers the method, the route pattern and either the
// listed fields of a JSON body or the whole canonical body.
func defaultFingerprint(method, pattern string, fields []string, body []byte) (Fingerprint, error) {
	b := NewFingerprint().String("method", method).String("route", pattern)
	if len(bytes.TrimSpace(body)) == 0 {
		return b.Bytes("body", nil).Sum()
	}
	doc, err := decodeJSON(body)
	if err != nil {
		if len(fields) > 0 {
			return "", invalid("body", "not a JSON object")
		}
		return b.Bytes("raw", body).Sum() // not JSON: the bytes themselves
	}
	if len(fields) == 0 {
		c, err := json.Marshal(doc) // map keys sorted, whitespace gone
		if err != nil {
			return "", invalid("body", "%v", err)
		}
		return b.Bytes("json", c).Sum()
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return "", invalid("body", "not a JSON object")
	}
	sorted := append([]string(nil), fields...)
	sort.Strings(sorted)
	for _, f := range sorted {
		c, err := json.Marshal(obj[f])
		if err != nil {
			return "", invalid("body field "+strconv.Quote(f), "%v", err)
		}
		b.Bytes("field:"+f, c)
	}
	return b.Sum()
}

// recorder buffers a handler's response.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}

func (r *recorder) code() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}

// response is what is stored: the status, the allowlisted headers, the body.
func (r *recorder) response(allow map[string]bool) Response {
	r.status = r.code()
	h := http.Header{}
	for k, v := range r.header {
		if allow[k] {
			h[k] = append([]string(nil), v...)
		}
	}
	if len(h) == 0 {
		h = nil
	}
	return Response{Code: r.status, Header: h, Body: append([]byte(nil), r.body.Bytes()...)}
}

// writeTo sends the first execution's response as the handler wrote it.
func (r *recorder) writeTo(w http.ResponseWriter) {
	for k, v := range r.header {
		w.Header()[k] = v
	}
	w.WriteHeader(r.code())
	_, _ = w.Write(r.body.Bytes())
}

func writeReplay(w http.ResponseWriter, resp Response) {
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Header().Set("Idempotent-Replayed", "true")
	code := resp.Code
	if code == 0 {
		code = http.StatusOK
	}
	w.WriteHeader(code)
	_, _ = w.Write(resp.Body)
}

// problem writes an RFC 9457 problem. Details never carry a key, a
// fingerprint or a stored body.
func problem(w http.ResponseWriter, status int, typ, detail string, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type":   "https://payonce.dev/problems/" + typ,
		"title":  http.StatusText(status),
		"status": status,
		"detail": detail,
	})
}

// ParseKeyHeader reads an Idempotency-Key header's values as the
// middleware does, for handlers that take the key themselves: exactly one
// value, a bare token or a Structured Field string (the IETF draft's
// quoted form). Errors: *InvalidError naming "key header".
func ParseKeyHeader(values []string) (string, error) { return parseKeyHeader(values) }
