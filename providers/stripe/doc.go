// Package stripe is payonce's Stripe adapter: a [provider.Provider] over
// PaymentIntents and Refunds of Stripe API v1, through stripe-go v79, plus
// a [provider.Totaler] over Balance Transactions and webhook signature
// verification.
//
// The package shares its name with stripe-go's; alias one of them. payonce
// code aliases this package and keeps stripe-go's name for stripe-go:
//
//	import paystripe "github.com/payonce/payonce/providers/stripe"
//
//	p, err := paystripe.New(&paystripe.Config{SecretKey: os.Getenv("STRIPE_SECRET_KEY")})
//	res, err := p.Charge(ctx, provider.ChargeRequest{
//		Key:           "order-42",
//		ProviderKey:   provider.DeriveKey("order-42", "charge", 1, paystripe.MaxProviderKeyLen),
//		Amount:        money.MustParse("20.00", money.EUR),
//		PaymentMethod: "pm_card_visa",
//	})
//
// (inside this package, stripe-go is imported as stripego.)
//
// # Idempotency
//
// Every write carries the caller's ProviderKey as its Idempotency-Key
// (refused when empty or longer than [MaxProviderKeyLen]) and the local key
// in its metadata under [MetadataKey]. Through payments, the local key is
// the composed one, "<scope>_charge_<key>", not the client's key alone: a
// charge of customer cust_1 with the key order-3 carries payonce_key
// cust_1_charge_order-3, and Stripe's search finds it by
// metadata['payonce_key']:'cust_1_charge_order-3'. Compose it with
// [github.com/payonce/payonce/payments.ChargeKey] (RefundKey for a
// refund), the function payments uses. Stripe keeps keys at least 24 hours
// ([Provider.DedupWindow]): a retry with the same key within that window is
// answered from Stripe's cache, Replayed in the result. After it, only
// [Provider.Lookup] tells what exists.
//
// # Amounts
//
// Stripe's integer amounts follow Stripe's exponents, which are not ISO
// 4217's (https://docs.stripe.com/currencies): [ToAmount] and [FromAmount]
// convert. Most currencies are two-decimal (10.50 EUR is 1050);
// zero-decimal ones are sent as they are (500 JPY is 500; MGA is
// zero-decimal at Stripe and two-decimal in ISO); three-decimal ones (BHD,
// JOD, KWD, OMR, TND) must end in 0 (1.230 KWD is 1230, 1.235 KWD is
// refused); ISK and UGX are whole units written with two decimals (5000
// ISK is 500000). HUF and TWD are two-decimal for charges and refunds
// (Stripe's whole-unit rule for them is for payouts). An amount Stripe
// cannot represent is refused before sending, by [Provider.ValidateCharge]
// ([provider.Validator]: payments refuses it before recording anything),
// [Provider.Charge] and [Provider.Refund], with an
// *[provider.InvalidRequestError] naming Amount. Lookups, totals and
// webhook events read Stripe's amounts back with the same table.
//
// # Lookup
//
// [Provider.Lookup] finds the PaymentIntents carrying a local key in their
// metadata. With a creation window it lists the window's PaymentIntents
// (List API: consistent) and matches the metadata. Without a window, or
// when the window holds more than Config.LookupScanLimit PaymentIntents,
// it asks the Search API (metadata['payonce_key']:'<key>'), which is
// eventually consistent: usually less than a minute behind, up to an hour
// during outages. Such answers are marked Consistent false, and a charge
// missing from one may exist all the same: never treat it as proof that an
// attempt left nothing at Stripe. With LookupRequest.WithRefunds it also
// lists each charge's refunds (GET /v1/refunds?payment_intent=..., one
// more request per charge) and reports the succeeded ones' sum as
// Refunded, with RefundsKnown.
//
// [Provider.LookupRefund] ([provider.RefundLooker]) finds a refund attempt
// whose outcome was lost: it reads the refund by id when known, else lists
// the PaymentIntent's refunds and keeps those carrying the refund's key in
// their metadata. Both are consistent reads: an empty answer proves that
// no refund with the key exists.
//
// # Totals
//
// [Provider.Totals] sums, per currency, the balance transactions Stripe
// created in a window [from, to) (whole seconds): charges (type charge,
// payment) into Charged; refunds (refund, payment_refund) into Refunded,
// less the refunds that failed (refund_failure, which give the money back
// in the window of the failure, so that a window's Refunded can be
// negative). Amounts are gross, before Stripe's fees; payouts, fees,
// transfers and adjustments (disputes) are not counted. Transactions are in
// the account's settlement currency: a charge Stripe converted lands there,
// not in the charge's currency. A charge or refund in a currency money
// does not know fails the call rather than being skipped.
//
// # Retries
//
// The adapter does not retry. stripe-go's own retries are off by default
// (Config.MaxNetworkRetries): payonce retries at its level with the same
// key, within the caller's deadline, and sees every 409. See
// [Config.MaxNetworkRetries] for what turning them on would do.
//
// # Errors
//
// stripe-go's *stripe.Error and transport errors become payments' outcome
// classes:
//
//	Stripe answer                                   provider error            final?
//	card_error (402)                                *DeclineError             yes, replayed for the key
//	409, or code idempotency_key_in_use (any type)  *InProgressError          retry later, same key
//	idempotency_error (400, other parameters)       *KeyMismatchError         a bug: report
//	invalid_request_error (400, 404, ...)           *InvalidRequestError      yes on a first attempt; on a
//	                                                                          resumed one only if replayed
//	401, 403 (bad, rolled or restricted key)        *CredentialsError         no: fix the key, retry
//	429 (rate limit, lock timeout)                  *UnknownOutcomeError      retry, same key
//	5xx (api_error)                                 *UnknownOutcomeError      retry, same key; a cached 500 replays
//	transport error before any request was written  *NotSentError             retry
//	  (dial error, TLS failure, context ended first)
//	transport error after a request was written     *UnknownOutcomeError      retry, same key, or reconcile
//	  (timeout, reset, EOF, context deadline)
//
// An invalid_request_error carries Replayed when Stripe marked it
// Idempotent-Replayed: its answer to the key's first request, which
// executed and was refused. payments settles a resumed attempt (a retry
// of an attempt whose outcome was lost) only on such a refusal: one
// without the mark was not cached and says nothing of the first request,
// which may have charged. A 401 or 403 is refused before anything
// executes and is never cached: payments keeps the intent open and tells
// the caller to check the API key.
//
// "Written" is observed with [net/http/httptrace] across all attempts, so
// a dial error after net/http already wrote (and lost) the request on a
// keep-alive connection is not mistaken for "not sent". A 429 is not
// documented to leave nothing executed, so it is not treated as not sent.
// A 500 that Stripe produced after execution started is cached for the key:
// the retry replays the 500 and the outcome stays unknown until
// [Provider.Lookup] (the reconciler) resolves it.
//
// Requests the adapter refuses before sending (bad metadata, missing
// fields, amounts Stripe cannot represent) are
// *[provider.InvalidRequestError] naming the field in Param.
//
// # Webhooks
//
// [Provider.VerifyWebhook] implements [provider.WebhookVerifier]: it checks
// a delivery's Stripe-Signature header against Config.WebhookSecrets (all
// of them, for a rotation) within Config.WebhookTolerance and maps the
// event to a [provider.WebhookEvent] (charge succeeded, failed or pending;
// refund succeeded or failed; everything else ignored). A bad signature is
// [provider.ErrWebhookSignature], an unreadable body
// [provider.ErrWebhookMalformed]:
//
//	func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
//		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
//		if err != nil { ... }
//		events, err := h.stripe.VerifyWebhook(r.Context(), r.Header, body)
//		switch {
//		case errors.Is(err, provider.ErrWebhookSignature), errors.Is(err, provider.ErrWebhookMalformed):
//			http.Error(w, "refused", http.StatusBadRequest)
//		case err != nil:
//			http.Error(w, "try again", http.StatusInternalServerError)
//		default:
//			// record events, deduplicated on their ID, then answer 2xx
//		}
//	}
//
// The package function [VerifyWebhook] checks a signature and returns
// stripe-go's event as it is.
package stripe
