package fakekit

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

// FaultKind is what goes wrong with a request. Each fake documents what each kind does to its
// provider's protocol (which error it answers, what is remembered for a key).
type FaultKind int

const (
	// NoFault is the zero FaultKind: the request is served normally.
	NoFault FaultKind = iota

	// Latency delays the request by the fault's Delay before it executes.
	Latency

	// FailBefore fails the request before anything executes.
	FailBefore

	// FailAfter executes the request and then answers an error.
	FailAfter

	// ResetAfter executes the request and then drops the connection without answering.
	ResetAfter

	// Hang blocks the request until the client gives up or the server is closed; nothing
	// executes.
	Hang
)

var kindNames = [...]string{"NoFault", "Latency", "FailBefore", "FailAfter", "ResetAfter", "Hang"}

func (k FaultKind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "FaultKind(?)"
}

// Spec is what every fake's Fault says: what goes wrong, how likely it is, and which requests
// it applies to. The matching fields are ANDed; an empty one matches any request.
type Spec struct {
	Kind        FaultKind
	Delay       time.Duration // for Latency
	Probability float64       // for Config.Faults rules

	Method string // the request's method, in any case
	Path   string // the request's path, as [FaultType.Paths] says
	Key    string // the request's key (Idempotency-Key, PayPal-Request-Id), exactly
}

// Validate checks the kind, the delay and the path (the probability is checked for rules only,
// by [FaultType.ValidateRules]).
func (s Spec) Validate(paths PathRule) error {
	if s.Kind <= NoFault || s.Kind > Hang {
		return errors.New("Kind is not a known FaultKind")
	}
	if s.Kind == Latency && s.Delay <= 0 {
		return errors.New("Delay must be positive for Latency")
	}
	if s.Path == "" {
		return nil
	}
	if !strings.HasPrefix(s.Path, "/") {
		return fmt.Errorf("Path %q must start with \"/\"", s.Path)
	}
	if paths == PathPattern {
		if _, err := path.Match(s.Path, "/"); err != nil {
			return fmt.Errorf("Path %q is not a valid pattern: %v", s.Path, err)
		}
	}
	return nil
}

// Matches reports whether s applies to req.
func (s Spec) Matches(paths PathRule, req Request) bool {
	if s.Method != "" && !strings.EqualFold(s.Method, req.Method) {
		return false
	}
	if s.Key != "" && s.Key != req.Key {
		return false
	}
	if paths == PathPrefix {
		return strings.HasPrefix(req.Path, s.Path)
	}
	p := strings.TrimSuffix(req.Path, "/")
	if s.Path == "" || s.Path == p {
		return true
	}
	ok, _ := path.Match(s.Path, p)
	return ok
}

// Request is what a fault is matched against.
type Request struct {
	Method string
	Path   string // the endpoint's path, without an API version prefix
	Key    string // the request's key (Idempotency-Key, PayPal-Request-Id); "" if none
}

// PathRule is how a fake's Fault.Path matches a request's path. Either way the Path must start
// with "/".
type PathRule int

const (
	// PathPrefix matches a path that starts with Fault.Path: "/v1/payment_intents" also
	// matches "/v1/payment_intents/pi_1".
	PathPrefix PathRule = iota

	// PathPattern matches a path (without a trailing "/") equal to Fault.Path or matching it as
	// a [path.Match] pattern, where "*" stands for one segment: "/payments" is not
	// "/payments/X/refunds", "/payments/*/refunds" is any refund.
	PathPattern
)

// FaultType is what fakekit needs to know of a fake's own Fault type F: its protocol's part of
// the fault machinery.
type FaultType[F any] struct {
	// Name is the fake's package name ("stripetest"), for the panics of [Faults.MustInject].
	Name string

	// Spec returns what f says.
	Spec func(f F) Spec

	// Paths is how f's Path matches a request's path.
	Paths PathRule

	// Fail writes the provider's error answer, its status and body, to a request that a
	// FailBefore stops before it executes, or that a FailAfter fails without executing
	// anything new (a replay, an endpoint without keys); why says which, for the message. A
	// FailAfter of a request that executed is the fake's own business: what its provider
	// remembers for the key differs.
	Fail func(w http.ResponseWriter, kind FaultKind, why string)
}

// The reasons [FaultType.Fail] is given.
const (
	whyFailBefore = "injected FailBefore: nothing was executed"
	whyFailAfter  = "injected FailAfter: nothing new was executed"
)

// Validate checks f.
func (t FaultType[F]) Validate(f F) error { return t.Spec(f).Validate(t.Paths) }

