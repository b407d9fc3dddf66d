package stripe

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	stripego "github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/balancetransaction"
	"github.com/stripe/stripe-go/v79/paymentintent"
	"github.com/stripe/stripe-go/v79/refund"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/adapterkit"
)

const (
	providerName = "stripe"

	// DedupWindow is how long Stripe is documented to keep an idempotency
	// key: at least 24 hours; a key reused after it may start a new request.
	DedupWindow = 24 * time.Hour

	// MaxProviderKeyLen is Stripe's limit on an Idempotency-Key.
	MaxProviderKeyLen = 255

	// MetadataKey is the metadata entry carrying payonce's local key on
	// every PaymentIntent and refund, so that [Provider.Lookup] finds them.
	// Through payments, its value is the composed key
	// (payments.ChargeKey: "cust_1_charge_order-3"), not the client's key.
	MetadataKey = "payonce_key"

	// Stripe's metadata limits.
	maxMetadataKeys     = 50
	maxMetadataKeyLen   = 40
	maxMetadataValueLen = 500

	// lookupPageSize is the List and Search APIs' largest page.
	lookupPageSize = 100
)

// Provider is the Stripe adapter of [provider.Provider]. It holds no
// globals; it is safe for concurrent use.
type Provider struct {
	// The resource clients of stripe-go, not its client.API: that one
	// links every resource package of the Stripe API.
	paymentIntents      paymentintent.Client
	refunds             refund.Client
	balanceTransactions balancetransaction.Client
	webhookSecrets      []string
	webhookTolerance    time.Duration
	scanLimit           int
	customer            func(provider.ChargeRequest) string
	clock               clockReading // Stripe's clock, read from its answers' Date header
}

var _ provider.Provider = (*Provider)(nil)

// New returns a Provider for cfg. Errors: *[ConfigError] naming the bad
// field.
func New(cfg *Config) (*Provider, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	b := stripego.GetBackendWithConfig(stripego.APIBackend, &stripego.BackendConfig{
		URL:               stripego.String(strings.TrimSuffix(c.BaseURL, "/")),
		HTTPClient:        c.HTTPClient,
		MaxNetworkRetries: stripego.Int64(c.MaxNetworkRetries),
		// Errors reach the caller as payments errors; stripe-go's own
		// logging would only duplicate them (and print request details).
		LeveledLogger: &stripego.LeveledLogger{Level: stripego.LevelNull},
	})
	return &Provider{
		paymentIntents:      paymentintent.Client{B: b, Key: c.SecretKey},
		refunds:             refund.Client{B: b, Key: c.SecretKey},
		balanceTransactions: balancetransaction.Client{B: b, Key: c.SecretKey},
		webhookSecrets:      c.WebhookSecrets,
		webhookTolerance:    c.WebhookTolerance,
		scanLimit:           c.LookupScanLimit,
		customer:            c.Customer,
	}, nil
}

// Name returns "stripe".
func (p *Provider) Name() string { return providerName }

// DedupWindow returns 24h, Stripe's idempotency key retention.
func (p *Provider) DedupWindow() time.Duration { return DedupWindow }

// Charge creates and confirms a card PaymentIntent for req, with
// req.ProviderKey as its Idempotency-Key and req.Key in its metadata under
// [MetadataKey]. req.Recipient is not used: charges land on the account
// of Config.SecretKey (no Connect destination). req.Amount is sent in
// Stripe's units for its currency ([ToAmount]). The PaymentIntent names
// the Customer Config.Customer returns for req, if any (Stripe requires
// it for a card attached to a Customer), and payment_method_types card:
// without it a confirmation would take the Dashboard's payment methods,
// some of which redirect, and Stripe would require a return_url.
//
// On a decline the result still names the declined PaymentIntent (status
// [provider.ChargeFailed]) next to the error. Errors (see the package
// documentation for the mapping): *[provider.DeclineError],
// *[provider.InvalidRequestError] (also for requests refused before
// sending, as [Provider.ValidateCharge] refuses them: bad metadata, empty
// or too long ProviderKey, an amount that is not positive or that Stripe
// cannot represent), *[provider.NotSentError],
// *[provider.UnknownOutcomeError], *[provider.InProgressError],
// *[provider.KeyMismatchError].
func (p *Provider) Charge(ctx context.Context, req provider.ChargeRequest) (provider.ChargeResult, error) {
	params, err := p.paymentIntentParams(req)
	if err != nil {
		return provider.ChargeResult{}, err
	}
	var sent sentTracker
	params.Context = sent.trace(ctx)

	pi, err := p.paymentIntents.New(params)
	if err != nil {
		res := provider.ChargeResult{}
		if se, ok := asStripeError(err); ok && se.PaymentIntent != nil && se.Type == stripego.ErrorTypeCard {
			res = chargeResult(se.PaymentIntent, req.Amount)
			res.Status = provider.ChargeFailed
			res.Replayed = replayed(se.LastResponse)
		}
		if se, ok := asStripeError(err); ok {
			res.RequestID = se.RequestID
		}
		return res, classify(err, &sent)
	}
	res := chargeResult(pi, req.Amount)
	res.Replayed, res.RequestID = replayed(pi.LastResponse), requestID(pi.LastResponse)
	return res, nil
}

