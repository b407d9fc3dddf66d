package testkit

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path"
	"sync"
	"testing"
)

// Sent is one request as an adapter sent it.
type Sent struct {
	Method string
	Path   string
	Query  url.Values
	Header http.Header
	Body   []byte
}

// Endpoint is the request's "METHOD path", e.g. "POST /v1/refunds".
func (s Sent) Endpoint() string { return s.Method + " " + s.Path }

// JSON decodes the body as a JSON object, failing t if it is not one; an empty body is nil.
func (s Sent) JSON(t *testing.T) map[string]any {
	t.Helper()
	if len(s.Body) == 0 {
		return nil
	}
	var v map[string]any
	if err := json.Unmarshal(s.Body, &v); err != nil {
		t.Fatalf("%s sent a body that is not a JSON object: %v: %s", s.Endpoint(), err, s.Body)
	}
	return v
}

// Form parses the body as a form, failing t if it is not one.
func (s Sent) Form(t *testing.T) url.Values {
	t.Helper()
	form, err := url.ParseQuery(string(s.Body))
	if err != nil {
		t.Fatalf("%s sent a body that is not a form: %v: %s", s.Endpoint(), err, s.Body)
	}
	return form
}

// Recorder is an http.RoundTripper that keeps every request an adapter sends and sends it on:
// a test reads which endpoints the adapter called, how often, and what it sent. The zero
// Recorder is ready to use. It is safe for concurrent use.
type Recorder struct {
	// Next sends the requests. Default: a transport without keep-alives, since on a reused
	// connection net/http itself resends a request with an Idempotency-Key whose response a
	// fault lost, which would hide the loss from the test.
	Next http.RoundTripper

	mu    sync.Mutex
	sent  []Sent
	taken int // how many of sent Take returned
}

var withoutKeepAlives = &http.Transport{DisableKeepAlives: true}

// RoundTrip implements [http.RoundTripper].
func (r *Recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	s := Sent{Method: req.Method, Path: req.URL.Path, Query: req.URL.Query(), Header: req.Header.Clone()}
	if req.Body != nil {
		body, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		s.Body = body
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	r.mu.Lock()
	r.sent = append(r.sent, s)
	next := r.Next
	r.mu.Unlock()
	if next == nil {
		next = withoutKeepAlives
	}
	return next.RoundTrip(req)
}

// All returns every request sent so far, in order.
func (r *Recorder) All() []Sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Sent(nil), r.sent...)
}

// Take returns the requests sent since the last Take (or since the start), in order.
func (r *Recorder) Take() []Sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := append([]Sent(nil), r.sent[r.taken:]...)
	r.taken = len(r.sent)
	return got
}

// Matching returns the requests sent so far with method whose path matches pattern, as a
// [path.Match] pattern where "*" stands for one segment: "/v2/checkout/orders/*/capture".
func (r *Recorder) Matching(method, pattern string) []Sent {
	var out []Sent
	for _, s := range r.All() {
		if ok, _ := path.Match(pattern, s.Path); ok && s.Method == method {
			out = append(out, s)
		}
	}
	return out
}

// Endpoints counts sent by [Sent.Endpoint].
func Endpoints(sent []Sent) map[string]int {
	n := map[string]int{}
	for _, s := range sent {
		n[s.Endpoint()]++
	}
	return n
}
