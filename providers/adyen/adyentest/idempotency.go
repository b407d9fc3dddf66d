package adyentest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// scopedKey is an idempotency key in its scope, the API key that sent it (Adyen scopes keys to
// the company account; one API key per account in the fake).
type scopedKey struct {
	apiKey string
	key    string
}

// keyEntry is what the fake remembers about an idempotency key: the request it was first used
// with (Endpoint "POST /payments", Params its canonical body) and, once that request executed,
// its response.
type keyEntry = fakekit.KeyEntry[scopedKey, *response]

// canonicalBody is the request body in a canonical form (keys sorted, numbers exact,
// insignificant whitespace dropped). It fails on a body that is not one JSON value.
func canonicalBody(body []byte) (string, error) {
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
	return string(canon), nil
}

// claim looks the request's key up. It returns the new entry to execute under, or the completed
// entry to replay, or an idempotency error response. Keys older than the retention are forgotten
// first; an entry still executing is never forgotten.
func (s *Server) claim(k scopedKey, endpoint, params string) (claimed, replay *keyEntry, _ *response) {
	e, state := s.keys.Claim(k, s.clock(), s.retention, endpoint, params)
	switch {
	case state == fakekit.KeyNew:
		return e, nil, nil
	case !e.Matches(endpoint, params):
		return nil, nil, validation(codeKeyMismatch,
			"Idempotency-Key was first used with another request (endpoint or body); use another key for another request")
	case state == fakekit.KeyInProgress:
		return nil, nil, apiError(http.StatusUnprocessableEntity, codeInProgress, "validation",
			"Request already processed or in progress")
	}
	return nil, e, nil
}

// release forgets a claimed key whose request did not complete (a transient error, a hung or
// abandoned request): Adyen keeps nothing for those.
func (s *Server) release(e *keyEntry) { s.keys.Release(e) }

// complete saves the response of an executed request for its key.
func (s *Server) complete(e *keyEntry, resp *response) { s.keys.Complete(e, resp) }
