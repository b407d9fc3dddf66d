package paypal

import (
	"fmt"
	"github.com/payonce/payonce/idempotency"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// PayPal's API endpoints.
const (
	SandboxBaseURL = "https://api-m.sandbox.paypal.com"
	LiveBaseURL    = "https://api-m.paypal.com"
)

// DefaultHTTPTimeout bounds one HTTP exchange of the default client.
const DefaultHTTPTimeout = 30 * time.Second

// PayPal's documented retention of PayPal-Request-Id values: the minimums [Config] accepts.
const (
	// OrderRetention: the Orders v2 API keeps the request id of a create AND of a capture of an
	// order 6 hours ("The server stores keys for 6 hours. The API callers can request the times
	// to up to 72 hours by speaking to their Account Manager", on both
	// https://developer.paypal.com/api/orders/v2/#orders_create and #orders_capture).
	OrderRetention = 6 * time.Hour
	// RefundRetention: the Payments v2 API keeps the request id of a refund of a capture (POST
	// /v2/payments/captures/{id}/refund) 45 days ("The server stores keys for 45 days",
	// https://developer.paypal.com/api/payments/v2/#captures_refund).
	RefundRetention = 45 * 24 * time.Hour
)

// Config configures a [Client] and a [Provider]. A nil *Config means all defaults, which fails
// validation because ClientID and Secret are required.
type Config struct {
	// ClientID and Secret are the REST app's credentials, exchanged for an OAuth2 access token
	// (client credentials grant). Required; ClientID must not contain ':' (it is the Basic
	// auth user). Request ids are scoped to the account.
	ClientID, Secret string

	// BaseURL is the API's base URL; tests point it at
	// [github.com/payonce/payonce/providers/paypal/paypaltest]. Default: [SandboxBaseURL], so
	// that a forgotten setting moves no real money; production sets [LiveBaseURL].
	BaseURL string

	// HTTPClient sends the requests. Default: a client with a [DefaultHTTPTimeout] (30 s)
	// timeout.
	HTTPClient *http.Client

	// WebhookID is the id of the webhook subscription deliveries arrive for, sent to
	// verify-webhook-signature. Required by [Provider.VerifyWebhook] only. Default: "".
	WebhookID string

	// OrderRetention is how long PayPal keeps the request ids of the Orders v2 calls (the create
	// and the capture of an order) for this account: the charge step's window
	// ([Provider.StepDedupWindow] of [provider.StepCharge]). [Provider.Lookup] trusts a create
	// replay as proof of absence only inside it, and payments re-sends a charge's request ids
	// only inside it, so set the 72-hour extension only once PayPal confirmed it. Default and
	// minimum: [OrderRetention] (6h).
	OrderRetention time.Duration

	// RefundRetention is how long PayPal keeps the request id of a refund of a capture: the
	// refund step's window ([Provider.StepDedupWindow] of [provider.StepRefund]) and, being the
	// longest, [Provider.DedupWindow]. Default and minimum: [RefundRetention] (45 days): a
	// shorter value would understate how long PayPal replays a refund's request id.
	RefundRetention time.Duration

	// Clock is the application's clock, used to refresh tokens before they expire, to decide
	// whether an order's request ids are still inside OrderRetention and whether Transaction
	// Search has indexed a period yet. Default: time.Now.
	Clock func() time.Time
}

// ConfigError reports an invalid [Config] field.
type ConfigError struct {
	// Field is the field's name, e.g. "ClientID".
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("paypal: Config.%s %s", e.Field, e.Reason)
}

// Is reports idempotency.ErrInvalid: a bad configuration, named.
func (e *ConfigError) Is(target error) bool { return target == idempotency.ErrInvalid }

// withDefaults validates c and returns a copy with the defaults filled in.
func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	switch {
	case out.ClientID == "":
		return out, &ConfigError{Field: "ClientID", Reason: "is required"}
	case out.Secret == "":
		return out, &ConfigError{Field: "Secret", Reason: "is required"}
	case strings.Contains(out.ClientID, ":"):
		return out, &ConfigError{Field: "ClientID", Reason: "must not contain ':' (Basic auth separator)"}
	}
	if out.BaseURL == "" {
		out.BaseURL = SandboxBaseURL
	}
	u, err := url.Parse(out.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return out, &ConfigError{Field: "BaseURL", Reason: fmt.Sprintf("must be an absolute http(s) URL, got %q", out.BaseURL)}
	}
	out.BaseURL = strings.TrimSuffix(out.BaseURL, "/")
	if out.HTTPClient == nil {
		out.HTTPClient = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	if out.OrderRetention == 0 {
		out.OrderRetention = OrderRetention
	}
	if out.OrderRetention < OrderRetention {
		return out, &ConfigError{Field: "OrderRetention", Reason: fmt.Sprintf(
			"is %v, below PayPal's documented %v: the charge step's window would understate how long PayPal replays an order's request ids",
			out.OrderRetention, OrderRetention)}
	}
	if out.RefundRetention == 0 {
		out.RefundRetention = RefundRetention
	}
	if out.RefundRetention < RefundRetention {
		return out, &ConfigError{Field: "RefundRetention", Reason: fmt.Sprintf(
			"is %v, below PayPal's documented %v: DedupWindow would understate how long PayPal replays a refund's request id",
			out.RefundRetention, RefundRetention)}
	}
	if out.Clock == nil {
		out.Clock = time.Now
	}
	return out, nil
}
