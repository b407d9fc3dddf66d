package stripetest

import (
	"net/http"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// scopedKey is an idempotency key in its scope, the API key that sent it.
type scopedKey struct {
	apiKey string
	key    string
}

// cached is what an idempotency key replays: the response of the request that executed, and
// that request's Request-Id (sent back as Original-Request).
type cached struct {
	resp      *response
	requestID string
}

// keyEntry is what the fake remembers about an idempotency key: the request it was first used
// with (Endpoint "POST /v1/...", Params its sorted form) and, once it executed, its response.
type keyEntry = fakekit.KeyEntry[scopedKey, cached]

// claim looks the request's key up. It returns the new entry to execute under, or the completed
// entry to replay, or an idempotency error response. It models
// https://docs.stripe.com/api/idempotent_requests:
//
//   - "Stripe saves the status code and body of the first request made with a given idempotency
//     key after endpoint execution begins. Retries with the same key return the saved response,
//     including 500 errors": a completed entry replays (see [Server.replay]).
//   - "You can remove keys from the system automatically after they're at least 24 hours old. We
//     generate a new request if a key is reused after the original is pruned": a completed entry
//     at least Config.Retention old (24h by default, on Config.Clock) is forgotten first, and the
//     request executes anew. An entry still executing is never forgotten.
//   - "The idempotency layer compares incoming parameters to those of the original request and
//     errors if they're not the same": 400 idempotency_error (the status is observed, not
//     documented).
//   - "If incoming parameters fail validation, or the request conflicts with another request
//     that's executing concurrently, we don't save the idempotent result": a validation failure
//     releases its entry ([Server.release]); a concurrent request gets 409 and leaves the entry
//     alone.
func (s *Server) claim(k scopedKey, r *http.Request) (claimed, replay *keyEntry, _ *response) {
	endpoint := r.Method + " " + r.URL.Path
	params := r.Form.Encode() // sorted by parameter name: order-insensitive, value-exact
	e, state := s.keys.Claim(k, s.clock(), s.retention, endpoint, params)
	switch {
	case state == fakekit.KeyNew:
		return e, nil, nil
	case e.Endpoint != endpoint:
		return nil, nil, errorResponse(http.StatusBadRequest, apiError{Type: typeIdempotency,
			Message: "Keys for idempotent requests can only be used for the same endpoint they were first used for ('" +
				e.Endpoint + "' vs '" + endpoint + "'). Try using a key other than '" +
				k.key + "' if you meant to execute a different request."})
	case e.Params != params:
		return nil, nil, errorResponse(http.StatusBadRequest, apiError{Type: typeIdempotency,
			Message: "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '" +
				k.key + "' if you meant to execute a different request."})
	case state == fakekit.KeyInProgress:
		// 409 Conflict, "The request conflicts with another request (perhaps due to using the
		// same idempotent key)" (https://docs.stripe.com/api/errors), with the code
		// idempotency_key_in_use (https://docs.stripe.com/error-codes). Stripe documents no type
		// for it; idempotency_error is documented for a key "re-used on a request that does not
		// match the first request's API endpoint and parameters", which this is not, and Stripe's
		// answers to concurrent requests are seen with invalid_request_error and this message.
		return nil, nil, errorResponse(http.StatusConflict, apiError{Type: typeInvalidRequest, Code: "idempotency_key_in_use",
			Message: "There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): " +
				k.key + ". Please try again later."})
	}
	return nil, e, nil
}

// release forgets a claimed key whose request did not execute (a validation failure, FailBefore,
// a hung or abandoned request): Stripe saves no result for those.
func (s *Server) release(e *keyEntry) { s.keys.Release(e) }

// complete saves the response of an executed request for its key.
func (s *Server) complete(e *keyEntry, requestID string, resp *response) {
	s.keys.Complete(e, cached{resp: resp, requestID: requestID})
}