var _ provider.Validator = (*Provider)(nil)

// ValidateCharge refuses the requests that [Provider.Charge] would refuse
// before sending them, so that payments refuses them before it records
// anything: bad metadata, an empty or too long ProviderKey, no payment
// method, and an amount that is not positive or that Stripe cannot
// represent in its units ([ToAmount]: 10.50 MGA, 1.235 KWD). It sends
// nothing. Errors: *[provider.InvalidRequestError] naming the field.
func (p *Provider) ValidateCharge(req provider.ChargeRequest) error {
	_, err := p.paymentIntentParams(req)
	return err
}

var _ provider.RefundValidator = (*Provider)(nil)

// ValidateRefund refuses the refunds that [Provider.Refund] would refuse
// before sending them (an amount Stripe cannot represent, bad keys), so
// that payments refuses them before it records or reserves anything. It
// sends nothing. Errors: *[provider.InvalidRequestError] naming the field.
func (p *Provider) ValidateRefund(req provider.RefundRequest) error {
	if err := checkKeys(req.Key, req.ProviderKey); err != nil {
		return err
	}
	_, err := checkAmount(req.Amount)
	return err
}

// paymentIntentParams checks req and returns its PaymentIntent create,
// without a context. Stripe requires amount and currency
// (https://docs.stripe.com/api/payment_intents/create), and the Customer
// of a payment method attached to one.
func (p *Provider) paymentIntentParams(req provider.ChargeRequest) (*stripego.PaymentIntentParams, error) {
	if err := checkKeys(req.Key, req.ProviderKey); err != nil {
		return nil, err
	}
	amount, err := checkAmount(req.Amount)
	if err != nil {
		return nil, err
	}
	if req.PaymentMethod == "" {
		return nil, invalid("PaymentMethod", "is required")
	}
	md, err := metadata(req.Key, req.Metadata)
	if err != nil {
		return nil, err
	}

	params := &stripego.PaymentIntentParams{
		Amount:        stripego.Int64(amount),
		Currency:      stripego.String(strings.ToLower(string(req.Amount.Currency()))),
		PaymentMethod: stripego.String(req.PaymentMethod),
		Confirm:       stripego.Bool(true),
		// Cards only: with automatic payment methods, confirming would
		// require a return_url for redirect-based methods.
		PaymentMethodTypes: stripego.StringSlice([]string{"card"}),
	}
	if req.Description != "" {
		params.Description = stripego.String(req.Description)
	}
	if p.customer != nil {
		if cus := p.customer(req); cus != "" {
			params.Customer = stripego.String(cus)
		}
	}
	params.Metadata = md
	params.SetIdempotencyKey(req.ProviderKey)
	return params, nil
}

// Refund refunds req.Amount of the PaymentIntent req.ChargeID, with
// req.ProviderKey as its Idempotency-Key and req.Key in its metadata.
// req.Amount is sent in Stripe's units ([ToAmount]).
// Errors: as [Provider.Charge]; refusing more than what is left to refund
// is an *[provider.InvalidRequestError] (amount_too_large,
// charge_already_refunded), final for the key.
func (p *Provider) Refund(ctx context.Context, req provider.RefundRequest) (provider.RefundResult, error) {
	if err := checkKeys(req.Key, req.ProviderKey); err != nil {
		return provider.RefundResult{}, err
	}
	amount, err := checkAmount(req.Amount)
	if err != nil {
		return provider.RefundResult{}, err
	}
	if req.ChargeID == "" {
		return provider.RefundResult{}, invalid("ChargeID", "is required")
	}
	md, err := metadata(req.Key, nil)
	if err != nil {
		return provider.RefundResult{}, err
	}
	params := &stripego.RefundParams{
		PaymentIntent: stripego.String(req.ChargeID),
		Amount:        stripego.Int64(amount),
	}
	params.Metadata = md
	params.SetIdempotencyKey(req.ProviderKey)
	var sent sentTracker
	params.Context = sent.trace(ctx)

	re, err := p.refunds.New(params)
	if err != nil {
		return provider.RefundResult{}, classify(err, &sent)
	}
	res := provider.RefundResult{
		ProviderID: re.ID,
		Status:     refundStatus(re.Status),
		Amount:     amountOr(re.Amount, string(re.Currency), req.Amount),
		Replayed:   replayed(re.LastResponse),
		RequestID:  requestID(re.LastResponse),
	}
	return res, nil
}

func chargeResult(pi *stripego.PaymentIntent, sent money.Money) provider.ChargeResult {
	return provider.ChargeResult{
		ProviderID: pi.ID,
		Status:     chargeStatus(pi.Status),
		Amount:     amountOr(pi.Amount, string(pi.Currency), sent),
	}
}

