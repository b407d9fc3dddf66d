package adyen

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments"
)

const (
	providerName = "adyen"

	// MaxReferenceLen is Adyen's limit on a payment's or a modification's reference.
	MaxReferenceLen = 80

	// MaxIdempotencyKeyLen is Adyen's limit on an Idempotency-Key.
	MaxIdempotencyKeyLen = 64

	// MetadataKey is the metadata entry carrying payonce's local key on a payment, when the key
	// fits Adyen's 80-character metadata values. The reference is the link in every case.
	MetadataKey = "payonce_key"

	// Adyen's metadata limits.
	maxMetadataKeys     = 20
	maxMetadataKeyLen   = 20
	maxMetadataValueLen = 80
)

// ErrNoNotificationSource is returned by [Provider.Lookup] and [Provider.LookupRefund] without
// Config.Notifications.
var ErrNoNotificationSource = errors.New("adyen: Lookup and LookupRefund need Config.Notifications: Adyen has no read by reference, only webhooks tell what a reference became")

// Provider is the Adyen adapter of [payments.Provider] and [payments.WebhookVerifier]. It holds
// no globals; it is safe for concurrent use.
type Provider struct {
	c        *Client
	cfg      Config
	hmacKeys [][]byte
}

var (
	_ payments.Provider         = (*Provider)(nil)
	_ payments.ReferenceLimiter = (*Provider)(nil)
	_ payments.WebhookVerifier  = (*Provider)(nil)
)

// New returns a Provider for cfg. Errors: *[ConfigError] naming the bad field.
func New(cfg *Config) (*Provider, error) {
	c, keys, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Provider{c: newClient(c), cfg: c, hmacKeys: keys}, nil
}

// Client returns the Provider's REST client, for the calls payments does not make (Capture,
// Cancel).
func (p *Provider) Client() *Client { return p.c }

// Name returns "adyen".
func (p *Provider) Name() string { return providerName }

// DedupWindow returns Config.Retention: 31 days by default, never under 7.
func (p *Provider) DedupWindow() time.Duration { return p.cfg.Retention }

// MaxReferenceLen returns 80, Adyen's reference limit: payments derives provider keys under it.
func (p *Provider) MaxReferenceLen() int { return MaxReferenceLen }

// IdempotencyKey derives the Idempotency-Key of the request whose reference is reference: the
// reference itself when it has at most 64 characters, else its first 11 bytes, "_", and the
// lowercase unpadded base32 of its SHA-256 (52 characters), 64 in all. It is deterministic: a
// retry with the same reference sends the same key.
func IdempotencyKey(reference string) string {
	if len(reference) <= MaxIdempotencyKeyLen {
		return reference
	}
	sum := sha256.Sum256([]byte(reference))
	h := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:]))
	cut := MaxIdempotencyKeyLen - len(h) - 1
	for cut > 0 && !utf8.RuneStart(reference[cut]) {
		cut-- // never split a character
	}
	return reference[:cut] + "_" + h
}

