package adyentest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// scopedKey is an idempotency key in its scope, the API key that sent it (Adyen scopes keys to
// the company account; one API key per account in the fake).
type scopedKey struct {
	apiKey string
	key    string
}

// keyEntry is what the fake remembers about an idempotency key: the request it was first used
// with and, once that request executed, its response.
type keyEntry struct {
	scope       scopedKey
	created     time.Time
	fingerprint string
	done        bool
	resp        *response
}

// fingerprint is the request's method, path and body in a canonical form (keys sorted, numbers
// exact, insignificant whitespace dropped). It fails on a body that is not one JSON value.
func fingerprint(method, path string, body []byte) (string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	if dec.More() {
		return "", fmt.Errorf("trailing data after the JSON value")
	}
	canon, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return method + " " + path + " " + string(canon), nil
}

// claim looks the request's key up. It returns the new entry to execute under, or the completed
// entry to replay, or an idempotency error response. Keys older than the retention are forgotten
// first; an entry still executing is never forgotten.
func (s *Server) claim(k scopedKey, fp string) (claimed, replay *keyEntry, _ *response) {
	now := s.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.keys[k]
	if ok && e.done && !now.Before(e.created.Add(s.retention)) {
		delete(s.keys, k)
		ok = false
	}
	if !ok {
		e = &keyEntry{scope: k, created: now, fingerprint: fp}
		s.keys[k] = e
		return e, nil, nil
	}
	if e.fingerprint != fp {
		return nil, nil, validation(codeKeyMismatch,
			"Idempotency-Key was first used with another request (endpoint or body); use another key for another request")
	}
	if !e.done {
		return nil, nil, apiError(http.StatusUnprocessableEntity, codeInProgress, "validation",
			"Request already processed or in progress")
	}
	return nil, e, nil
}

// release forgets a claimed key whose request did not complete (a transient error, a hung or
// abandoned request): Adyen keeps nothing for those.
func (s *Server) release(e *keyEntry) {
	if e == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys[e.scope] == e {
		delete(s.keys, e.scope)
	}
}

// complete saves the response of an executed request for its key.
func (s *Server) complete(e *keyEntry, resp *response) {
	if e == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e.done = true
	e.resp = resp
}
