// Package paypal is payonce's PayPal adapter: a [provider.Provider] (also a
// [provider.StepWindower], [provider.Validator] and [provider.RefundLooker]),
// [provider.WebhookVerifier] and [provider.Totaler] over Orders v2, Payments v2 and Transaction
// Search, on a small typed REST client ([Client]) of its own.
//
//	p, err := paypal.New(&paypal.Config{
//		ClientID:  os.Getenv("PAYPAL_CLIENT_ID"),
//		Secret:    os.Getenv("PAYPAL_SECRET"),
//		BaseURL:   paypal.LiveBaseURL,
//		WebhookID: os.Getenv("PAYPAL_WEBHOOK_ID"),
//	})
//	res, err := p.Charge(ctx, provider.ChargeRequest{
//		Key:           "order-42",
//		ProviderKey:   provider.DeriveKey("order-42", "charge", 0, paypal.MaxProviderKeyLen),
//		Amount:        money.MustParse("20.00", money.EUR),
//		PaymentMethod: vaultID, // a saved card
//		Progress:      recordOrderID, // the order id, before anything else can be lost
//	})
//
// # One step, sometimes two
//
// A PayPal charge of a vaulted card is single-step: PayPal authorizes and captures in the
// create itself. "When a payer is using a card to check out, the Orders API allows you to
// capture the payment in a single request ... the Authorize and Capture requests occur in a
// single request" (https://developer.paypal.com/api/orders-v2/save-with-purchase/cards/), and
// the PayPal-Request-Id "is mandatory for all single-step create order calls (E.g. Create Order
// Request with payment source information like Card, PayPal.vault_id, ...)"
// (https://developer.paypal.com/api/orders/v2/#orders_create).
//
//  1. POST /v2/checkout/orders {intent CAPTURE, one purchase unit with custom_id = ProviderKey
//     and the amount as a decimal string with PayPal's decimal places for the currency,
//     payment_source card.vault_id}. The money moves here: the order comes back COMPLETED with
//     purchase_units[].payments.captures[], whose status decides the result (COMPLETED
//     succeeded, PENDING pending, DECLINED or FAILED a *[provider.DeclineError] whose
//     DeclineCode is the processor's response code: "A completed order can indicate a payment
//     was authorized, an authorized payment was captured, or a payment was declined",
//     https://developer.paypal.com/api/orders/v2/definitions/order_status/). When the card needs
//     3-D Secure the order is PAYER_ACTION_REQUIRED, nothing is captured, and the charge is
//     reported [provider.ChargeRequiresAction]. ChargeRequest.Progress receives the order id
//     as soon as the create answered, whatever its status, so that the caller records it: a
//     read of the order then settles a lost answer at any age. If Progress fails, Charge stops
//     with an unknown outcome (the order may be captured already) and the retry resumes.
//  2. Only for an order that is APPROVED and not captured (a 3-D Secure order whose payer
//     completed the challenge, which a retry names in ChargeRequest.ProviderID): POST
//     /v2/checkout/orders/{id}/capture.
//
// A retry that knows the order id (ChargeRequest.ProviderID) reads the order instead of
// creating one, and captures it only if it is APPROVED. An order admits one capture: a second
// capture is refused 422 ORDER_ALREADY_CAPTURED, which Charge resolves by reading the capture
// from the order. The result's ProviderID is always the order id: [Provider.Lookup] and
// [Provider.Refund] take it.
//
// # Request ids
//
// Every write carries a PayPal-Request-Id derived from the ProviderKey and the step:
// [RequestID](ProviderKey, step) = UUIDv5([Namespace], ProviderKey+"_"+step) for the steps
// [StepCreate], [StepCapture] and [StepRefund]. A retry sends the same ids. "When you include a
// previously specified PayPal-Request-Id header in a request, PayPal returns the latest status
// of the previous request that used that same header"
// (https://developer.paypal.com/api/rest/reference/idempotency/), with 200 where the first
// answer was 201 (https://developer.paypal.com/api/rest/responses/): the result's Replayed. So a
// retry of a charge inside the window returns the same, captured order, and no second capture
// happens. PayPal does so whatever the parameters, so the adapter checks that a returned order
// carries this ProviderKey and amount, and a returned refund this custom_id and amount
// (*[provider.KeyMismatchError] otherwise). A request id still executing is refused 409
// PREVIOUS_REQUEST_IN_PROGRESS: *[provider.InProgressError].
//
// # Retention
//
// PayPal keeps the request ids of the Orders v2 calls, the create AND the capture of an order, 6
// hours ("The server stores keys for 6 hours. The API callers can request the times to up to 72
// hours by speaking to their Account Manager", on both the create and the capture reference,
// https://developer.paypal.com/api/orders/v2/#orders_create and #orders_capture), and the
// request id of a refund of a capture (Payments v2) 45 days ("The server stores keys for 45
// days", https://developer.paypal.com/api/payments/v2/#captures_refund): Config.OrderRetention
// and Config.RefundRetention; New refuses values below these. The Provider is a
// [provider.StepWindower]: [Provider.StepDedupWindow] is OrderRetention for
// [provider.StepCharge] and RefundRetention for [provider.StepRefund]; [Provider.DedupWindow] is
// the longest, 45 days, how long payonce must keep the local key.
//
// After 6 hours a create with the same request id is a NEW request: PayPal makes a second order
// and, the create being single-step, charges the card a second time. payments therefore never
// re-sends a charge's request ids past the charge step's window; it looks the attempt up
// instead ([Provider.Lookup]). A refund retried after 45 days would be a second refund, which
// payonce's local retention and the refund step's window prevent.
//
// # Currencies
//
// PayPal takes the currencies of its own table, with its own decimal places, which differ from
// ISO 4217 (the money package's): HUF and TWD take no decimals at PayPal, as JPY
// (https://developer.paypal.com/api/rest/reference/currency-codes/: "This currency does not
// support decimals. If you pass a decimal amount, an error occurs"). [AmountOf] writes amounts
// with PayPal's decimals (10 HUF is "10"); a charge or refund in a currency PayPal does not
// support, or with more decimals than it takes (10.50 HUF), is refused before anything is sent
// or recorded ([Provider.ValidateCharge], which payments calls first), naming the field. See
// [Currencies].
//
// # Retries
//
// Neither this adapter nor its client retries a business request; payonce retries at its
// level with the same ProviderKey, hence the same request ids, within PayPal's windows. The
// client's only resend is after a 401: it refreshes the token once (concurrent callers share
// one refresh) and resends once, which is safe because PayPal executed nothing. Access tokens
// are cached and replaced 5 minutes (at most a quarter of their lifetime) before expiry.
// net/http resends by itself only requests it knows to be idempotent or that carry an
// Idempotency-Key header, which PayPal requests do not; it may resend on a reused keep-alive
// connection only what was never written.
//
// # Errors
//
//	PayPal answer                                          provider error          final?
//	capture DECLINED / FAILED, 422 INSTRUMENT_DECLINED     *DeclineError           yes
//	422 DECIMALS_NOT_SUPPORTED, CURRENCY_NOT_SUPPORTED     *InvalidRequestError    yes (refused before sending)
//	409 PREVIOUS_REQUEST_IN_PROGRESS                       *InProgressError        retry later, same ids
//	400, 404, 422 (validation, REFUND_AMOUNT_EXCEEDED)     *InvalidRequestError    yes on a first attempt,
//	                                                                               never on a resumed one
//	401 after one token refresh, 403 NOT_AUTHORIZED,       *CredentialsError       no: fix the credentials,
//	  token refused (401 invalid_client)                                           retry
//	429, 5xx                                               *UnknownOutcomeError    retry, same ids
//	no token (token endpoint unreachable or 5xx)           *NotSentError           retry
//	transport error before the request was written         *NotSentError           retry
//	timeout, reset, EOF after it was written               *UnknownOutcomeError    retry, same ids
//	Progress failed                                        *UnknownOutcomeError    retry resumes
//	order of another ProviderKey or amount                 *KeyMismatchError       a bug: report
//
// Requests refused before sending (missing Key, ProviderKey over 127 bytes, non-positive
// amount, a currency or a precision PayPal does not take, ...) are
// *[provider.InvalidRequestError] naming the field in Param.
//
// # Lookup
//
// [Provider.Lookup] reads the order when its id is known, at any age. Without it, inside the
// create's 6-hour window, it replays the create's request id with a probe order (no payment
// source, so it can never be paid): an existing order comes back 200; a 201 means PayPal never
// saw the request id, and no charge exists. Past the window, where a replay would be a new
// request, it searches Transaction Search over the attempt's creation period for payments whose
// custom_field (custom_id) or invoice_id is the ProviderKey, and reads their orders; PayPal
// documents that transactions take up to 3 hours to appear there, so an empty answer is
// consistent (proof of absence) only for a period that ended more than 3 hours ago. Without
// LookupRequest.From and To it cannot tell, and says so with an error matching
// [provider.ErrCannotTell] (the reconciler flags the intent for review). With
// LookupRequest.WithRefunds the charge also reports the sum of the order's COMPLETED refunds as
// Refunded, with RefundsKnown.
//
// [Provider.LookupRefund] ([provider.RefundLooker]) finds a refund attempt whose outcome was
// lost: it reads the refund by id when known, else reads the order and keeps the refunds whose
// custom_id is the attempt's ProviderKey. Both reads are consistent: an empty answer proves that
// no refund was made with it.
//
// # Totals
//
// [Provider.Totals] sums, per currency, the successful (status S) payments received (T00nn,
// positive) and payment refunds (T1107, negated) that PayPal's Transaction Search (GET
// /v1/reporting/transactions) lists in a window, for the reconciler's balance-level drift check.
// Longer windows than PayPal's 31-day limit are read in 31-day requests. Transaction Search lags
// up to 3 hours ([SearchLag]): totals of a window ending less than 3 hours ago may be
// incomplete. reconcile.Config.DriftLag defaults to 4h, past that lag; do not set it under 3h
// with PayPal, or expect drift reports for the last hours' payments that are only lag.
//
// # Webhooks
//
// [Provider.VerifyWebhook] asks PayPal to verify a delivery (verify-webhook-signature) and maps
// PAYMENT.CAPTURE.* events to [provider.EventKind] values; see its documentation.
package paypal