// Charge authorises req.Amount on the stored card req.PaymentMethod (a card-on-file payment:
// shopperInteraction ContAuth, recurringProcessingModel UnscheduledCardOnFile), with
// req.ProviderKey as the reference, [IdempotencyKey] of it as the Idempotency-Key, and req.Key
// in the metadata under [MetadataKey] when it fits. Payments are assumed to be captured
// automatically (the merchant account's default): Authorised is reported as succeeded.
// req.Recipient and req.Description are not sent (no split, no shopper statement).
//
// Replayed is always false: Adyen answers a replay with the first response and no marker.
//
// On a refusal the result names the refused payment (status [payments.ChargeFailed]) next to
// the error. Errors (see the package documentation for the mapping): *[payments.DeclineError],
// *[payments.InvalidRequestError] (also for requests refused before sending: missing fields,
// a reference over 80 characters, metadata over Adyen's limits), *[payments.NotSentError],
// *[payments.UnknownOutcomeError], *[payments.InProgressError], *[payments.KeyMismatchError].
func (p *Provider) Charge(ctx context.Context, req payments.ChargeRequest) (payments.ChargeResult, error) {
	if err := checkKeys(req.Key, req.ProviderKey); err != nil {
		return payments.ChargeResult{}, err
	}
	amount, err := adyenAmount(req.Amount)
	if err != nil {
		return payments.ChargeResult{}, err
	}
	if req.PaymentMethod == "" {
		return payments.ChargeResult{}, invalid("PaymentMethod", "is required (a storedPaymentMethodId)")
	}
	md, err := metadata(req.Key, req.Metadata)
	if err != nil {
		return payments.ChargeResult{}, err
	}
	preq := PaymentRequest{
		Amount:                   amount,
		Reference:                req.ProviderKey,
		PaymentMethod:            PaymentMethod{Type: "scheme", StoredPaymentMethodID: req.PaymentMethod},
		ReturnURL:                p.cfg.ReturnURL,
		ShopperInteraction:       "ContAuth",
		RecurringProcessingModel: "UnscheduledCardOnFile",
		Metadata:                 md,
	}
	if p.cfg.ShopperReference != nil {
		preq.ShopperReference = p.cfg.ShopperReference(req)
	}
	resp, err := p.c.Payments(ctx, preq, IdempotencyKey(req.ProviderKey))
	if err != nil {
		return payments.ChargeResult{}, classify(err)
	}
	res := payments.ChargeResult{ProviderID: resp.PSPReference, Amount: req.Amount}
	if resp.Amount != nil {
		res.Amount = amountOr(*resp.Amount, req.Amount)
	}
	switch resp.ResultCode {
	case "Authorised":
		res.Status = payments.ChargeSucceeded
	case "Refused":
		res.Status = payments.ChargeFailed
		reason := resp.RefusalReason
		if reason == "" {
			reason = "Refused"
		}
		return res, &payments.DeclineError{Provider: providerName, Code: "Refused", DeclineCode: reason,
			Message: fmt.Sprintf("payment %s refused: %s (refusalReasonCode %s)", resp.PSPReference, reason, resp.RefusalReasonCode)}
	case "Pending", "Received":
		res.Status = payments.ChargePending
	case "RedirectShopper", "ChallengeShopper", "IdentifyShopper", "PresentToShopper":
		res.Status = payments.ChargeRequiresAction
	case "Cancelled":
		res.Status = payments.ChargeFailed
	default:
		// "Error" (Adyen could not tell), and codes a stored-card, full-amount payment should
		// not produce (PartiallyAuthorised, AuthenticationFinished, ...): never guessed.
		return payments.ChargeResult{ProviderID: resp.PSPReference}, &payments.UnknownOutcomeError{Provider: providerName, Status: 200,
			Err: fmt.Errorf("adyen: payment %s answered resultCode %q: the outcome comes by webhook", resp.PSPReference, resp.ResultCode)}
	}
	return res, nil
}

// Refund refunds req.Amount of the payment req.ChargeID (its pspReference), with
// req.ProviderKey as the refund's reference and [IdempotencyKey] of it as the Idempotency-Key.
// Adyen only acknowledges a refund: the result is [payments.RefundPending] with the refund's
// own pspReference, and the outcome comes in the REFUND notification ([Provider.VerifyWebhook]
// maps it to payments.EventRefundSucceeded or EventRefundFailed; a refund over what is left
// fails there, not here; [Provider.LookupRefund] reads it back). Errors: as [Provider.Charge],
// without declines.
func (p *Provider) Refund(ctx context.Context, req payments.RefundRequest) (payments.RefundResult, error) {
	if err := checkKeys(req.Key, req.ProviderKey); err != nil {
		return payments.RefundResult{}, err
	}
	amount, err := adyenAmount(req.Amount)
	if err != nil {
		return payments.RefundResult{}, err
	}
	if req.ChargeID == "" {
		return payments.RefundResult{}, invalid("ChargeID", "is required (the payment's pspReference)")
	}
	resp, err := p.c.Refund(ctx, req.ChargeID, ModificationRequest{Amount: amount, Reference: req.ProviderKey}, IdempotencyKey(req.ProviderKey))
	if err != nil {
		return payments.RefundResult{}, classify(err)
	}
	if resp.Status != "received" || resp.PSPReference == "" {
		return payments.RefundResult{}, &payments.UnknownOutcomeError{Provider: providerName, Status: 201,
			Err: fmt.Errorf("adyen: refund answered status %q, pspReference %q", resp.Status, resp.PSPReference)}
	}
	res := payments.RefundResult{ProviderID: resp.PSPReference, Status: payments.RefundPending, Amount: req.Amount}
	if resp.Amount != nil {
		res.Amount = amountOr(*resp.Amount, req.Amount)
	}
	return res, nil
}

