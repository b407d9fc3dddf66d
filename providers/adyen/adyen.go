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

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/adapterkit"
)

const (
	providerName = "adyen"

	// MaxReferenceLen is Adyen's limit on a payment's or a modification's reference.
	MaxReferenceLen = 80

	// MaxIdempotencyKeyLen is Adyen's limit on an Idempotency-Key.
	MaxIdempotencyKeyLen = 64

	// MetadataKey is the metadata entry carrying payonce's local key on a payment, when the key
	// fits Adyen's 80-character metadata values, for people reading the payment in Adyen's
	// Customer Area. The reference is the link in every case: a notification's metadata is not
	// signed, so [Provider.VerifyWebhook] never reads the key from it.
	MetadataKey = "payonce_key"

	// Adyen's shopperReference length limits
	// (https://docs.adyen.com/api-explorer/Checkout/71/post/payments#request-shopperReference).
	minShopperReferenceLen = 3
	maxShopperReferenceLen = 256

	// Adyen's metadata limits.
	maxMetadataKeys     = 20
	maxMetadataKeyLen   = 20
	maxMetadataValueLen = 80
)

// ErrNoNotificationSource is returned by [Provider.Lookup] and [Provider.LookupRefund] without
// Config.Notifications.
var ErrNoNotificationSource = errors.New("adyen: Lookup and LookupRefund need Config.Notifications: Adyen has no read by reference, only webhooks tell what a reference became")

// Provider is the Adyen adapter of [provider.Provider] and [provider.WebhookVerifier]. It holds
// no globals; it is safe for concurrent use.
type Provider struct {
	c        *Client
	cfg      Config
	hmacKeys [][]byte
}

var (
	_ provider.Provider         = (*Provider)(nil)
	_ provider.ReferenceLimiter = (*Provider)(nil)
	_ provider.WebhookVerifier  = (*Provider)(nil)
)

// New returns a Provider for cfg. Errors: *[ConfigError] naming the bad field.
func New(cfg *Config) (*Provider, error) {
	c, keys, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Provider{c: newClient(c), cfg: c, hmacKeys: keys}, nil
}

// Client returns the Provider's REST client, for calls payments does not make itself (a
// partial capture, a refund or cancel made by hand).
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

