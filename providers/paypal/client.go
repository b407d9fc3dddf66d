package paypal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tokenRefreshMargin is how long before its expiry a token is replaced (at most a quarter of
// its lifetime), so that a request never leaves with a token about to expire in flight.
const tokenRefreshMargin = 5 * time.Minute

// maxResponseBytes bounds a response body read.
const maxResponseBytes = 4 << 20

// Client is a small typed PayPal REST client (Orders v2, Payments v2, Transaction Search, webhook
// verification) on
// net/http. It fetches an OAuth2 access token with the client credentials, caches it, replaces
// it shortly before it expires (concurrent callers share one refresh), and, when PayPal answers
// 401 anyway, refreshes once and resends the request once: a 401 executed nothing. It does not
// retry otherwise. It holds no globals and is safe for concurrent use.
//
// Its methods return, for an HTTP error answer, *[APIError]; for a failure to obtain a token,
// *[TokenError] (the request itself was not sent); for a transport failure or an unreadable
// response, *[TransportError] saying whether the request may have been received. [Provider]
// maps them to payments' outcome classes.
type Client struct {
	cfg Config

	mu        sync.Mutex
	token     string
	refreshAt time.Time
	flight    *tokenFlight
}

// tokenFlight is one token request that concurrent callers wait for.
type tokenFlight struct {
	done  chan struct{}
	token string
	err   error
}

// NewClient returns a Client for cfg. Errors: *[ConfigError] naming the bad field.
func NewClient(cfg *Config) (*Client, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Client{cfg: c}, nil
}

// APIError is PayPal's error answer: {name, message, debug_id, details[{field, issue, ...}]}, or
// the OAuth endpoint's {error, error_description} (as Name and Message).
type APIError struct {
	// Status is the HTTP status.
	Status  int
	Name    string
	Message string
	DebugID string
	Details []ErrorDetail
}

// ErrorDetail is one entry of an error's details.
type ErrorDetail struct {
	Field       string `json:"field,omitempty"`
	Value       string `json:"value,omitempty"`
	Location    string `json:"location,omitempty"`
	Issue       string `json:"issue"`
	Description string `json:"description,omitempty"`
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "paypal: %d %s", e.Status, e.Name)
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	for _, d := range e.Details {
		fmt.Fprintf(&b, " [%s", d.Issue)
		if d.Field != "" {
			b.WriteString(" " + d.Field)
		}
		if d.Description != "" {
			b.WriteString(": " + d.Description)
		}
		b.WriteString("]")
	}
	if e.DebugID != "" {
		b.WriteString(" (debug_id " + e.DebugID + ")")
	}
	return b.String()
}

// Issue returns the first detail's issue ("ORDER_ALREADY_CAPTURED"), or Name without details.
func (e *APIError) Issue() string {
	if len(e.Details) > 0 && e.Details[0].Issue != "" {
		return e.Details[0].Issue
	}
	return e.Name
}

// HasIssue reports whether any detail carries issue.
func (e *APIError) HasIssue(issue string) bool {
	for _, d := range e.Details {
		if d.Issue == issue {
			return true
		}
	}
	return e.Name == issue
}

// field returns the first detail's field, if any.
func (e *APIError) field() string {
	for _, d := range e.Details {
		if d.Field != "" {
			return d.Field
		}
	}
	return ""
}

// TransportError is a request that got no readable answer.
type TransportError struct {
	// Sent is false only when no request was written on any connection: PayPal cannot have
	// received it. A response that came but could not be read has Sent true and its Status.
	Sent   bool
	Status int
	Err    error
}

func (e *TransportError) Error() string {
	if !e.Sent {
		return "paypal: request not sent: " + e.Err.Error()
	}
	if e.Status != 0 {
		return fmt.Sprintf("paypal: unreadable %d response: %v", e.Status, e.Err)
	}
	return "paypal: no response: " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *TransportError) Unwrap() error { return e.Err }

// TokenError is a failure to obtain an access token; the request that needed it was not sent.
// Err is an *[APIError] (PayPal refused the credentials: 401 invalid_client) or a
// *[TransportError].
type TokenError struct{ Err error }

