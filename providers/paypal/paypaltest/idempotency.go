package paypaltest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// opKind tells how an endpoint treats PayPal-Request-Id.
type opKind int

const (
	opRead        opKind = iota // no request id semantics (GETs, signature verification)
	opCreateOrder               // POST /v2/checkout/orders: request id kept OrderRetention
	opCapture                   // POST /v2/checkout/orders/{id}/capture: an Orders call, kept OrderRetention
	opRefund                    // POST /v2/payments/captures/{id}/refund: Payments v2, kept RefundRetention
)

// requestScope is a request id in its scope, the REST app (client id) that sent it.
type requestScope struct {
	clientID  string
	requestID string
}

// resourceRef names the resource a request created or changed: what a replay of its request id
// shows the latest status of.
type resourceRef struct {
	kind string // "order" or "refund"
	id   string
}

// requestEntry is what the fake remembers about a request id: the request it was first used
// with (Endpoint "POST /v2/...", Params its compacted body), its retention, and the resource
// it created or changed.
type requestEntry = fakekit.KeyEntry[requestScope, resourceRef]

// call is one API request being executed.
type call struct {
	r         *http.Request
	body      []byte
	requestID string // PayPal-Request-Id, "" if none
	clientID  string
}

// handler runs one API operation with s.mu held. It returns the response and the resource it
// created or changed; a zero resourceRef means nothing changed (validation errors, reads), and
// the request id, if any, is then not remembered.
type handler func(c *call) (*response, resourceRef)

// api wraps a handler with authentication, PayPal-Request-Id semantics and faults.
func (s *Server) api(kind opKind, h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clientID, errResp := s.authenticate(r)
		if errResp != nil {
			errResp.write(w)
			return
		}
		body, errResp := readBody(r)
		if errResp != nil {
			errResp.write(w)
			return
		}
		c := &call{r: r, body: body, clientID: clientID, requestID: r.Header.Get("PayPal-Request-Id")}
		var entry *requestEntry
		if kind != opRead && c.requestID != "" {
			if len(c.requestID) > MaxRequestIDLen {
				apiError(http.StatusBadRequest, "INVALID_REQUEST", "Request is not well-formed, syntactically incorrect, or violates schema.",
					detail{Field: "PayPal-Request-Id", Location: "header", Issue: "INVALID_PARAMETER_SYNTAX",
						Description: "PayPal-Request-Id must be at most 108 characters."}).write(w)
				return
			}
			var replay *requestEntry
			entry, replay, errResp = s.claim(kind, c)
			if errResp != nil {
				errResp.write(w)
				return
			}
			if replay != nil {
				s.replay(w, r, c.requestID, replay)
				return
			}
		}
		s.execute(w, c, h, entry)
	})
}

// retentionOf is how long a request id of kind is kept: the Orders API's 6 hours for a create
// and for a capture of an order (both documented on the Orders v2 reference), Payments v2's 45
// days for a refund of a capture. See [DefaultOrderRetention], [DefaultRefundRetention].
func (s *Server) retentionOf(kind opKind) time.Duration {
	if kind == opRefund {
		return s.refundRetention
	}
	return s.orderRetention
}

// compactBody is the body without insignificant whitespace (as sent when it is not JSON).
func compactBody(body []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, body) != nil {
		return string(body)
	}
	return buf.String()
}

// claim looks the request id up. It returns the new entry to execute under, or the completed
// entry to replay, or 409 PREVIOUS_REQUEST_IN_PROGRESS. Ids older than their retention are
// forgotten first; an entry still executing is never forgotten.
func (s *Server) claim(kind opKind, c *call) (claimed, replay *requestEntry, _ *response) {
	endpoint, params := c.r.Method+" "+c.r.URL.Path, compactBody(c.body)
	e, state := s.requestIDs.Claim(requestScope{c.clientID, c.requestID}, s.clock(), s.retentionOf(kind), endpoint, params)
	switch state {
	case fakekit.KeyNew:
		return e, nil, nil
	case fakekit.KeyInProgress:
		return nil, nil, apiError(http.StatusConflict, "RESOURCE_CONFLICT",
			"The server has detected a conflict while processing this request.",
			detail{Issue: "PREVIOUS_REQUEST_IN_PROGRESS", Location: "header", Field: "PayPal-Request-Id",
				Description: "A previous request with the same PayPal-Request-Id is still in progress. Retry after it completes."})
	}
	if !e.Matches(endpoint, params) {
		s.mu.Lock()
		s.mismatches++
		s.mu.Unlock()
	}
	return nil, e, nil
}

// execute runs h under the fault chosen for the request. entry is the claimed request id, or nil.
func (s *Server) execute(w http.ResponseWriter, c *call, h handler, entry *requestEntry) {
	kind, ok := s.faults.BeforeExecute(w, c.r, faultRequest(c.r, c.requestID), func() { s.requestIDs.Release(entry) })
	if !ok {
		return
	}

	s.mu.Lock()
	resp, ref := h(c)
	s.mu.Unlock()

	if ref == (resourceRef{}) {
		// A read, or a request that created nothing: no request id to keep, and the fault's
		// part after execution still applies (a read's lost or failed answer).
		s.requestIDs.Release(entry)
	} else {
		s.requestIDs.Complete(entry, ref) // even under FailAfter: a retry replays the resource
	}
	if kind == FailAfter {
		resp = internalError("injected FailAfter: the request was executed")
	}
	fakekit.AnswerExecuted(w, kind, "", resp.write) // PayPal echoes no request id
}

// replay answers a request id seen before with the latest status of its resource, 200.
func (s *Server) replay(w http.ResponseWriter, r *http.Request, requestID string, e *requestEntry) {
	if !s.faults.Apply(w, r, faultRequest(r, requestID)) {
		return
	}
	s.mu.Lock()
	var resp *response
	switch ref := e.Result(); ref.kind {
	case "order":
		resp = jsonResponse(http.StatusOK, s.orders[ref.id].view(s))
	default:
		resp = jsonResponse(http.StatusOK, s.refunds[ref.id].view())
	}
	s.mu.Unlock()
	resp.write(w)
}
