package stripetest

import (
	"net/http"
	"time"
)

// scopedKey is an idempotency key in its scope, the API key that sent it.
type scopedKey struct {
	apiKey string
	key    string
}

// keyEntry is what the fake remembers about an idempotency key: the request it was first used
// with and, once that request executed, its response.
type keyEntry struct {
	scope       scopedKey
	created     time.Time
	method      string
	path        string
	fingerprint string
	done        bool
	resp        *response
	requestID   string
}

// claim looks the request's key up. It returns the new entry to execute under, or the completed
// entry to replay, or an idempotency error response. Keys older than the retention are forgotten
// first; an entry still executing is never forgotten.
func (s *Server) claim(k scopedKey, r *http.Request) (claimed, replay *keyEntry, _ *response) {
	fp := r.Form.Encode() // sorted by parameter name: order-insensitive, value-exact
	now := s.clock()

	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.keys[k]
	if ok && e.done && !now.Before(e.created.Add(s.retention)) {
		delete(s.keys, k)
		ok = false
	}
	if !ok {
		e = &keyEntry{scope: k, created: now, method: r.Method, path: r.URL.Path, fingerprint: fp}
		s.keys[k] = e
		return e, nil, nil
	}
	if e.method != r.Method || e.path != r.URL.Path {
		return nil, nil, errorResponse(http.StatusBadRequest, apiError{Type: typeIdempotency,
			Message: "Keys for idempotent requests can only be used for the same endpoint they were first used for ('" +
				e.method + " " + e.path + "' vs '" + r.Method + " " + r.URL.Path + "'). Try using a key other than '" +
				k.key + "' if you meant to execute a different request."})
	}
	if e.fingerprint != fp {
		return nil, nil, errorResponse(http.StatusBadRequest, apiError{Type: typeIdempotency,
			Message: "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '" +
				k.key + "' if you meant to execute a different request."})
	}
	if !e.done {
		return nil, nil, errorResponse(http.StatusConflict, apiError{Type: typeIdempotency, Code: "idempotency_key_in_use",
			Message: "There is currently another in-progress request using this idempotency key (that probably means you submitted twice, and the other request is still going through): " +
				k.key + ". Please try again later."})
	}
	return nil, e, nil
}

// release forgets a claimed key whose request did not execute (a validation failure, FailBefore,
// a hung or abandoned request): Stripe saves no result for those.
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
func (s *Server) complete(e *keyEntry, requestID string, resp *response) {
	if e == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e.done = true
	e.resp = resp
	e.requestID = requestID
}
