package fakekit

import (
	"sync"
	"time"
)

// KeyState is what [Keys.Claim] found for a key.
type KeyState int

const (
	// KeyNew: the key was unknown (or forgotten): the caller executes under the new entry and
	// then completes or releases it.
	KeyNew KeyState = iota

	// KeyInProgress: the request that first used the key is still executing.
	KeyInProgress

	// KeyDone: the key's request executed; the entry holds its result, to replay.
	KeyDone
)

// KeyEntry is what a fake remembers about an idempotency key (or request id): the request it
// was first used with and, once that request executed, its result V.
type KeyEntry[K comparable, V any] struct {
	// Endpoint and Params describe the first request, as the fake fingerprints them (for
	// example "POST /v1/refunds" and its canonical parameters). They do not change.
	Endpoint, Params string

	key       K
	created   time.Time
	retention time.Duration
	done      bool
	result    V
}

// Matches reports whether a request with endpoint and params is the one the key was first used
// with.
func (e *KeyEntry[K, V]) Matches(endpoint, params string) bool {
	return e.Endpoint == endpoint && e.Params == params
}

// Result returns the saved result. Read it only from an entry [Keys.Claim] returned as
// KeyDone.
func (e *KeyEntry[K, V]) Result() V { return e.result }

// Keys remembers keys K (a key in its scope, e.g. the API key that sent it) for their
// retention, measured on the fake's clock. It is safe for concurrent use.
type Keys[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]*KeyEntry[K, V]
}

// NewKeys returns an empty Keys.
func NewKeys[K comparable, V any]() *Keys[K, V] {
	return &Keys[K, V]{m: make(map[K]*KeyEntry[K, V])}
}

// Claim looks k up at time now. A completed entry at least its retention old is forgotten
// first (an entry still executing never is). An unknown key gets a new entry, kept for
// retention once completed, and KeyNew; a known one is returned with its state, for the caller
// to compare its Endpoint and Params and to answer.
func (ks *Keys[K, V]) Claim(k K, now time.Time, retention time.Duration, endpoint, params string) (*KeyEntry[K, V], KeyState) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	e, ok := ks.m[k]
	if ok && e.done && !now.Before(e.created.Add(e.retention)) {
		delete(ks.m, k)
		ok = false
	}
	switch {
	case !ok:
		e = &KeyEntry[K, V]{Endpoint: endpoint, Params: params, key: k, created: now, retention: retention}
		ks.m[k] = e
		return e, KeyNew
	case !e.done:
		return e, KeyInProgress
	default:
		return e, KeyDone
	}
}

// Release forgets a claimed entry whose request left nothing to remember (it failed before
// executing, hung, was abandoned or changed nothing). A nil e is ignored.
func (ks *Keys[K, V]) Release(e *KeyEntry[K, V]) {
	if e == nil {
		return
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.m[e.key] == e {
		delete(ks.m, e.key)
	}
}

// Complete saves the result of a claimed entry's request: later claims of its key replay it.
// A nil e is ignored.
func (ks *Keys[K, V]) Complete(e *KeyEntry[K, V], result V) {
	if e == nil {
		return
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	e.done = true
	e.result = result
}