func (e *TokenError) Error() string { return "paypal: obtaining an access token: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *TokenError) Unwrap() error { return e.Err }

// accessToken returns a cached token, or fetches one; stale is a token PayPal just refused,
// which is dropped from the cache unless another caller already replaced it. Concurrent callers
// that need a new token wait for one request.
func (c *Client) accessToken(ctx context.Context, stale string) (string, error) {
	for {
		c.mu.Lock()
		if stale != "" && c.token == stale {
			c.token = ""
		}
		if c.token != "" && c.cfg.Clock().Before(c.refreshAt) {
			tok := c.token
			c.mu.Unlock()
			return tok, nil
		}
		if f := c.flight; f != nil {
			c.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return "", &TokenError{Err: &TransportError{Err: ctx.Err()}}
			}
			if f.err == nil {
				return f.token, nil
			}
			if ctx.Err() == nil && isContextError(f.err) {
				continue // the caller that fetched gave up; fetch with our own context
			}
			return "", f.err
		}
		f := &tokenFlight{done: make(chan struct{})}
		c.flight = f
		c.mu.Unlock()

		started := c.cfg.Clock()
		tok, lifetime, err := c.fetchToken(ctx)
		c.mu.Lock()
		c.flight = nil
		if err == nil {
			margin := min(tokenRefreshMargin, lifetime/4)
			c.token, c.refreshAt = tok, started.Add(lifetime-margin)
		}
		c.mu.Unlock()
		if err != nil {
			err = &TokenError{Err: err}
		}
		f.token, f.err = tok, err
		close(f.done)
		return tok, err
	}
}

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// fetchToken is POST /v1/oauth2/token with the client credentials.
func (c *Client) fetchToken(ctx context.Context) (string, time.Duration, error) {
	form := url.Values{"grant_type": {"client_credentials"}}.Encode()
	var wrote atomic.Bool
	req, err := http.NewRequestWithContext(traceWrites(ctx, &wrote), http.MethodPost, c.cfg.BaseURL+"/v1/oauth2/token", strings.NewReader(form))
	if err != nil {
		return "", 0, &TransportError{Err: err}
	}
	req.SetBasicAuth(c.cfg.ClientID, c.cfg.Secret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	status, body, err := c.roundTrip(req, &wrote)
	if err != nil {
		return "", 0, err
	}
	if status != http.StatusOK {
		var oe struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		if json.Unmarshal(body, &oe) == nil && oe.Error != "" {
			return "", 0, &APIError{Status: status, Name: oe.Error, Message: oe.Description}
		}
		return "", 0, apiError(status, body)
	}
	var tr struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	if err := json.Unmarshal(body, &tr); err != nil || tr.AccessToken == "" || tr.ExpiresIn <= 0 {
		return "", 0, &TransportError{Sent: true, Status: status, Err: fmt.Errorf("token response without access_token or expires_in: %q", truncate(body))}
	}
	if !strings.EqualFold(tr.TokenType, "Bearer") {
		return "", 0, &TransportError{Sent: true, Status: status, Err: fmt.Errorf("token_type %q, want Bearer", tr.TokenType)}
	}
	return tr.AccessToken, time.Duration(tr.ExpiresIn) * time.Second, nil
}

// traceWrites records whether any attempt of the request (net/http's own resends included)
// wrote its headers on a connection: until then PayPal cannot have received it.
func traceWrites(ctx context.Context, wrote *atomic.Bool) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { wrote.Store(true) },
	})
}

// roundTrip sends req and reads the whole response.
func (c *Client) roundTrip(req *http.Request, wrote *atomic.Bool) (int, []byte, error) {
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return 0, nil, &TransportError{Sent: wrote.Load(), Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return resp.StatusCode, nil, &TransportError{Sent: true, Status: resp.StatusCode, Err: err}
	}
	return resp.StatusCode, body, nil
}

func apiError(status int, body []byte) *APIError {
	var e struct {
		Name    string        `json:"name"`
		Message string        `json:"message"`
		DebugID string        `json:"debug_id"`
		Details []ErrorDetail `json:"details"`
	}
	if json.Unmarshal(body, &e) != nil || e.Name == "" {
		return &APIError{Status: status, Name: http.StatusText(status), Message: truncate(body)}
	}
	return &APIError{Status: status, Name: e.Name, Message: e.Message, DebugID: e.DebugID, Details: e.Details}
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// do sends one API request with a bearer token and decodes a 2xx answer into out. A 401 gets
// one token refresh and one resend. It returns the HTTP status of the answer it decoded.
func (c *Client) do(ctx context.Context, method, path, requestID string, in, out any) (int, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return 0, &TransportError{Err: fmt.Errorf("encoding the request: %w", err)}
		}
	}
	stale := ""
	for attempt := 0; ; attempt++ {
		tok, err := c.accessToken(ctx, stale)
		if err != nil {
			return 0, err
		}
		var wrote atomic.Bool
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(traceWrites(ctx, &wrote), method, c.cfg.BaseURL+path, rd)
		if err != nil {
			return 0, &TransportError{Err: err}
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Accept", "application/json")
		// The full resource, not the minimal one: payonce checks what a replay returns.
		req.Header.Set("Prefer", "return=representation")
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if requestID != "" {
			req.Header.Set("PayPal-Request-Id", requestID)
		}
		status, respBody, err := c.roundTrip(req, &wrote)
		if err != nil {
			return 0, err
		}
		if status == http.StatusUnauthorized && attempt == 0 {
			stale = tok // refused before anything executed: refresh once and resend
			continue
		}
		if status < 200 || status > 299 {
			return status, apiError(status, respBody)
		}
		if out != nil {
			if err := json.Unmarshal(respBody, out); err != nil {
				return status, &TransportError{Sent: true, Status: status, Err: fmt.Errorf("decoding the response: %w", err)}
			}
		}
		return status, nil
	}
}

