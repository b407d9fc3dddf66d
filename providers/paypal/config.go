package paypal

import (
	"fmt"
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
	// OrderRetention: Orders v2 (create) keeps a request id 6 hours; PayPal extends it to 72
	// hours on request.
	OrderRetention = 6 * time.Hour
	// CaptureRetention: Payments v2 (captures, refunds of captures) keeps a request id 45 days.
	CaptureRetention = 45 * 24 * time.Hour
)

// Config configures a [Client] and a [Provider]. A nil *Config means all defaults, which fails
// validation because ClientID and Secret are required.
type Config struct {
	// ClientID and Secret are the REST app's credentials, exchanged for an OAuth2 access token
	// (client credentials grant). Required. Request ids are scoped to the account.
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

	// OrderRetention is how long PayPal keeps the request id of an order create for this account.
	// [Provider.Lookup] trusts a create replay as proof of absence only inside it, so set the
	// 72-hour extension only once PayPal confirmed it. Default and minimum: [OrderRetention]
	// (6h): a shorter value would understate [Provider.DedupWindow].
	OrderRetention time.Duration

	// CaptureRetention is how long PayPal keeps the request id of a capture or a refund.
	// Default and minimum: [CaptureRetention] (45 days), for the same reason.
	CaptureRetention time.Duration

	// Clock is the application's clock, used to refresh tokens before they expire and to decide
	// whether an order's request id is still inside OrderRetention. Default: time.Now.
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
			"is %v, below PayPal's documented %v: DedupWindow would understate how long PayPal replays a request id", out.OrderRetention, OrderRetention)}
	}
	if out.CaptureRetention == 0 {
		out.CaptureRetention = CaptureRetention
	}
	if out.CaptureRetention < CaptureRetention {
		return out, &ConfigError{Field: "CaptureRetention", Reason: fmt.Sprintf(
			"is %v, below PayPal's documented %v: DedupWindow would understate how long PayPal replays a request id", out.CaptureRetention, CaptureRetention)}
	}
	if out.Clock == nil {
		out.Clock = time.Now
	}
	return out, nil
}
