package adyen

import (
	"context"
	"encoding/hex"
	"fmt"
	"github.com/payonce/payonce/idempotency"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/payonce/payonce/payments/provider"
)

// DefaultBaseURL is Adyen's Checkout API v71 test endpoint. Live endpoints are per merchant:
// "https://{prefix}-checkout-live.adyenpayments.com/checkout/v71".
const DefaultBaseURL = "https://checkout-test.adyen.com/v71"

// DefaultHTTPTimeout bounds one HTTP exchange of the default client.
const DefaultHTTPTimeout = 30 * time.Second

// DefaultRetention is the dedup window the adapter reports by default: Adyen's idempotency
// page says keys are valid for at least 31 days. The team's design floor is 7 days (the fake
// keeps keys that long, docs/providers.md), so a shorter configuration is accepted down to
// [MinRetention].
const DefaultRetention = 31 * 24 * time.Hour

// MinRetention is the shortest Config.Retention accepted.
const MinRetention = 7 * 24 * time.Hour

// NotificationSource returns the verified notifications received for a reference (Adyen's
// merchantReference): in production, a query of the webhook inbox; in tests, the events a
// receiver stored. The order does not matter; duplicates are allowed.
type NotificationSource func(ctx context.Context, reference string) ([]provider.WebhookEvent, error)

// Config configures a [Provider] or a [Client]. A nil *Config means all defaults, which fails
// validation because APIKey, MerchantAccount and ReturnURL are required.
type Config struct {
	// APIKey is the web service user's API key, sent as X-API-Key. Required. Adyen scopes
	// idempotency keys to the company account.
	APIKey string

	// MerchantAccount is the merchant account every request names. Required.
	MerchantAccount string

	// BaseURL is the Checkout API's base URL, version included; tests point it at
	// [github.com/payonce/payonce/providers/adyen/adyentest]. Default: [DefaultBaseURL].
	BaseURL string

	// HTTPClient sends the requests. Default: a client with a [DefaultHTTPTimeout] (30 s)
	// timeout. The adapter never retries by itself.
	HTTPClient *http.Client

	// HMACKeys are the hex-encoded HMAC keys of the webhook endpoint (Customer Area); several
	// during a rotation, any of which may have signed an item. Required by
	// [Provider.VerifyWebhook] only. Each must decode as hex.
	HMACKeys []string

	// Notifications feeds [Provider.Lookup]: Adyen has no read by reference, so what happened to
	// a reference is known from its notifications. Default: nil, and Lookup fails with
	// [ErrNoNotificationSource].
	Notifications NotificationSource

	// ReturnURL is the returnUrl of every payment: where a shopper who must authenticate comes
	// back to. Required by Adyen on /payments, hence by [New] and [NewClient].
	ReturnURL string

	// Retention is the dedup window [Provider.DedupWindow] reports, i.e. how long payonce must
	// keep a key that reached Adyen. Default: [DefaultRetention] (31 days). Less than
	// [MinRetention] (7 days) is refused.
	Retention time.Duration

	// CaptureMode is how the merchant account captures card payments: Adyen's setting in the
	// Customer Area (Settings > Account settings > Capture delay), which the adapter cannot
	// read and must be told (https://docs.adyen.com/online-payments/capture). Default:
	// [CaptureAutomatic], Adyen's default: Authorised means the money moved. A capture delay
	// on the account is automatic capture too (the money moves without a request).
	// [CaptureManual]: Authorised only reserves the funds; [Provider.Charge] captures each
	// payment itself and reports it pending until the CAPTURE notification. Any other value is
	// refused.
	CaptureMode CaptureMode

	// RecurringProcessingModel is the recurringProcessingModel of every payment: which kind of
	// stored-card payment payonce makes. Adyen requires one on every payment with a stored
	// payment method ("Required when creating a token to store payment details or using stored
	// payment details": https://docs.adyen.com/api-explorer/Checkout/71/post/payments), and it
	// must say who started the payment
	// (https://docs.adyen.com/online-payments/tokenization/make-token-payments).
	//
	// Default: [RecurringCardOnFile], Adyen's "one-click" model: a shopper-initiated payment
	// where a returning shopper pays with their stored card. That is how payments.Client.Charge
	// is meant to be called: from the customer's own request, with the customer's key, the
	// customer at the checkout. Flagging such a payment as merchant-initiated
	// ([RecurringUnscheduledCardOnFile]) would tell the issuer the shopper was absent, which
	// scheme rules reserve for payments the merchant starts. Set
	// [RecurringUnscheduledCardOnFile] when this Provider charges stored cards on the
	// merchant's initiative at non-fixed times (a top-up, a background job charging later),
	// [RecurringSubscription] for charges on a fixed schedule. Any other value is refused.
	RecurringProcessingModel RecurringProcessingModel
}

