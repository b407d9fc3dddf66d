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

// BeforeExecute is [Lifecycle.Before] for a request about to execute under a claimed key (or
// request id): when the request must not go on, it runs release, to forget the key, and answers
// FailBefore with failBefore. It reports whether the request should execute.
func (l *Lifecycle) BeforeExecute(w http.ResponseWriter, r *http.Request, kind FaultKind, delay time.Duration,
	release func(), failBefore func(http.ResponseWriter)) bool {
	if l.Before(r.Context(), kind, delay) {
		return true
	}
	release()
	if kind == FailBefore {
		failBefore(w)
	}
	return false // failed, or a hung request abandoned
}

// AnswerExecuted answers a request that executed under the Idempotency-Key key ("" if none):
// under ResetAfter it drops the connection; otherwise it echoes the key in the Idempotency-Key
// header, as Stripe and Adyen do, and answers with write.
func AnswerExecuted(w http.ResponseWriter, kind FaultKind, key string, write func(http.ResponseWriter)) {
	if kind == ResetAfter {
		ResetConnection(w)
		return
	}
	if key != "" {
		w.Header().Set("Idempotency-Key", key)
	}
	write(w)
}

// Apply applies a whole fault to a request that executes nothing new (a replay, or an endpoint
// without idempotency): [Lifecycle.Before], with failBefore answering FailBefore; failAfter
// answers FailAfter; ResetAfter drops the connection. It reports whether the request should be
// answered normally.
func (l *Lifecycle) Apply(w http.ResponseWriter, r *http.Request, kind FaultKind, delay time.Duration,
	failBefore, failAfter func(http.ResponseWriter)) bool {
	if !l.Before(r.Context(), kind, delay) {
		if kind == FailBefore {
			failBefore(w)
		}
		return false
	}
	switch kind {
	case FailAfter:
		failAfter(w)
		return false
	case ResetAfter:
		ResetConnection(w)
		return false
	}
	return true
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