// Charge authorises req.Amount on the stored card req.PaymentMethod (its
// storedPaymentMethodId), as Adyen's token payments require
// (https://docs.adyen.com/online-payments/tokenization/make-token-payments): shopperReference
// req.Shopper (the shopper the card was stored for), shopperInteraction ContAuth (a returning
// shopper whose card is on file, no security code collected) and Config.RecurringProcessingModel
// (CardOnFile by default). The reference is req.ProviderKey, the Idempotency-Key
// [IdempotencyKey] of it, and req.Key travels in the metadata under [MetadataKey] when it fits.
// req.Recipient and req.Description are not sent (no split, no shopper statement). The amount
// is sent in Adyen's minor units ([Decimals]).
//
// What Authorised means depends on Config.CaptureMode:
//
//   - [CaptureAutomatic]: Adyen captures the payment by itself, so Authorised is
//     [provider.ChargeSucceeded]: the money moved.
//   - [CaptureManual]: Authorised only reserves the funds. Charge reports the payment's
//     pspReference to req.Progress (so that the caller records it), then captures the full
//     amount with POST /payments/{pspReference}/captures (reference req.ProviderKey,
//     Idempotency-Key [provider.DeriveKey](req.ProviderKey, "capture", 0, 64)). Adyen only
//     acknowledges a capture, so the result is [provider.ChargePending]; the CAPTURE
//     notification settles it ([Provider.VerifyWebhook]: provider.EventCaptureSucceeded or
//     EventCaptureFailed). A retry that knows the pspReference (req.ProviderID) resumes at the
//     capture with the same Idempotency-Key: a capture whose response was lost is replayed, not
//     made twice. If Progress fails, Charge stops before the capture with an unknown outcome.
//     (A payment that answered Pending or RedirectShopper is captured the same way by a retry
//     that knows it; Adyen refuses, by CAPTURE notification, to capture what is not authorised.)
//
// Under automatic capture req.ProviderID is not used: a retry resends the payment with the same
// Idempotency-Key, which Adyen answers with the first response.
//
// Replayed is always false: Adyen answers a replay with the first response and no marker.
//
// On a refusal the result names the refused payment (status [provider.ChargeFailed]) next to
// the error. Errors (see the package documentation for the mapping): *[provider.DeclineError],
// *[provider.InvalidRequestError] (also for requests refused before sending: see
// [Provider.ValidateCharge]), *[provider.NotSentError], *[provider.UnknownOutcomeError]
// (also for a capture that could not be sent: the authorisation exists),
// *[provider.InProgressError], *[provider.KeyMismatchError].
func (p *Provider) Charge(ctx context.Context, req provider.ChargeRequest) (provider.ChargeResult, error) {
	preq, err := p.paymentRequest(req)
	if err != nil {
		return provider.ChargeResult{}, err
	}
	manual := p.cfg.CaptureMode == CaptureManual
	if manual && req.ProviderID != "" {
		// An earlier call got the payment authorised and recorded it: resume at its capture.
		return p.capture(ctx, req, preq.Amount, req.ProviderID)
	}
	resp, err := p.c.Payments(ctx, preq, IdempotencyKey(req.ProviderKey))
	if err != nil {
		return provider.ChargeResult{}, classify(err)
	}
	res := provider.ChargeResult{ProviderID: resp.PSPReference, Amount: req.Amount}
	if resp.Amount != nil {
		res.Amount = amountOr(*resp.Amount, req.Amount)
	}
	switch resp.ResultCode {
	case "Authorised":
		if !manual {
			res.Status = provider.ChargeSucceeded
			break
		}
		if req.Progress != nil {
			if err := req.Progress(ctx, resp.PSPReference); err != nil {
				return provider.ChargeResult{ProviderID: resp.PSPReference}, &provider.UnknownOutcomeError{Provider: providerName,
					Err: fmt.Errorf("adyen: payment %s is authorised, recording it before its capture failed: %w", resp.PSPReference, err)}
			}
		}
		return p.capture(ctx, req, preq.Amount, resp.PSPReference)
	case "Refused":
		res.Status = provider.ChargeFailed
		reason := resp.RefusalReason
		if reason == "" {
			reason = "Refused"
		}
		return res, &provider.DeclineError{Provider: providerName, Code: "Refused", DeclineCode: reason,
			Message: fmt.Sprintf("payment %s refused: %s (refusalReasonCode %s)", resp.PSPReference, reason, resp.RefusalReasonCode)}
	case "Pending", "Received":
		res.Status = provider.ChargePending
	case "RedirectShopper", "ChallengeShopper", "IdentifyShopper", "PresentToShopper":
		res.Status = provider.ChargeRequiresAction
	case "Cancelled":
		res.Status = provider.ChargeFailed
	default:
		// "Error" (Adyen could not tell), and codes a stored-card, full-amount payment should
		// not produce (PartiallyAuthorised, AuthenticationFinished, ...): never guessed.
		return provider.ChargeResult{ProviderID: resp.PSPReference}, &provider.UnknownOutcomeError{Provider: providerName, Status: 200,
			Err: fmt.Errorf("adyen: payment %s answered resultCode %q: the outcome comes by webhook", resp.PSPReference, resp.ResultCode)}
	}
	return res, nil
}

// captureKey is the Idempotency-Key of the capture of the payment whose reference is
// reference: derived from it, never random, within Adyen's 64 characters.
func captureKey(reference string) string {
	return provider.DeriveKey(reference, "capture", 0, MaxIdempotencyKeyLen)
}

