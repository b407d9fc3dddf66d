package fakekit

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"
)

// Lifecycle is a fake server's listener and closing signal: Start serves a handler on a loopback
// port like [httptest.NewServer], Close releases hung requests and shuts the listener down. It
// also counts the requests a Latency or Hang fault holds, so that a test can act while a request
// is held ([Lifecycle.WaitHeld], [Lifecycle.EndLatency]) instead of sleeping and hoping.
type Lifecycle struct {
	name    string // the fake's package name, for panics
	ts      *httptest.Server
	closing chan struct{}
	once    sync.Once

	mu      sync.Mutex
	held    int           // requests waiting in Before for a Latency or Hang fault
	changed chan struct{} // closed, and replaced, whenever held grows
	endLat  chan struct{} // closed, and replaced, by EndLatency
}

// NewLifecycle returns a Lifecycle, not started, for the fake named name ("stripetest").
func NewLifecycle(name string) *Lifecycle {
	return &Lifecycle{name: name, closing: make(chan struct{}), changed: make(chan struct{}), endLat: make(chan struct{})}
}

// Start serves h on a loopback port. It panics if it was already started.
func (l *Lifecycle) Start(h http.Handler) {
	if l.ts != nil {
		panic(l.name + ": Server already started")
	}
	l.ts = httptest.NewServer(h)
}

// URL returns the root URL, "http://127.0.0.1:port", or "" if not started.
func (l *Lifecycle) URL() string {
	if l.ts == nil {
		return ""
	}
	return l.ts.URL
}

// Close releases hung and delayed requests, runs stop (stopping webhook delivery, say) unless
// it is nil, and, if started, shuts the listener down and waits for outstanding requests. It
// may be called more than once.
func (l *Lifecycle) Close(stop func()) {
	l.once.Do(func() { close(l.closing) })
	if stop != nil {
		stop()
	}
	if l.ts != nil {
		l.ts.Close()
	}
}

// Before applies the part of a fault that happens before execution: Latency waits delay, Hang
// waits for the client to give up (ctx) or Close, FailBefore stops at once. It reports whether
// the request should go on.
//
// A request waiting for Latency or Hang counts as held ([Lifecycle.WaitHeld]); a Latency also
// ends early at [Lifecycle.EndLatency].
func (l *Lifecycle) Before(ctx context.Context, kind FaultKind, delay time.Duration) bool {
	switch kind {
	case Latency:
		endLat := l.hold()
		defer l.unhold()
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-endLat:
		case <-ctx.Done():
			return false
		case <-l.closing:
			return false
		}
	case Hang:
		l.hold()
		defer l.unhold()
		select {
		case <-ctx.Done():
		case <-l.closing:
		}
		return false
	case FailBefore:
		return false
	}
	return true
}

// hold counts a request as held and returns the channel that ends its Latency early.
func (l *Lifecycle) hold() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held++
	close(l.changed)
	l.changed = make(chan struct{})
	return l.endLat
}

func (l *Lifecycle) unhold() {
	l.mu.Lock()
	l.held--
	l.mu.Unlock()
}

// WaitHeld waits until at least n requests are held at once by a Latency or Hang fault (waiting
// out their delay, or hung); a request counts from the moment it starts waiting, its key already
// claimed, until it goes on or is abandoned. It returns ctx's error if ctx ends first, and
// errClosed if Close comes first.
//
// It is the event a test waits for instead of a duration: with a Latency fault of a long Delay
// and [Lifecycle.EndLatency], "a duplicate arrives while the first request still executes"
// holds on a machine of any speed; with Hang, "the client gives up on a request the provider
// received" never becomes "the request was never sent".
func (l *Lifecycle) WaitHeld(ctx context.Context, n int, errClosed error) error {
	for {
		l.mu.Lock()
		held, changed := l.held, l.changed
		l.mu.Unlock()
		if held >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-l.closing:
			return errClosed
		}
	}
}

// EndLatency ends the delay of every request a Latency fault holds now, as if its Delay had
// passed: each goes on at once. Later Latency faults wait their Delay as usual; hung requests
// stay hung.
func (l *Lifecycle) EndLatency() {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.endLat)
	l.endLat = make(chan struct{})
}

// ResetConnection drops the connection without a response, with a TCP RST where possible, so
// the client sees the response as lost.
func ResetConnection(w http.ResponseWriter) {
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

// ClientTimeout bounds each request of a fake's client ([NewClient]), so that a test that
// forgot to end a Hang fails instead of hanging.
const ClientTimeout = time.Minute

// NewClient returns the HTTP client each fake's Server.Client gives: keep-alives off and a
// [ClientTimeout] timeout. Each request opens its own connection, so that a ResetAfter reaches
// the caller as the lost response it models. Over a kept-alive connection that breaks before
// the response, net/http resends a request on its own when it may (GET, HEAD, OPTIONS, TRACE,
// or any request with an Idempotency-Key or X-Idempotency-Key header): the fake then replays
// the cached answer and the fault heals unseen.
func NewClient() *http.Client {
	return &http.Client{Timeout: ClientTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
}
