package fakekit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// InState returns m[id] for a test-control method of the fake named fake ("paypaltest") that
// acts on a what ("refund") only in the state want: the error names the problem when id is
// unknown ("paypaltest: no refund \"X\"") or in another state ("paypaltest: refund \"X\" is
// FAILED, not COMPLETED").
func InState[T any](fake, what string, m map[string]T, id string, state func(T) string, want string) (T, error) {
	v, ok := m[id]
	if !ok {
		return v, fmt.Errorf("%s: no %s %q", fake, what, id)
	}
	if st := state(v); st != want {
		return v, fmt.Errorf("%s: %s %q is %s, not %s", fake, what, id, st, want)
	}
	return v, nil
}

// MustMarshal is [json.Marshal] of a fake's own types, which always encode: it panics otherwise.
func MustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only a fake's own types are encoded
	}
	return b
}

// MustMarshalIndent is [json.MarshalIndent] with two spaces of a fake's own types: it panics if
// they do not encode.
func MustMarshalIndent(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(err) // only a fake's own types are encoded
	}
	return b
}

// WriteResponse writes a response: header's fields (nil for none), then Content-Type
// contentType, status and body.
func WriteResponse(w http.ResponseWriter, header http.Header, contentType string, status int, body []byte) {
	for k, v := range header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// Or returns v, or def when v is the zero value: a Config field's default.
func Or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// OrNow returns clock, or [time.Now] when it is nil: Config.Clock's default.
func OrNow(clock func() time.Time) func() time.Time {
	if clock == nil {
		return time.Now
	}
	return clock
}

// MustConfig returns cfg, or a zero C when cfg is nil (all defaults), after checking it with
// validate. It panics with validate's error, prefixed with the fake's name ("stripetest: ").
func MustConfig[C any](name string, cfg *C, validate func(*C) error) *C {
	if cfg == nil {
		cfg = new(C)
	}
	if err := validate(cfg); err != nil {
		panic(name + ": " + err.Error())
	}
	return cfg
}

// Started starts s and returns it: a fake's NewServer is Started(NewUnstartedServer(cfg)).
func Started[S interface{ Start() }](s S) S {
	s.Start()
	return s
}
