// Package adyen is payonce's Adyen adapter: a [provider.Provider], [provider.Validator],
// [provider.Voider] and [provider.WebhookVerifier] over Adyen's Checkout API v71, through a
// small typed REST [Client] (the official Go library is not available to this module): POST
// /payments, /payments/{pspReference}/refunds, /captures and /reversals, and /cancels.
//
//	p, err := adyen.New(&adyen.Config{
//		APIKey:          os.Getenv("ADYEN_API_KEY"),
//		MerchantAccount: "ShopECOM",
//		ReturnURL:       "https://shop.example/checkout/return",
//		HMACKeys:        []string{os.Getenv("ADYEN_HMAC_KEY")},
//		Notifications:   inbox.ByReference, // what the webhook receiver stored
//	})
//
// # References and keys
//
// Adyen takes two identifiers, and payonce derives both from the local key, the step and the
// attempt, never at random:
//
//   - reference (at most 80 characters; [MaxReferenceLen], which [Provider.MaxReferenceLen]
//     reports so that payments compacts it): the request's ProviderKey as payments derives it,
//     "<key>_<step>_<attempt>" or, when longer, a prefix and a SHA-256. A longer ProviderKey is
//     refused, not cut.
//   - Idempotency-Key (at most 64): [IdempotencyKey] of the reference, the reference itself
//     when it fits, else its first 11 characters, "_" and the base32 SHA-256 of the whole.
//
// Adyen does not deduplicate references: only the Idempotency-Key prevents a second payment,
// so it must follow from the reference, and the reference must be the same on every retry.
// The local key also travels in metadata[payonce_key] ([MetadataKey]) when it fits Adyen's
// 80-character values; it is omitted otherwise (the reference is the link). It is for people
// reading the payment at Adyen, never for matching: Adyen's webhook signature does not cover
// additionalData, so a notification's metadata could name any intent. Events are matched by
// the signed merchantReference, pspReference and originalReference only.
//
// # Retention
//
// Adyen's idempotency page says keys are valid for at least 31 days; PROVIDERS.md asks to
// design for 7. [Provider.DedupWindow] reports Config.Retention, 31 days by default, and a
// configuration under 7 days is refused: payonce keeps a key at least as long as Adyen might
// replay it.
//
// # Outcomes
//
// Payments are token payments with the stored card ChargeRequest.PaymentMethod
// (paymentMethod.storedPaymentMethodId), sent with the fields Adyen requires of a payment with a
// token (https://docs.adyen.com/online-payments/tokenization/make-token-payments):
//
//   - shopperReference: ChargeRequest.Shopper, which payments fills with
//     payments.ChargeParams.Shopper or, by default, the charge's Scope (the authenticated
//     customer). It must be the reference the card was stored under, 3 to 256 characters, and
//     hold no personal data (Adyen asks for an id, not a name or an email); anything else is
//     refused before sending, naming Shopper.
//   - shopperInteraction ContAuth: a returning shopper whose card is on file; no security code
//     is collected.
//   - recurringProcessingModel: Config.RecurringProcessingModel, CardOnFile by default (the
//     shopper starts the payment, as from a checkout); UnscheduledCardOnFile or Subscription for
//     payments the merchant starts.
//
// What Authorised means depends on the merchant account's capture setting, which the adapter
// cannot read and Config.CaptureMode states (https://docs.adyen.com/online-payments/capture):
//
//   - [CaptureAutomatic] (Adyen's default, and a capture delay too): Adyen captures by itself,
//     Authorised means the money moved, and the AUTHORISATION notification is
//     provider.EventChargeSucceeded.
//   - [CaptureManual]: Authorised only reserves the funds. [Provider.Charge] reports the
//     pspReference through ChargeRequest.Progress, then captures (POST
//     /payments/{pspReference}/captures, whose answer is only "received"): the charge is
//     ChargePending, the AUTHORISATION notification provider.EventChargePending, and the
//     CAPTURE notification settles it (EventCaptureSucceeded or EventCaptureFailed, ChargeID
//     the payment). A retry with ChargeRequest.ProviderID resumes at the capture, whose
//     Idempotency-Key makes a lost capture response a replay.
//
// The answers map as follows:
//
//	resultCode                                   ChargeResult / error
//	Authorised                                   ChargeSucceeded (automatic capture),
//	                                             ChargePending after the capture request (manual)
//	Refused                                      ChargeFailed + *DeclineError (DeclineCode = refusalReason)
//	Pending, Received                            ChargePending (the AUTHORISATION webhook decides)
//	RedirectShopper, ChallengeShopper,           ChargeRequiresAction
//	  IdentifyShopper, PresentToShopper
//	Cancelled                                    ChargeFailed
//	Error, any other code                        *UnknownOutcomeError (never guessed)
//
//	HTTP answer                                  provider error            final?
//	409 or 422 errorCode "704"                   *InProgressError          retry later, same key
//	Transient-Error: true (any status)           *UnknownOutcomeError      retry, same key
//	422 idempotency_key_reused (adyentest only)  *KeyMismatchError         a bug: report
//	401, 403 (API key, permissions, merchant)    *CredentialsError         no: fix the key, retry
//	other 4xx (validation)                       *InvalidRequestError      yes on a first attempt,
//	                                                                       never on a resumed one
//	429, 5xx                                     *UnknownOutcomeError      same key replays a 5xx
//	2xx that does not decode                     *UnknownOutcomeError      retry, same key
//	transport error before any byte was written  *NotSentError             retry
//	transport error after (timeout, reset)       *UnknownOutcomeError      retry, same key
//
// "Written" is observed with [net/http/httptrace] across net/http's own attempts. A response
// with Transient-Error: true was not kept by Adyen for the key and may be retried with it;
// it is reported as unknown rather than not-sent because the request did reach Adyen and
// nothing proves it did nothing, and both classes are equally safe to retry. A 5xx without
// that header is final for the key at Adyen: a retry replays it, and only the AUTHORISATION
// notification ([Provider.Lookup]) resolves it (a technical cancel, [Provider.Void], voids it
// only while it is not captured).
//
// Replayed is always false: Adyen answers a replay with the first response, byte for byte,
// and no marker (the echoed Idempotency-Key header is on every keyed response).
//
// Refunds are only acknowledged ("received"): [Provider.Refund] returns RefundPending with the
// refund's pspReference, and the REFUND notification says whether it succeeded (a refund over
// what is left, or of a payment not captured yet, fails there).
//
// # Amounts
//
// Adyen's amount.value is in Adyen's minor units, whose decimals are Adyen's own and differ
// from ISO 4217 (which package money follows) for four currencies: CLP and ISK take 2 decimals
// (ISO: 0), CVE and IDR 0 (ISO: 2) (https://docs.adyen.com/development-resources/currency-codes).
// [Decimals] is that table, and every conversion uses it: 1000 CVE is sent as value 1000, 1000
// CLP as value 100000, and notifications are read back the same way. An amount Adyen cannot
// represent (1000.50 CVE) is refused before anything is recorded or sent
// ([Provider.ValidateCharge], [Provider.ValidateRefund]), naming the field.
//
// # Voids
//
// [Provider.Void] ([provider.Voider]) makes an attempt void. With the payment's pspReference it
// sends a reversal (POST /payments/{pspReference}/reversals: Adyen cancels the payment if it is
// not captured and refunds it in full if it is; CANCEL_OR_REFUND notification). Without it,
// the technical cancel by reference (POST /cancels; TECHNICAL_CANCEL), which only cancels an
// authorisation that is not captured yet: under automatic capture, a payment that was made is
// captured, and the technical cancel fails. A successful void is provider.EventCancelled
// (DeclineCode "cancelled", or "refunded" for a reversal that refunded); a failed one is
// provider.EventCancelFailed with Adyen's reason, and proves nothing about the payment's
// absence.
//
// # Lookup
//
// Adyen has no read by reference. [Provider.Lookup] asks Config.Notifications for the events
// stored under the reference and reports one charge per pspReference with an AUTHORISATION:
// failed when refused or when a later TECHNICAL_CANCEL, CANCELLATION or CANCEL_OR_REFUND voided
// it; under manual capture, pending until a CAPTURE success names it. Notifications can lag,
// so the answer is never Consistent, and "nothing" is no proof of absence: within the dedup
// window, resend with the same key. A technical cancel by reference is no proof either: it
// fails on a captured payment, and its TECHNICAL_CANCEL then names the payment it found
// (ChargeID), which a reversal can undo.
//
// Lookup cannot tell what Adyen refunded of a charge (provider.LookupRequest.WithRefunds):
// RefundsKnown stays false. A REFUND notification carries the refund's own reference as
// merchantReference (the payment's pspReference is its originalReference), so the events
// stored under the payment's reference hold none, and the Checkout API has no read of a
// payment's refunds.
//
// [Provider.LookupRefund] ([provider.RefundLooker]) tells what became of a refund attempt from
// the notifications stored under the refund's own reference: REFUND success true is succeeded;
// REFUND success false, or REFUND_FAILED (even after a success), is failed. It is never
// Consistent either: no notification yet proves nothing.
//
// # Retries
//
// The adapter never retries, and neither does Adyen on its side: payonce retries with the same
// reference and so the same Idempotency-Key, which Adyen deduplicates for the dedup window.
// Adyen's webhook deliveries are retried by Adyen until acknowledged with 2xx, and may come
// more than once: dedupe on [provider.WebhookEvent].ID ("pspReference:eventCode:success").
// net/http resends a keyed POST on a fresh connection when a reused keep-alive connection fails
// before the response: harmless (same key), but it can hide a lost response in tests, which
// therefore disable keep-alives.
//
// # Webhooks
//
// [Provider.VerifyWebhook] verifies each item's HMAC signature against every Config.HMACKeys
// entry (rotation) and maps event codes to [provider.EventKind]; see its documentation.
package adyen
