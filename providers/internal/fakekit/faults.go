package fakekit

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// FaultKind is what goes wrong with a request. Each fake documents what each kind does to its
// provider's protocol (which error it answers, what is cached for a key).
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

// Spec is what every fake's Fault has in common: what goes wrong and how likely it is.
type Spec struct {
	Kind        FaultKind
	Delay       time.Duration // for Latency
	Probability float64       // for Config.Faults rules
}

// Validate checks the kind and the delay (the probability is checked for rules only, by
// [FaultType.ValidateRules]).
func (s Spec) Validate() error {
	if s.Kind <= NoFault || s.Kind > Hang {
		return errors.New("Kind is not a known FaultKind")
	}
	if s.Kind == Latency && s.Delay <= 0 {
		return errors.New("Delay must be positive for Latency")
	}
	return nil
}

// FaultType tells fakekit how to read and check a fake's own Fault type F, whose matching
// fields are the fake's business.
type FaultType[F any] struct {
	// Name is the fake's package name ("stripetest"), for the panics of [Faults.MustInject].
	Name string

	// Spec returns f's kind, delay and probability.
	Spec func(f F) Spec

	// Check checks f's own matching fields; nil when there is nothing to check.
	Check func(f F) error
}

// Validate checks f's spec, then its own fields.
func (t FaultType[F]) Validate(f F) error {
	if err := t.Spec(f).Validate(); err != nil {
		return err
	}
	if t.Check != nil {
		return t.Check(f)
	}
	return nil
}

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

// Faults chooses the fault for each request: one-shot faults queued by Inject first, then the
// probabilistic rules, drawn from a seeded source. It is safe for concurrent use.
type Faults[F any] struct {
	typ   FaultType[F]
	rules []F

	mu       sync.Mutex
	rng      *rand.Rand
	injected []F
}

// NewFaults returns the Faults for rules (copied; validate them first with
// [FaultType.ValidateRules]). seed 0 means 1; stream tells the fakes' random sequences apart.
func NewFaults[F any](t FaultType[F], rules []F, seed int64, stream uint64) *Faults[F] {
	if seed == 0 {
		seed = 1
	}
	return &Faults[F]{
		typ:   t,
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

// Pick chooses the fault for a request about to execute or replay: the first injected fault
// that matches (it is used up), else the first rule that matches and whose draw hits, else the
// zero F. Draws happen only for matching rules, so a seed and a request sequence fix the
// outcome. match is called with Faults' lock held and must not call back into it.
func (p *Faults[F]) Pick(match func(f F) bool) F {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, f := range p.injected {
		if match(f) {
			p.injected = append(p.injected[:i:i], p.injected[i+1:]...)
			return f
		}
	}
	for _, f := range p.rules {
		if match(f) && p.rng.Float64() < p.typ.Spec(f).Probability {
			return f
		}
	}
	var none F
	return none
}