// ValidateRules checks Config.Faults: each rule needs a probability in (0, 1] and must be
// valid. The error names the bad rule as "Config.Faults[i]".
func (t FaultType[F]) ValidateRules(rules []F) error {
	for i, f := range rules {
		if p := t.Spec(f).Probability; p <= 0 || p > 1 {
			return fmt.Errorf("Config.Faults[%d].Probability must be in (0, 1], got %v", i, p)
		}
		if err := t.Validate(f); err != nil {
			return fmt.Errorf("Config.Faults[%d]: %w", i, err)
		}
	}
	return nil
}

// Faults chooses the fault for each request, one-shot faults queued by Inject first, then the
// probabilistic rules drawn from a seeded source, and applies it with its [Lifecycle] and its
// fake's answers. It is safe for concurrent use.
type Faults[F any] struct {
	typ   FaultType[F]
	life  *Lifecycle
	rules []F

	mu       sync.Mutex
	rng      *rand.Rand
	injected []F
}

// NewFaults returns the Faults of the fake whose server is life, for rules (copied; validate
// them first with [FaultType.ValidateRules]). seed 0 means 1; stream tells the fakes' random
// sequences apart.
func NewFaults[F any](t FaultType[F], life *Lifecycle, rules []F, seed int64, stream uint64) *Faults[F] {
	if seed == 0 {
		seed = 1
	}
	return &Faults[F]{
		typ:   t,
		life:  life,
		rules: append([]F(nil), rules...),
		rng:   rand.New(rand.NewPCG(uint64(seed), stream)),
	}
}

// Inject queues a one-shot fault for the next matching request; queued faults are matched in
// the order they were injected and each applies once. It returns f's validation error and
// queues nothing when f is invalid.
func (p *Faults[F]) Inject(f F) error {
	if err := p.typ.Validate(f); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.injected = append(p.injected, f)
	return nil
}

// MustInject is Inject for a fake's Server.Inject, which panics if f is invalid.
func (p *Faults[F]) MustInject(f F) {
	if err := p.Inject(f); err != nil {
		panic(p.typ.Name + ": Inject: " + err.Error())
	}
}

// Pick chooses the fault for req, a request about to execute or replay: the first injected
// fault that matches (it is used up), else the first rule that matches and whose draw hits,
// else NoFault. Draws happen only for matching rules, so a seed and a request sequence fix the
// outcome.
func (p *Faults[F]) Pick(req Request) Spec {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, f := range p.injected {
		if s := p.typ.Spec(f); s.Matches(p.typ.Paths, req) {
			p.injected = append(p.injected[:i:i], p.injected[i+1:]...)
			return s
		}
	}
	for _, f := range p.rules {
		if s := p.typ.Spec(f); s.Matches(p.typ.Paths, req) && p.rng.Float64() < s.Probability {
			return s
		}
	}
	return Spec{}
}

// BeforeExecute picks the fault for a request about to execute under a claimed key (or request
// id) and applies its part before execution ([Lifecycle.Before]). When the request must not go
// on, it runs release, to forget the key, and answers a FailBefore with [FaultType.Fail]. It
// returns the fault's kind, for the answer after execution ([AnswerExecuted]), and whether the
// request should execute.
func (p *Faults[F]) BeforeExecute(w http.ResponseWriter, r *http.Request, req Request, release func()) (FaultKind, bool) {
	f := p.Pick(req)
	if p.life.Before(r.Context(), f.Kind, f.Delay) {
		return f.Kind, true
	}
	release()
	if f.Kind == FailBefore {
		p.typ.Fail(w, FailBefore, whyFailBefore)
	}
	return f.Kind, false // failed, or a hung request abandoned
}

// AnswerExecuted answers a request that executed under the fault kind: under ResetAfter it drops
// the connection; otherwise it echoes key in the Idempotency-Key header, as Stripe and Adyen do
// (unless key is ""), and answers with write.
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

// Apply picks the fault for a request that executes nothing new (a replay, or an endpoint
// without keys) and applies all of it: [Lifecycle.Before], FailBefore and FailAfter answered by
// [FaultType.Fail], ResetAfter dropping the connection. It reports whether the request should
// be answered normally.
func (p *Faults[F]) Apply(w http.ResponseWriter, r *http.Request, req Request) bool {
	f := p.Pick(req)
	if !p.life.Before(r.Context(), f.Kind, f.Delay) {
		if f.Kind == FailBefore {
			p.typ.Fail(w, FailBefore, whyFailBefore)
		}
		return false
	}
	switch f.Kind {
	case FailAfter:
		p.typ.Fail(w, FailAfter, whyFailAfter)
		return false
	case ResetAfter:
		ResetConnection(w)
		return false
	}
	return true
}
