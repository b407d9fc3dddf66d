// Package paypal is payonce's PayPal adapter: a [payments.Provider],
// [payments.WebhookVerifier] and [payments.Totaler] over Orders v2, Payments v2 and Transaction
// Search, on a small typed REST client ([Client]) of its own.
//
//	p, err := paypal.New(&paypal.Config{
//		ClientID:  os.Getenv("PAYPAL_CLIENT_ID"),
//		Secret:    os.Getenv("PAYPAL_SECRET"),
//		BaseURL:   paypal.LiveBaseURL,
//		WebhookID: os.Getenv("PAYPAL_WEBHOOK_ID"),
//	})
//	res, err := p.Charge(ctx, payments.ChargeRequest{
//		Key:           "order-42",
//		ProviderKey:   payments.ProviderKey("order-42", "charge", 0, paypal.MaxProviderKeyLen),
//		Amount:        money.MustParse("20.00", money.EUR),
//		PaymentMethod: vaultID, // a saved card
//		Progress:      recordOrderID,
//	})
//
// # Two steps
//
// A PayPal charge is two writes, and either response can be lost:
//
//  1. POST /v2/checkout/orders {intent CAPTURE, one purchase unit with custom_id = ProviderKey
//     and the amount as a decimal string with the currency's minor digits, payment_source
//     card.vault_id}. The order is APPROVED (or PAYER_ACTION_REQUIRED, when the card needs 3-D
//     Secure: the charge is then reported [payments.ChargeRequiresAction] and not captured).
//     No money moves yet. ChargeRequest.Progress receives the order id before step 2, so that
//     the caller records it; if Progress fails, Charge stops with an unknown outcome and the
//     retry resumes.
//  2. POST /v2/checkout/orders/{id}/capture. The capture moves the money; its status decides
//     the result (COMPLETED succeeded, PENDING pending, DECLINED or FAILED a
//     *[payments.DeclineError] whose DeclineCode is the processor's response code).
//
// A retry that knows the order id (ChargeRequest.ProviderID) reads the order instead of
// creating one, and captures it only if it is not captured yet. An order admits one capture:
// a second capture is refused 422 ORDER_ALREADY_CAPTURED, which Charge resolves by reading
// the capture from the order. So the capture cannot happen twice whatever the request ids;
// the request ids make the create unique and let a lost answer be replayed. The result's
// ProviderID is always the order id: it exists from step 1, and [Provider.Lookup] and
// [Provider.Refund] take it.
//
// # Request ids
//
// Every write carries a PayPal-Request-Id derived from the ProviderKey and the step:
// [RequestID](ProviderKey, step) = UUIDv5([Namespace], ProviderKey+"_"+step) for the steps
// [StepCreate], [StepCapture] and [StepRefund]. A retry sends the same ids. PayPal answers a
// request id it has seen with 200 and the latest status of the resource it made then (201
// for a new one): the result's Replayed. It does so whatever the parameters, so the adapter
// checks that a returned order carries this ProviderKey and amount, and a returned refund
// this custom_id and amount (*[payments.KeyMismatchError] otherwise). A request id still
// executing is refused 409 PREVIOUS_REQUEST_IN_PROGRESS: *[payments.InProgressError].
//
// # Retention
//
// PayPal keeps an order create's request id 6 hours (72 on request) and a capture's or a
// refund's 45 days (Config.OrderRetention, Config.CaptureRetention; New refuses values below
// these). [Provider.DedupWindow] is the longest, 45 days: payonce must keep the local key at
// least that long, or a new request under a forgotten local key could be answered with an old
// refund. After 6 hours a create replay makes a new order: only the recorded order id finds
// the old one, which is why Progress exists. A capture after 45 days is still unique (one
// capture per order); a refund retried after 45 days would be a second refund, which payonce's
// local retention prevents.
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
//	PayPal answer                                          payments error          final?
//	capture DECLINED / FAILED, 422 INSTRUMENT_DECLINED     *DeclineError           yes
//	409 PREVIOUS_REQUEST_IN_PROGRESS                       *InProgressError        retry later, same ids
//	400, 404, 422 (validation, REFUND_AMOUNT_EXCEEDED)     *InvalidRequestError    yes
//	401 after one token refresh, token refused             *InvalidRequestError    yes (credentials)
//	429, 5xx                                               *UnknownOutcomeError    retry, same ids
//	no token (token endpoint unreachable or 5xx)           *NotSentError           retry
//	transport error before the request was written         *NotSentError           retry
//	timeout, reset, EOF after it was written               *UnknownOutcomeError    retry, same ids
//	Progress failed                                        *UnknownOutcomeError    retry resumes
//	order of another ProviderKey or amount                 *KeyMismatchError       a bug: report
//
// Requests refused before sending (missing Key, ProviderKey over 127 bytes, non-positive
// amount, ...) are *[payments.InvalidRequestError] naming the field in Param.
//
// # Lookup
//
// [Provider.Lookup] reads the order when its id is known. Without it, it replays the create's
// request id with a probe order (no payment source, so it can never be paid): an existing order
// comes back 200; a 201 means PayPal never saw the request id, and no charge exists. That is a
// proof only inside the create's 6-hour window; beyond it Lookup answers a *[WindowError]
// (outcome unknown) instead of guessing. PayPal's transaction search lags up to 3 hours and
// cannot filter by custom_id, so it is not used. With LookupRequest.WithRefunds the charge also
// reports the sum of the order's COMPLETED refunds as Refunded, with RefundsKnown (after a
// create replay, at the cost of one more GET of the order).
//
// [Provider.LookupRefund] ([payments.RefundLooker]) finds a refund attempt whose outcome was
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
// incomplete, so with PayPal set reconcile.Config.DriftLag to at least 3h (its default, 1h,
// reports drift for the last hours' payments that is only lag).
//
// # Webhooks
//
// [Provider.VerifyWebhook] asks PayPal to verify a delivery (verify-webhook-signature) and maps
// PAYMENT.CAPTURE.* events to payments' event kinds; see its documentation.
package paypal
