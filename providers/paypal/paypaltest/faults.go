package paypaltest

import (
	"context"
	"net/http"
	"time"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// FaultKind is what goes wrong with a request. Its String method names the kind ("Latency").
type FaultKind = fakekit.FaultKind

const (
	// NoFault is the zero FaultKind: the request is served normally.
	NoFault = fakekit.NoFault

	// Latency delays the request by Fault.Delay before it executes. Its PayPal-Request-Id stays
	// in use meanwhile: a duplicate gets 409 PREVIOUS_REQUEST_IN_PROGRESS.
	Latency = fakekit.Latency

	// FailBefore answers 500 INTERNAL_SERVER_ERROR before doing anything. Nothing changes and
	// the request id is not remembered: a retry with it executes.
	FailBefore = fakekit.FailBefore

	// FailAfter executes the request (the order, capture or refund exists) and then answers 500.
	// The request id is remembered: as at PayPal, a retry with it returns the latest status of
	// the resource with 200 (unlike Stripe, which replays the 500).
	FailAfter = fakekit.FailAfter

	// ResetAfter executes the request, remembers its request id, and drops the connection (TCP
	// RST) without answering: the response is lost. A retry with the same request id returns the
	// latest status of the resource with 200.
	ResetAfter = fakekit.ResetAfter

	// Hang blocks the request until the client gives up (its context ends) or the Server is
	// closed. Nothing executes; the request id is in use while it hangs, then forgotten.
	Hang = fakekit.Hang
)

// Fault describes a failure and the requests it applies to. The matching fields are ANDed; an
// empty field matches any request. Faults never apply to /_fake/ admin requests nor to requests
// refused before execution (authentication, request ids in progress); they do apply to the
// OAuth token endpoint, to reads and to replays.
type Fault struct {
	Kind FaultKind

	// Delay is the added latency for Kind Latency.
	Delay time.Duration

	// Method matches the HTTP method ("POST", "GET"); "" matches any.
	Method string

	// Path matches the request path exactly, or as a [path.Match] pattern where "*" stands for
	// one segment: "/v2/checkout/orders" is the create only, "/v2/checkout/orders/*/capture"
	// any capture. "" matches any; otherwise it must start with "/".
	Path string

	// RequestID matches the PayPal-Request-Id header exactly; "" matches any.
	RequestID string

	// Probability is the chance, in (0, 1], that a matching request gets this fault. Used only in
	// Config.Faults; one-shot faults from Server.Inject always apply.
	Probability float64
}

// faultType is PayPal's part of the fault machinery: how a Fault reads, and PayPal's 500.
var faultType = fakekit.FaultType[Fault]{
	Name:  "paypaltest",
	Paths: fakekit.PathPattern,
	Spec: func(f Fault) fakekit.Spec {
		return fakekit.Spec{Kind: f.Kind, Delay: f.Delay, Probability: f.Probability,
			Method: f.Method, Path: f.Path, Key: f.RequestID}
	},
	Fail: func(w http.ResponseWriter, _ FaultKind, why string) { internalError(why).write(w) },
}

// Inject queues a one-shot fault for the next matching request; queued faults are matched in the
// order they were injected and each applies once. It panics if f is invalid.
func (s *Server) Inject(f Fault) { s.faults.MustInject(f) }

// WaitHeld waits until at least n requests are held at once by a [Latency] fault (waiting out
// its Delay) or a [Hang]; a request is held from when it starts waiting until it goes on or
// its client gives up, and one about to execute keeps its key in use meanwhile. It returns
// ctx's error if ctx ends first, and [ErrClosed] if the Server is closed first.
//
// Tests wait for this event rather than for a duration, which a loaded machine stretches:
//
//	s.Inject(Fault{Kind: Latency, Delay: time.Hour, Path: "/v2/checkout/orders"})
//	go first()              // claims the request id, then is held
//	_ = s.WaitHeld(ctx, 1)  // now the same PayPal-Request-Id gets 409 PREVIOUS_REQUEST_IN_PROGRESS
//	s.EndLatency()          // the first executes at once
//
// With a [Hang], a client that gives up once WaitHeld returns is sure its request arrived.
func (s *Server) WaitHeld(ctx context.Context, n int) error {
	return s.life.WaitHeld(ctx, n, ErrClosed)
}

// EndLatency ends the Delay of every request a [Latency] fault holds now: each goes on at once,
// as if its Delay had passed. Hung requests stay hung; later Latency faults wait as usual.
func (s *Server) EndLatency() { s.life.EndLatency() }

// faultRequest is what a Fault matches in r, sent with the PayPal-Request-Id requestID.
func faultRequest(r *http.Request, requestID string) fakekit.Request {
	return fakekit.Request{Method: r.Method, Path: r.URL.Path, Key: requestID}
}
