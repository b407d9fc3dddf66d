package stripetest

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

	// Latency delays the request by Fault.Delay before it executes. An idempotency key stays
	// in use meanwhile, so concurrent requests with the same key get 409 idempotency_key_in_use.
	Latency = fakekit.Latency

	// FailBefore answers 500 api_error before doing anything. Nothing is created and nothing is
	// cached for the key: a retry with the same key executes.
	FailBefore = fakekit.FailBefore

	// FailAfter executes the request (objects are created) and then answers 500 api_error with
	// Stripe-Should-Retry: false. The 500 is cached for the key, as Stripe caches 500s: a retry
	// with the same key replays the 500 and never reveals the object.
	FailAfter = fakekit.FailAfter

	// ResetAfter executes the request, caches its real response for the key, and then drops the
	// connection (TCP RST) without answering: the response is lost. A retry with the same key
	// replays the real response. Send through [Server.Client]: a client that keeps connections
	// alive resends the request by itself on a reused connection and never sees the loss.
	ResetAfter = fakekit.ResetAfter

	// Hang blocks the request until the client gives up (its context ends) or the Server is
	// closed. Nothing executes and nothing is cached; the key is in use while it hangs.
	Hang = fakekit.Hang
)

// Fault describes a failure and the requests it applies to. The matching fields are ANDed;
// an empty field matches any request. Faults never apply to /_fake/ admin requests nor to
// requests refused before execution (authentication, idempotency errors); they do apply to
// replays (a replay can be delayed, fail or lose its response too).
type Fault struct {
	Kind FaultKind

	// Delay is the added latency for Kind Latency.
	Delay time.Duration

	// Method matches the HTTP method ("POST", "GET"); "" matches any.
	Method string

	// Path matches a request path prefix, e.g. "/v1/payment_intents" (its items too); "" matches
	// any. It must start with "/".
	Path string

	// IdempotencyKey matches the request's Idempotency-Key header exactly; "" matches any.
	IdempotencyKey string

	// Probability is the chance, in (0, 1], that a matching request gets this fault. Used only
	// in Config.Faults; one-shot faults from Server.Inject always apply.
	Probability float64
}

// faultType is Stripe's part of the fault machinery: how a Fault reads, and Stripe's 500.
var faultType = fakekit.FaultType[Fault]{
	Name:  "stripetest",
	Paths: fakekit.PathPrefix,
	Spec: func(f Fault) fakekit.Spec {
		return fakekit.Spec{Kind: f.Kind, Delay: f.Delay, Probability: f.Probability,
			Method: f.Method, Path: f.Path, Key: f.IdempotencyKey}
	},
	Fail: func(w http.ResponseWriter, _ FaultKind, why string) { internalError(why).write(w) },
}

// Inject queues a one-shot fault for the next matching request; queued faults are matched in
// the order they were injected and each applies once. It panics if f is invalid. A
// [ResetAfter] reaches a caller only through a client without keep-alives, such as
// [Server.Client]'s (see "Faults" in the package documentation).
func (s *Server) Inject(f Fault) { s.faults.MustInject(f) }

// WaitHeld waits until at least n requests are held at once by a [Latency] fault (waiting out
// its Delay) or a [Hang]; a request is held from when it starts waiting until it goes on or
// its client gives up, and one about to execute keeps its key in use meanwhile. It returns
// ctx's error if ctx ends first, and [ErrClosed] if the Server is closed first.
//
// Tests wait for this event rather than for a duration, which a loaded machine stretches:
//
//	s.Inject(Fault{Kind: Latency, Delay: time.Hour, Path: "/v1/payment_intents"})
//	go first()              // claims the key, then is held
//	_ = s.WaitHeld(ctx, 1)  // now the same Idempotency-Key gets 409 idempotency_key_in_use
//	s.EndLatency()          // the first executes at once
//
// With a [Hang], a client that gives up once WaitHeld returns is sure its request arrived.
func (s *Server) WaitHeld(ctx context.Context, n int) error {
	return s.life.WaitHeld(ctx, n, ErrClosed)
}

// EndLatency ends the Delay of every request a [Latency] fault holds now: each goes on at once,
// as if its Delay had passed. Hung requests stay hung; later Latency faults wait as usual.
func (s *Server) EndLatency() { s.life.EndLatency() }

// faultRequest is what a Fault matches in r, sent with the Idempotency-Key key.
func faultRequest(r *http.Request, key string) fakekit.Request {
	return fakekit.Request{Method: r.Method, Path: r.URL.Path, Key: key}
}
