package adyen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync/atomic"
)

// maxResponse bounds a response body read.
const maxResponse = 1 << 20

// Client is a small typed client of the Checkout API v71 endpoints payonce uses. It sends
// every request once (no retries) with the given Idempotency-Key. It holds no globals and is
// safe for concurrent use.
type Client struct {
	apiKey, merchant, baseURL string
	http                      *http.Client
}

// NewClient returns a Client for cfg. It checks cfg as [New] does (ReturnURL included, which
// every payment it sends carries), though it does not use HMACKeys, Notifications, Retention,
// CaptureMode or RecurringProcessingModel. Errors: *[ConfigError] naming the bad field.
func NewClient(cfg *Config) (*Client, error) {
	c, _, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return newClient(c), nil
}

func newClient(c Config) *Client {
	return &Client{apiKey: c.APIKey, merchant: c.MerchantAccount, baseURL: c.BaseURL, http: c.HTTPClient}
}

// Amount is Adyen's amount: a currency code and a value in minor units.
type Amount struct {
	Currency string `json:"currency"`
	Value    int64  `json:"value"`
}

// PaymentMethod is the paymentMethod of a payment with a stored card.
type PaymentMethod struct {
	Type                  string `json:"type"`
	StoredPaymentMethodID string `json:"storedPaymentMethodId,omitempty"`
}

// PaymentRequest is the body of POST /payments. MerchantAccount defaults to the Client's.
// Adyen requires amount, merchantAccount, paymentMethod, reference and returnUrl
// (https://docs.adyen.com/api-explorer/Checkout/71/post/payments), and, with a
// storedPaymentMethodId, shopperReference, shopperInteraction ContAuth and
// recurringProcessingModel (https://docs.adyen.com/online-payments/tokenization/make-token-payments).
type PaymentRequest struct {
	MerchantAccount          string            `json:"merchantAccount"`
	Amount                   Amount            `json:"amount"`
	Reference                string            `json:"reference"`
	PaymentMethod            PaymentMethod     `json:"paymentMethod"`
	ReturnURL                string            `json:"returnUrl"`
	ShopperInteraction       string            `json:"shopperInteraction,omitempty"`
	RecurringProcessingModel string            `json:"recurringProcessingModel,omitempty"`
	ShopperReference         string            `json:"shopperReference,omitempty"`
	Metadata                 map[string]string `json:"metadata,omitempty"`
}

// PaymentResponse is the answer of POST /payments.
type PaymentResponse struct {
	PSPReference      string            `json:"pspReference"`
	ResultCode        string            `json:"resultCode"`
	RefusalReason     string            `json:"refusalReason"`
	RefusalReasonCode string            `json:"refusalReasonCode"`
	MerchantReference string            `json:"merchantReference"`
	Amount            *Amount           `json:"amount"`
	Action            json.RawMessage   `json:"action"`
	AdditionalData    map[string]string `json:"additionalData"`
}

// ModificationRequest is the body of POST /payments/{pspReference}/refunds and /captures.
// MerchantAccount defaults to the Client's.
type ModificationRequest struct {
	MerchantAccount string `json:"merchantAccount"`
	Amount          Amount `json:"amount"`
	Reference       string `json:"reference,omitempty"`
}

// ModificationResponse is the answer of a refund, a capture, a reversal or a cancel: Status
// "received"; the outcome comes by webhook.
type ModificationResponse struct {
	MerchantAccount     string  `json:"merchantAccount"`
	PSPReference        string  `json:"pspReference"`
	PaymentPSPReference string  `json:"paymentPspReference"`
	PaymentReference    string  `json:"paymentReference"`
	Reference           string  `json:"reference"`
	Status              string  `json:"status"`
	Amount              *Amount `json:"amount"`
}

// APIError is a non-2xx answer from Adyen.
type APIError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// ErrorCode, Message, ErrorType and PSPReference are Adyen's error body, when it had one.
	ErrorCode    string `json:"errorCode"`
	Message      string `json:"message"`
	ErrorType    string `json:"errorType"`
	PSPReference string `json:"pspReference"`
	// Transient is true when the response carried "Transient-Error: true": Adyen did not keep
	// the response for the idempotency key, and a retry with the same key is safe.
	Transient bool
}

func (e *APIError) Error() string {
	return fmt.Sprintf("adyen: HTTP %d errorCode %q (%s): %s", e.StatusCode, e.ErrorCode, e.ErrorType, e.Message)
}

// TransportError is a call that got no usable answer: no connection, a timeout, a reset, or a
// 2xx body that does not decode.
type TransportError struct {
	// Sent is true when a request's headers were written on a connection (by any attempt
	// net/http made): Adyen may then have executed it.
	Sent bool
	// StatusCode is the HTTP status when one was received, else 0.
	StatusCode int
	Err        error
}