// RecurringProcessingModel is Adyen's recurringProcessingModel. See
// Config.RecurringProcessingModel.
type RecurringProcessingModel string

// Adyen's recurringProcessingModel values
// (https://docs.adyen.com/api-explorer/Checkout/71/post/payments#request-recurringProcessingModel).
const (
	// RecurringCardOnFile: a shopper-initiated payment with stored card details (one-click).
	// The default.
	RecurringCardOnFile RecurringProcessingModel = "CardOnFile"
	// RecurringUnscheduledCardOnFile: a merchant-initiated payment at non-fixed times or for
	// variable amounts (an automatic top-up).
	RecurringUnscheduledCardOnFile RecurringProcessingModel = "UnscheduledCardOnFile"
	// RecurringSubscription: a merchant-initiated payment on a fixed schedule.
	RecurringSubscription RecurringProcessingModel = "Subscription"
)

// CaptureMode is the merchant account's capture setting. See Config.CaptureMode.
type CaptureMode string

const (
	// CaptureAutomatic: Adyen captures every authorised payment by itself, at authorisation or
	// after the account's capture delay. The zero CaptureMode means it.
	CaptureAutomatic CaptureMode = "automatic"
	// CaptureManual: an authorised payment stays uncaptured until a capture request
	// (POST /payments/{pspReference}/captures).
	CaptureManual CaptureMode = "manual"
)

// ConfigError reports an invalid [Config] field.
type ConfigError struct {
	// Field is the field's name, e.g. "Retention" or "HMACKeys[1]".
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("adyen: Config.%s %s", e.Field, e.Reason)
}

// Is reports idempotency.ErrInvalid: a bad configuration, named.
func (e *ConfigError) Is(target error) bool { return target == idempotency.ErrInvalid }

// withDefaults validates c and returns a copy with the defaults filled in, and the decoded
// HMAC keys.
func (c *Config) withDefaults() (Config, [][]byte, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.APIKey == "" {
		return out, nil, &ConfigError{Field: "APIKey", Reason: "is required"}
	}
	if out.MerchantAccount == "" {
		return out, nil, &ConfigError{Field: "MerchantAccount", Reason: "is required"}
	}
	if out.ReturnURL == "" {
		return out, nil, &ConfigError{Field: "ReturnURL", Reason: "is required: Adyen needs a returnUrl on every payment"}
	}
	switch out.CaptureMode {
	case "":
		out.CaptureMode = CaptureAutomatic
	case CaptureAutomatic, CaptureManual:
	default:
		return out, nil, &ConfigError{Field: "CaptureMode", Reason: fmt.Sprintf("is %q; want %q (Adyen's default) or %q",
			out.CaptureMode, CaptureAutomatic, CaptureManual)}
	}
	switch out.RecurringProcessingModel {
	case "":
		out.RecurringProcessingModel = RecurringCardOnFile
	case RecurringCardOnFile, RecurringUnscheduledCardOnFile, RecurringSubscription:
	default:
		return out, nil, &ConfigError{Field: "RecurringProcessingModel", Reason: fmt.Sprintf("is %q; want %q (the default: the shopper pays), %q or %q",
			out.RecurringProcessingModel, RecurringCardOnFile, RecurringUnscheduledCardOnFile, RecurringSubscription)}
	}
	if out.BaseURL == "" {
		out.BaseURL = DefaultBaseURL
	}
	out.BaseURL = strings.TrimSuffix(out.BaseURL, "/")
	u, err := url.Parse(out.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return out, nil, &ConfigError{Field: "BaseURL", Reason: fmt.Sprintf("must be an absolute http(s) URL, got %q", out.BaseURL)}
	}
	if out.HTTPClient == nil {
		out.HTTPClient = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	switch {
	case out.Retention == 0:
		out.Retention = DefaultRetention
	case out.Retention < MinRetention:
		return out, nil, &ConfigError{Field: "Retention", Reason: fmt.Sprintf(
			"is %v; Adyen keeps idempotency keys at least %v, so payonce must keep them at least that long", out.Retention, MinRetention)}
	}
	keys := make([][]byte, 0, len(out.HMACKeys))
	for i, k := range out.HMACKeys {
		b, err := hex.DecodeString(k)
		if err != nil || len(b) == 0 {
			return out, nil, &ConfigError{Field: fmt.Sprintf("HMACKeys[%d]", i), Reason: "is not a hex-encoded key"}
		}
		keys = append(keys, b)
	}
	return out, keys, nil
}