// capture captures the full amount of the authorised payment psp (manual capture). Its
// reference is the payment's own (req.ProviderKey), so that the CAPTURE notification names the
// payment's reference whichever reference Adyen echoes in it.
func (p *Provider) capture(ctx context.Context, req provider.ChargeRequest, amount Amount, psp string) (provider.ChargeResult, error) {
	res := provider.ChargeResult{ProviderID: psp, Amount: req.Amount}
	resp, err := p.c.Capture(ctx, psp, ModificationRequest{Amount: amount, Reference: req.ProviderKey}, captureKey(req.ProviderKey))
	if err != nil {
		err = classify(err)
		var ns *provider.NotSentError
		if errors.As(err, &ns) {
			// The capture never left, but the authorisation exists: "not sent" must not be
			// read as "nothing at Adyen".
			err = &provider.UnknownOutcomeError{Provider: providerName,
				Err: fmt.Errorf("adyen: payment %s is authorised, its capture was not sent: %w", psp, ns.Err)}
		}
		return res, err
	}
	if resp.Status != "received" || resp.PSPReference == "" {
		return res, &provider.UnknownOutcomeError{Provider: providerName, Status: 201,
			Err: fmt.Errorf("adyen: capture of %s answered status %q, pspReference %q", psp, resp.Status, resp.PSPReference)}
	}
	res.Status = provider.ChargePending
	return res, nil
}

var _ provider.Validator = (*Provider)(nil)

// ValidateCharge refuses, before anything is recorded or sent, a charge Adyen would refuse or
// could not represent: a missing Key or PaymentMethod, a ProviderKey that is empty or over 80
// characters, a Shopper that is not 3 to 256 characters (Adyen's shopperReference, required
// with a stored payment method), an amount without currency, not positive, or finer than
// Adyen's decimals for its currency ([Decimals]: 1000.50 CVE cannot be sent, Adyen counts CVE
// in whole escudos), metadata over Adyen's limits. Errors: *[provider.InvalidRequestError]
// whose Param names the field.
func (p *Provider) ValidateCharge(req provider.ChargeRequest) error {
	_, err := p.paymentRequest(req)
	return err
}

// ValidateRefund is [Provider.ValidateCharge] for a refund: Key, ProviderKey, ChargeID and an
// amount Adyen can represent. [Provider.Refund] runs it before sending. Errors:
// *[provider.InvalidRequestError] whose Param names the field.
var _ provider.RefundValidator = (*Provider)(nil)

func (p *Provider) ValidateRefund(req provider.RefundRequest) error {
	_, err := refundAmount(req)
	return err
}

func refundAmount(req provider.RefundRequest) (Amount, error) {
	if err := checkKeys(req.Key, req.ProviderKey); err != nil {
		return Amount{}, err
	}
	amount, err := toAmount("Amount", req.Amount)
	if err != nil {
		return Amount{}, err
	}
	if req.ChargeID == "" {
		return Amount{}, invalid("ChargeID", "is required (the payment's pspReference)")
	}
	return amount, nil
}

// paymentRequest is req as Adyen's /payments body, or the *provider.InvalidRequestError that
// refuses it before sending.
func (p *Provider) paymentRequest(req provider.ChargeRequest) (PaymentRequest, error) {
	if err := checkKeys(req.Key, req.ProviderKey); err != nil {
		return PaymentRequest{}, err
	}
	amount, err := toAmount("Amount", req.Amount)
	if err != nil {
		return PaymentRequest{}, err
	}
	if req.PaymentMethod == "" {
		return PaymentRequest{}, invalid("PaymentMethod", "is required (a storedPaymentMethodId)")
	}
	if err := checkShopper(req.Shopper); err != nil {
		return PaymentRequest{}, err
	}
	md, err := metadata(req.Key, req.Metadata)
	if err != nil {
		return PaymentRequest{}, err
	}
	return PaymentRequest{
		Amount:        amount,
		Reference:     req.ProviderKey,
		PaymentMethod: PaymentMethod{Type: "scheme", StoredPaymentMethodID: req.PaymentMethod},
		ReturnURL:     p.cfg.ReturnURL,
		// A payment with a token names its shopper, says the shopper is a returning one whose
		// card is on file (ContAuth: no security code is collected), and what kind of stored-card
		// payment it is. Adyen refuses a token payment without them
		// (https://docs.adyen.com/online-payments/tokenization/make-token-payments,
		// https://docs.adyen.com/development-resources/error-codes: "Recurring payments require
		// a shopperReference", "CVC is required for OneClick card payments").
		ShopperReference:         req.Shopper,
		ShopperInteraction:       ShopperInteractionContAuth,
		RecurringProcessingModel: string(p.cfg.RecurringProcessingModel),
		Metadata:                 md,
	}, nil
}