// chargeStatus maps a PaymentIntent's status. requires_confirmation and
// requires_capture cannot follow a confirmed automatic-capture create;
// they are reported as pending rather than guessed.
func chargeStatus(s stripego.PaymentIntentStatus) provider.ChargeStatus {
	switch s {
	case stripego.PaymentIntentStatusSucceeded:
		return provider.ChargeSucceeded
	case stripego.PaymentIntentStatusRequiresAction:
		return provider.ChargeRequiresAction
	case stripego.PaymentIntentStatusRequiresPaymentMethod, stripego.PaymentIntentStatusCanceled:
		return provider.ChargeFailed
	default: // processing, requires_confirmation, requires_capture
		return provider.ChargePending
	}
}

func refundStatus(s stripego.RefundStatus) provider.RefundStatus {
	switch s {
	case stripego.RefundStatusSucceeded:
		return provider.RefundSucceeded
	case stripego.RefundStatusFailed, stripego.RefundStatusCanceled:
		return provider.RefundFailed
	default: // pending, requires_action
		return provider.RefundPending
	}
}

// amountOr is Stripe's amount as Money ([FromAmount]), or fallback when
// money cannot hold it (it cannot be: it is what we sent).
func amountOr(amount int64, currency string, fallback money.Money) money.Money {
	m, err := FromAmount(amount, currency)
	if err != nil {
		return fallback
	}
	return m
}

func replayed(r *stripego.APIResponse) bool {
	return r != nil && r.Header.Get("Idempotent-Replayed") == "true"
}

// requestID is Stripe's Request-Id of a response ("req_..."), for traces.
func requestID(r *stripego.APIResponse) string {
	if r == nil {
		return ""
	}
	return r.RequestID
}

// invalid is a request refused before sending it.
func invalid(param, msg string) error { return adapterkit.Refused(providerName, param, msg) }

func checkKeys(key, providerKey string) error {
	switch {
	case key == "":
		return invalid("Key", "is required")
	case providerKey == "":
		return invalid("ProviderKey", "is required: Stripe deduplicates only requests that carry one")
	case len(providerKey) > MaxProviderKeyLen:
		return invalid("ProviderKey", fmt.Sprintf("is %d bytes, Stripe allows %d", len(providerKey), MaxProviderKeyLen))
	}
	return nil
}

// checkAmount returns m in Stripe's units, refusing a zero Money, an
// amount that is not positive and one Stripe cannot represent.
func checkAmount(m money.Money) (int64, error) {
	if m.Currency() == "" {
		return 0, invalid("Amount", "has no currency")
	}
	if !m.IsPositive() {
		return 0, invalid("Amount", fmt.Sprintf("must be positive, got %s", m))
	}
	return ToAmount(m)
}

// metadata is extra plus [MetadataKey]: key, checked against Stripe's
// limits so that a bad entry is refused here rather than by Stripe.
func metadata(key string, extra map[string]string) (map[string]string, error) {
	md := make(map[string]string, len(extra)+1)
	for k, v := range extra {
		param := "Metadata[" + k + "]"
		switch {
		case k == MetadataKey:
			return nil, invalid(param, "is reserved for payonce's key")
		case k == "":
			return nil, invalid("Metadata", "has an empty key")
		case utf8.RuneCountInString(k) > maxMetadataKeyLen:
			return nil, invalid(param, fmt.Sprintf("key is longer than %d characters", maxMetadataKeyLen))
		case strings.ContainsAny(k, "[]"):
			return nil, invalid(param, "key must not contain square brackets")
		case utf8.RuneCountInString(v) > maxMetadataValueLen:
			return nil, invalid(param, fmt.Sprintf("value is longer than %d characters", maxMetadataValueLen))
		}
		md[k] = v
	}
	if utf8.RuneCountInString(key) > maxMetadataValueLen {
		return nil, invalid("Key", fmt.Sprintf("is longer than %d characters, Stripe's metadata value limit", maxMetadataValueLen))
	}
	md[MetadataKey] = key
	if len(md) > maxMetadataKeys {
		return nil, invalid("Metadata", fmt.Sprintf("has %d keys with %s; Stripe allows %d", len(md), MetadataKey, maxMetadataKeys))
	}
	return md, nil
}

var _ provider.IDChecker = (*Provider)(nil)

// CheckID refuses an id that is not what this adapter records for step: a
// PaymentIntent's id ("pi_...") for a charge, a Refund's ("re_...", or
// "pyr_..." for some payment methods) for a refund, as Stripe's API
// reference shows its objects' ids (see
// docs/providers.md). It sends nothing. Errors:
// *[provider.InvalidRequestError] naming ProviderID.
func (p *Provider) CheckID(step, id string) error {
	prefixes, object := []string{"pi_"}, "a PaymentIntent"
	if step == provider.StepRefund {
		prefixes, object = []string{"re_", "pyr_"}, "a Refund"
	}
	for _, prefix := range prefixes {
		rest, ok := strings.CutPrefix(id, prefix)
		if ok && rest != "" && strings.IndexFunc(rest, func(r rune) bool {
			return !(r == '_' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
		}) < 0 {
			return nil
		}
	}
	return invalid("ProviderID", fmt.Sprintf("%q is not the id of %s: Stripe's start with %s (the %s step records it)",
		id, object, strings.Join(prefixes, " or "), step))
}