func (e *TransportError) Error() string {
	return fmt.Sprintf("adyen: transport error (sent: %t, status %d): %v", e.Sent, e.StatusCode, e.Err)
}

// Unwrap returns the cause.
func (e *TransportError) Unwrap() error { return e.Err }

// Payments calls POST /payments. Errors: *[APIError], *[TransportError].
func (c *Client) Payments(ctx context.Context, req PaymentRequest, idempotencyKey string) (*PaymentResponse, error) {
	if req.MerchantAccount == "" {
		req.MerchantAccount = c.merchant
	}
	var out PaymentResponse
	if err := c.post(ctx, "/payments", idempotencyKey, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Refund calls POST /payments/{pspReference}/refunds. Errors: *[APIError], *[TransportError].
func (c *Client) Refund(ctx context.Context, pspReference string, req ModificationRequest, idempotencyKey string) (*ModificationResponse, error) {
	return c.modify(ctx, pspReference, "refunds", req, idempotencyKey)
}

// Capture calls POST /payments/{pspReference}/captures. Errors: *[APIError],
// *[TransportError].
func (c *Client) Capture(ctx context.Context, pspReference string, req ModificationRequest, idempotencyKey string) (*ModificationResponse, error) {
	return c.modify(ctx, pspReference, "captures", req, idempotencyKey)
}

func (c *Client) modify(ctx context.Context, psp, op string, req ModificationRequest, key string) (*ModificationResponse, error) {
	if req.MerchantAccount == "" {
		req.MerchantAccount = c.merchant
	}
	var out ModificationResponse
	if err := c.post(ctx, "/payments/"+url.PathEscape(psp)+"/"+op, key, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Reversal calls POST /payments/{pspReference}/reversals, Adyen's cancel or refund: it cancels
// the payment if it is not captured yet and refunds it in full if it is
// (https://docs.adyen.com/online-payments/reversal); reference is the reversal's own. The
// outcome comes in the CANCEL_OR_REFUND notification. Errors: *[APIError], *[TransportError].
func (c *Client) Reversal(ctx context.Context, pspReference, reference, idempotencyKey string) (*ModificationResponse, error) {
	body := struct {
		MerchantAccount string `json:"merchantAccount"`
		Reference       string `json:"reference,omitempty"`
	}{c.merchant, reference}
	var out ModificationResponse
	if err := c.post(ctx, "/payments/"+url.PathEscape(pspReference)+"/reversals", idempotencyKey, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Cancel calls POST /cancels, the technical cancel of the payment whose reference is
// paymentReference (when its pspReference is unknown); reference is the cancel's own. The
// outcome comes in the TECHNICAL_CANCEL notification. Errors: *[APIError], *[TransportError].
func (c *Client) Cancel(ctx context.Context, paymentReference, reference, idempotencyKey string) (*ModificationResponse, error) {
	body := struct {
		MerchantAccount  string `json:"merchantAccount"`
		PaymentReference string `json:"paymentReference"`
		Reference        string `json:"reference,omitempty"`
	}{c.merchant, paymentReference, reference}
	var out ModificationResponse
	if err := c.post(ctx, "/cancels", idempotencyKey, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// sentTracker records whether any attempt of a call (net/http resends a request carrying an
// Idempotency-Key on a fresh connection when a reused one fails) wrote a request's headers.
// Until then Adyen cannot have received a request it could execute. A dial error alone is no
// proof: net/http may have written the request on a keep-alive connection, lost it, and then
// failed to dial for its resend.
type sentTracker struct{ wrote atomic.Bool }

func (t *sentTracker) trace(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { t.wrote.Store(true) },
	})
}

func (c *Client) post(ctx context.Context, path, key string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return &TransportError{Err: fmt.Errorf("encode request: %w", err)}
	}
	var sent sentTracker
	req, err := http.NewRequestWithContext(sent.trace(ctx), http.MethodPost, c.baseURL+path, bytes.NewReader(body))
	if err != nil {
		return &TransportError{Err: err}
	}
	req.Header.Set("X-API-Key", c.apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return &TransportError{Sent: sent.wrote.Load(), Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return &TransportError{Sent: true, StatusCode: resp.StatusCode, Err: fmt.Errorf("read response: %w", err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ae := &APIError{}
		_ = json.Unmarshal(raw, ae) // a proxy's HTML page leaves the fields empty
		ae.StatusCode = resp.StatusCode
		ae.Transient = resp.Header.Get("Transient-Error") == "true"
		if ae.Message == "" {
			ae.Message = http.StatusText(resp.StatusCode)
		}
		return ae
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &TransportError{Sent: true, StatusCode: resp.StatusCode, Err: fmt.Errorf("undecodable %d response: %w", resp.StatusCode, err)}
	}
	return nil
}