// ShopperInteractionContAuth is the shopperInteraction of every payment: a returning shopper
// paying with card details on file, without a security code.
const ShopperInteractionContAuth = "ContAuth"

// checkShopper refuses a shopperReference Adyen refuses: a token payment needs one of 3 to 256
// characters.
func checkShopper(shopper string) error {
	switch n := utf8.RuneCountInString(shopper); {
	case n == 0:
		return invalid("Shopper", "is required: Adyen's shopperReference names the shopper the stored card belongs to "+
			"(payments.ChargeParams.Shopper, or the charge's Scope by default)")
	case n < minShopperReferenceLen || n > maxShopperReferenceLen:
		return invalid("Shopper", fmt.Sprintf("is %d characters; Adyen's shopperReference takes %d to %d: set payments.ChargeParams.Shopper "+
			"to the shopperReference the card was stored under", n, minShopperReferenceLen, maxShopperReferenceLen))
	}
	return nil
}

// Refund refunds req.Amount of the payment req.ChargeID (its pspReference), with
// req.ProviderKey as the refund's reference and [IdempotencyKey] of it as the Idempotency-Key.
// Adyen only acknowledges a refund: the result is [provider.RefundPending] with the refund's
// own pspReference, and the outcome comes in the REFUND notification ([Provider.VerifyWebhook]
// maps it to provider.EventRefundSucceeded or EventRefundFailed; a refund over what is left,
// or of a payment not captured yet, fails there, not here; [Provider.LookupRefund] reads it
// back). The amount is refused before sending when Adyen cannot represent it
// ([Provider.ValidateRefund]). Errors: as [Provider.Charge], without declines.
func (p *Provider) Refund(ctx context.Context, req provider.RefundRequest) (provider.RefundResult, error) {
	amount, err := refundAmount(req)
	if err != nil {
		return provider.RefundResult{}, err
	}
	resp, err := p.c.Refund(ctx, req.ChargeID, ModificationRequest{Amount: amount, Reference: req.ProviderKey}, IdempotencyKey(req.ProviderKey))
	if err != nil {
		return provider.RefundResult{}, classify(err)
	}
	if resp.Status != "received" || resp.PSPReference == "" {
		return provider.RefundResult{}, &provider.UnknownOutcomeError{Provider: providerName, Status: 201,
			Err: fmt.Errorf("adyen: refund answered status %q, pspReference %q", resp.Status, resp.PSPReference)}
	}
	res := provider.RefundResult{ProviderID: resp.PSPReference, Status: provider.RefundPending, Amount: req.Amount}
	if resp.Amount != nil {
		res.Amount = amountOr(*resp.Amount, req.Amount)
	}
	return res, nil
}