// Lookup tells what Adyen made of req.ProviderKey (the reference payonce sent) from its
// notifications (Config.Notifications): one result per payment (pspReference) with an
// AUTHORISATION notification, succeeded or failed, and failed when a TECHNICAL_CANCEL or
// CANCELLATION voided it later. Notifications may still be on their way, so the result is never
// Consistent. req.From and req.To are not used (notifications are found by reference).
//
// req.WithRefunds is not served: RefundsKnown stays false on every charge. Adyen has no read of
// a payment's refunds, and the notifications found by the payment's reference hold none: a
// REFUND notification carries the refund's own reference as merchantReference, and the
// payment's pspReference only as originalReference (WebhookEvent.ChargeID). Telling the
// refunded total would take a source of the notifications by originalReference (the REFUND
// and REFUND_FAILED events whose ChargeID is the pspReference); even then it would come from
// the same webhooks payonce records its refunds from, not from an independent read.
//
// Errors: [ErrNoNotificationSource]; *[payments.InvalidRequestError] without ProviderKey;
// the source's error, wrapped.
func (p *Provider) Lookup(ctx context.Context, req payments.LookupRequest) (payments.LookupResult, error) {
	if p.cfg.Notifications == nil {
		return payments.LookupResult{}, ErrNoNotificationSource
	}
	if req.ProviderKey == "" {
		return payments.LookupResult{}, invalid("ProviderKey", "is required: Adyen's notifications are found by reference")
	}
	events, err := p.cfg.Notifications(ctx, req.ProviderKey)
	if err != nil {
		return payments.LookupResult{}, fmt.Errorf("adyen: notifications of reference %q: %w", req.ProviderKey, err)
	}
	res := payments.LookupResult{Charges: []payments.ChargeResult{}}
	index := map[string]int{}
	cancelled := map[string]bool{}
	for _, ev := range events {
		switch {
		case ev.Kind == payments.EventCancelled:
			cancelled[ev.ChargeID] = true
		case ev.Type == "AUTHORISATION" && ev.Reference == req.ProviderKey &&
			(ev.Kind == payments.EventChargeSucceeded || ev.Kind == payments.EventChargeFailed):
			st := payments.ChargeSucceeded
			if ev.Kind == payments.EventChargeFailed {
				st = payments.ChargeFailed
			}
			if i, seen := index[ev.ProviderID]; seen {
				if st == payments.ChargeFailed { // a failure is never undone by a duplicate
					res.Charges[i].Status = st
				}
				continue
			}
			index[ev.ProviderID] = len(res.Charges)
			res.Charges = append(res.Charges, payments.ChargeResult{ProviderID: ev.ProviderID, Status: st, Amount: ev.Amount})
		}
	}
	for i, ch := range res.Charges {
		if cancelled[ch.ProviderID] {
			res.Charges[i].Status = payments.ChargeFailed
		}
	}
	return res, nil
}

// adyenAmount is m in Adyen's terms, refused before sending when it cannot be charged.
func adyenAmount(m money.Money) (Amount, error) {
	if m.Currency() == "" {
		return Amount{}, invalid("Amount", "has no currency")
	}
	if m.Minor() <= 0 {
		return Amount{}, invalid("Amount", fmt.Sprintf("must be positive, got %s", m))
	}
	return Amount{Currency: string(m.Currency()), Value: m.Minor()}, nil
}

// amountOr is Adyen's amount as Money, or fallback when Adyen's currency is not one money
// knows (it cannot be: it is the one we sent).
func amountOr(a Amount, fallback money.Money) money.Money {
	c, err := money.ParseCurrency(a.Currency)
	if err != nil {
		return fallback
	}
	m, err := money.FromMinor(a.Value, c)
	if err != nil {
		return fallback
	}
	return m
}

// invalid is a request refused before sending it.
func invalid(param, msg string) error {
	return &payments.InvalidRequestError{Provider: providerName, Code: "payonce_invalid_parameter", Param: param,
		Message: param + " " + msg + " (refused before sending)"}
}

func checkKeys(key, reference string) error {
	switch {
	case key == "":
		return invalid("Key", "is required")
	case reference == "":
		return invalid("ProviderKey", "is required: it is Adyen's reference and the seed of the Idempotency-Key")
	case utf8.RuneCountInString(reference) > MaxReferenceLen:
		return invalid("ProviderKey", fmt.Sprintf("is %d characters, Adyen's reference allows %d (derive it with payments.ProviderKey under payments.MaxReferenceLen)",
			utf8.RuneCountInString(reference), MaxReferenceLen))
	}
	return nil
}

// metadata is extra plus [MetadataKey]: key (when key fits a metadata value), checked against
// Adyen's limits so that a bad entry is refused here rather than by Adyen.
func metadata(key string, extra map[string]string) (map[string]string, error) {
	if len(extra) > maxMetadataKeys-1 {
		return nil, invalid("Metadata", fmt.Sprintf("has %d entries; Adyen allows %d, one of which is payonce's %s", len(extra), maxMetadataKeys, MetadataKey))
	}
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
		case utf8.RuneCountInString(v) > maxMetadataValueLen:
			return nil, invalid(param, fmt.Sprintf("value is longer than %d characters", maxMetadataValueLen))
		}
		md[k] = v
	}
	if utf8.RuneCountInString(key) <= maxMetadataValueLen {
		md[MetadataKey] = key
	}
	if len(md) == 0 {
		return nil, nil
	}
	return md, nil
}