// CreateOrder is POST /v2/checkout/orders with requestID as PayPal-Request-Id (required by
// PayPal when the order carries a payment source). Result.Replayed is true when PayPal answered
// 200: it returned the latest status of the order it created for that request id earlier,
// whatever the parameters now.
func (c *Client) CreateOrder(ctx context.Context, requestID string, req OrderRequest) (OrderResult, error) {
	var o Order
	status, err := c.do(ctx, http.MethodPost, "/v2/checkout/orders", requestID, req, &o)
	if err != nil {
		return OrderResult{}, err
	}
	return OrderResult{Order: &o, Replayed: status == http.StatusOK}, nil
}

// CaptureOrder is POST /v2/checkout/orders/{orderID}/capture with requestID as
// PayPal-Request-Id. Result.Replayed is true when PayPal answered 200 (a request id it had
// seen). A second capture under another request id fails with 422 ORDER_ALREADY_CAPTURED.
func (c *Client) CaptureOrder(ctx context.Context, orderID, requestID string) (OrderResult, error) {
	if err := checkID("orderID", orderID); err != nil {
		return OrderResult{}, err
	}
	var o Order
	status, err := c.do(ctx, http.MethodPost, "/v2/checkout/orders/"+url.PathEscape(orderID)+"/capture", requestID, struct{}{}, &o)
	if err != nil {
		return OrderResult{}, err
	}
	return OrderResult{Order: &o, Replayed: status == http.StatusOK}, nil
}

// GetOrder is GET /v2/checkout/orders/{orderID}; an unknown id is a 404 *[APIError].
func (c *Client) GetOrder(ctx context.Context, orderID string) (*Order, error) {
	if err := checkID("orderID", orderID); err != nil {
		return nil, err
	}
	var o Order
	if _, err := c.do(ctx, http.MethodGet, "/v2/checkout/orders/"+url.PathEscape(orderID), "", nil, &o); err != nil {
		return nil, err
	}
	return &o, nil
}

// GetCapture is GET /v2/payments/captures/{captureID}; an unknown id is a 404 *[APIError]. The
// capture names its order in supplementary_data.related_ids.order_id.
func (c *Client) GetCapture(ctx context.Context, captureID string) (*Capture, error) {
	if err := checkID("captureID", captureID); err != nil {
		return nil, err
	}
	var cp Capture
	if _, err := c.do(ctx, http.MethodGet, "/v2/payments/captures/"+url.PathEscape(captureID), "", nil, &cp); err != nil {
		return nil, err
	}
	return &cp, nil
}

// RefundCapture is POST /v2/payments/captures/{captureID}/refund with requestID as
// PayPal-Request-Id. More than what is left of the capture is a 422 *[APIError].
func (c *Client) RefundCapture(ctx context.Context, captureID, requestID string, req RefundCaptureRequest) (RefundCaptureResult, error) {
	if err := checkID("captureID", captureID); err != nil {
		return RefundCaptureResult{}, err
	}
	var r Refund
	status, err := c.do(ctx, http.MethodPost, "/v2/payments/captures/"+url.PathEscape(captureID)+"/refund", requestID, req, &r)
	if err != nil {
		return RefundCaptureResult{}, err
	}
	return RefundCaptureResult{Refund: &r, Replayed: status == http.StatusOK}, nil
}

// GetRefund is GET /v2/payments/refunds/{refundID}; an unknown id is a 404 *[APIError].
func (c *Client) GetRefund(ctx context.Context, refundID string) (*Refund, error) {
	if err := checkID("refundID", refundID); err != nil {
		return nil, err
	}
	var r Refund
	if _, err := c.do(ctx, http.MethodGet, "/v2/payments/refunds/"+url.PathEscape(refundID), "", nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// VerifyWebhookSignature is POST /v1/notifications/verify-webhook-signature. It returns
// PayPal's verification_status, [VerificationSuccess] or [VerificationFailure].
func (c *Client) VerifyWebhookSignature(ctx context.Context, req VerifyWebhookSignatureRequest) (string, error) {
	var out struct {
		VerificationStatus string `json:"verification_status"`
	}
	status, err := c.do(ctx, http.MethodPost, "/v1/notifications/verify-webhook-signature", "", req, &out)
	if err != nil {
		return "", err
	}
	if out.VerificationStatus == "" {
		return "", &TransportError{Sent: true, Status: status, Err: errors.New("no verification_status in the answer")}
	}
	return out.VerificationStatus, nil
}

// checkID refuses an empty id or one that is not a plain token, before it reaches a URL path.
func checkID(param, id string) error {
	if id == "" {
		return invalid(param, "is required")
	}
	if len(id) > 64 || strings.ContainsAny(id, "/?#%\\ \t\r\n") {
		return invalid(param, fmt.Sprintf("%q is not a PayPal id", id))
	}
	return nil
}