// Lookup tells what Adyen made of req.ProviderKey (the reference payonce sent) from its
// notifications (Config.Notifications): one result per payment (pspReference) with an
// AUTHORISATION notification. A refused one is failed. An authorised one is succeeded under
// [CaptureAutomatic]; under [CaptureManual] it is pending until a CAPTURE success names it
// (originalReference; the capture carries the payment's reference, see [Provider.Charge]),
// and stays pending after a failed capture (nothing moved, the authorisation stands). A
// payment that a TECHNICAL_CANCEL, CANCELLATION or CANCEL_OR_REFUND voided later
// (provider.EventCancelled) is failed: no money stays moved. Notifications may still be on
// their way, so the result is never Consistent. req.From and req.To are not used
// (notifications are found by reference).
//
// req.WithRefunds is not served: RefundsKnown stays false on every charge. Adyen has no read of
// a payment's refunds, and the notifications found by the payment's reference hold none: a
// REFUND notification carries the refund's own reference as merchantReference, and the
// payment's pspReference only as originalReference (WebhookEvent.ChargeID). Telling the
// refunded total would take a source of the notifications by originalReference (the REFUND
// and REFUND_FAILED events whose ChargeID is the pspReference); even then it would come from
// the same webhooks payonce records its refunds from, not from an independent read.
//
// Errors: [ErrNoNotificationSource]; *[provider.InvalidRequestError] without ProviderKey;
// the source's error, wrapped.
func (p *Provider) Lookup(ctx context.Context, req provider.LookupRequest) (provider.LookupResult, error) {
	if p.cfg.Notifications == nil {
		return provider.LookupResult{}, ErrNoNotificationSource
	}
	if req.ProviderKey == "" {
		return provider.LookupResult{}, invalid("ProviderKey", "is required: Adyen's notifications are found by reference")
	}
	events, err := p.cfg.Notifications(ctx, req.ProviderKey)
	if err != nil {
		return provider.LookupResult{}, fmt.Errorf("adyen: notifications of this reference (key %s): %w", idempotency.ShortHash(req.ProviderKey), err)
	}
	res := provider.LookupResult{Charges: []provider.ChargeResult{}}
	index := map[string]int{}
	cancelled := map[string]bool{}
	captured := map[string]bool{}
	authorised := provider.ChargeSucceeded
	if p.cfg.CaptureMode == CaptureManual {
		authorised = provider.ChargePending
	}
	for _, ev := range events {
		switch {
		case ev.Kind == provider.EventCancelled:
			cancelled[ev.ChargeID] = true
		case ev.Type == "CAPTURE" && ev.Kind == provider.EventCaptureSucceeded:
			captured[ev.ChargeID] = true
		case ev.Type == "AUTHORISATION" && ev.Reference == req.ProviderKey &&
			(ev.Kind == provider.EventChargeSucceeded || ev.Kind == provider.EventChargePending || ev.Kind == provider.EventChargeFailed):
			st := authorised
			if ev.Kind == provider.EventChargeFailed {
				st = provider.ChargeFailed
			}
			if i, seen := index[ev.ProviderID]; seen {
				if st == provider.ChargeFailed { // a failure is never undone by a duplicate
					res.Charges[i].Status = st
				}
				continue
			}
			index[ev.ProviderID] = len(res.Charges)
			res.Charges = append(res.Charges, provider.ChargeResult{ProviderID: ev.ProviderID, Status: st, Amount: ev.Amount})
		}
	}
	for i, ch := range res.Charges {
		switch {
		case cancelled[ch.ProviderID]:
			res.Charges[i].Status = provider.ChargeFailed
		case ch.Status == provider.ChargePending && captured[ch.ProviderID]:
			res.Charges[i].Status = provider.ChargeSucceeded
		}
	}
	return res, nil
}

// invalid is a request refused before sending it.
func invalid(param, msg string) error { return adapterkit.Refused(providerName, param, msg) }

func checkKeys(key, reference string) error {
	switch {
	case key == "":
		return invalid("Key", "is required")
	case reference == "":
		return invalid("ProviderKey", "is required: it is Adyen's reference and the seed of the Idempotency-Key")
	case utf8.RuneCountInString(reference) > MaxReferenceLen:
		return invalid("ProviderKey", fmt.Sprintf("is %d characters, Adyen's reference allows %d (derive it with provider.DeriveKey under provider.MaxReferenceLen)",
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

var _ provider.IDChecker = (*Provider)(nil)

// CheckID refuses an id that is not a pspReference, which this adapter
// records for charges and refunds alike: Adyen's API reference gives it as
// its 16-character reference of the request (see docs/providers.md). It
// sends nothing. Errors: *[provider.InvalidRequestError] naming
// ProviderID.
func (p *Provider) CheckID(step, id string) error {
	if len(id) != 16 || strings.IndexFunc(id, func(r rune) bool {
		return !('0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
	}) >= 0 {
		return invalid("ProviderID", fmt.Sprintf("%q is not a pspReference: Adyen's are 16 letters and digits (the %s's, as the Customer Area shows it)", id, step))
	}
	return nil
}
