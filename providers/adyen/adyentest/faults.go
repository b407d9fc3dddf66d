package adyentest

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

	// Latency delays the request by Fault.Delay before it executes. Its idempotency key stays
	// in use meanwhile, so a concurrent request with the same key gets 422 errorCode "704".
	Latency = fakekit.Latency

	// FailBefore answers 500 with "Transient-Error: true" before doing anything: nothing is
	// created and nothing is cached for the key, so a retry with the same key executes. This is
	// Adyen's transient error: the one answer its documentation says to retry with the same key.
	FailBefore = fakekit.FailBefore

	// FailAfter executes the request (objects are created, webhooks emitted) and then answers
	// 500 without Transient-Error. A non-transient error is final for its key at Adyen, so the
	// 500 is cached: a retry with the same key replays the 500 and never reveals the payment;
	// only the AUTHORISATION webhook (or a technical cancel) tells what happened.
	FailAfter = fakekit.FailAfter

	// ResetAfter executes the request, caches its real response for the key, and then drops
	// the connection (TCP RST) without answering: the response is lost. A retry with the same
	// key replays the real response.
	ResetAfter = fakekit.ResetAfter

	// Hang blocks the request until the client gives up (its context ends) or the Server is
	// closed. Nothing executes and nothing is cached; the key is in use while it hangs.
	Hang = fakekit.Hang
)

// Fault describes a failure and the requests it applies to. The matching fields are ANDed; an
// empty field matches any request. Faults never apply to /_fake/ admin requests nor to requests
// refused before execution (authentication, malformed JSON, idempotency errors); they do apply
// to replays (a replay can be delayed, fail or lose its response too).
type Fault struct {
	Kind FaultKind

	// Delay is the added latency for Kind Latency.
	Delay time.Duration

	// Path matches the endpoint's path without the API version, exactly or as a [path.Match]
	// pattern: "/payments" (not its refunds), "/payments/*/refunds", "/cancels". "" matches any;
	// otherwise it must start with "/".
	Path string

	// IdempotencyKey matches the request's Idempotency-Key header exactly; "" matches any.
	IdempotencyKey string

	// Probability is the chance, in (0, 1], that a matching request gets this fault. Used only
	// in Config.Faults; one-shot faults from [Server.Inject] always apply.
	Probability float64
}

// faultType is Adyen's part of the fault machinery: how a Fault reads, and Adyen's 500s (a
// FailBefore's says Transient-Error: true, the one answer to retry with the same key).
var faultType = fakekit.FaultType[Fault]{
	Name:  "adyentest",
	Paths: fakekit.PathPattern,
	Spec: func(f Fault) fakekit.Spec {
		return fakekit.Spec{Kind: f.Kind, Delay: f.Delay, Probability: f.Probability, Path: f.Path, Key: f.IdempotencyKey}
	},
	Fail: func(w http.ResponseWriter, kind FaultKind, why string) {
		if kind == FailBefore {
			transientError(why).write(w)
			return
		}
		internalError(why).write(w)
	},
}

// Inject queues a one-shot fault for the next matching request; queued faults are matched in
// the order they were injected and each applies once. It panics if f is invalid.
func (s *Server) Inject(f Fault) { s.faults.MustInject(f) }

// WaitHeld waits until at least n requests are held at once by a [Latency] fault (waiting out
// its Delay) or a [Hang]; a request is held from when it starts waiting until it goes on or
// its client gives up, and one about to execute keeps its key in use meanwhile. It returns
// ctx's error if ctx ends first, and [ErrClosed] if the Server is closed first.
//
// Tests wait for this event rather than for a duration, which a loaded machine stretches:
//
//	s.Inject(Fault{Kind: Latency, Delay: time.Hour, Path: "/payments"})
//	go first()              // claims the key, then is held
//	_ = s.WaitHeld(ctx, 1)  // now the same Idempotency-Key gets 422 errorCode "704"
//	s.EndLatency()          // the first executes at once
//
// With a [Hang], a client that gives up once WaitHeld returns is sure its request arrived.
func (s *Server) WaitHeld(ctx context.Context, n int) error {
	return s.life.WaitHeld(ctx, n, ErrClosed)
}

// EndLatency ends the Delay of every request a [Latency] fault holds now: each goes on at once,
// as if its Delay had passed. Hung requests stay hung; later Latency faults wait as usual.
func (s *Server) EndLatency() { s.life.EndLatency() }

// faultRequest is what a Fault matches in c.
func faultRequest(c *call) fakekit.Request {
	return fakekit.Request{Method: http.MethodPost, Path: c.path, Key: c.key}
}
