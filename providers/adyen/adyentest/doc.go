// Package adyentest is a stateful fake of the Adyen Checkout API v71 endpoints payonce's Adyen
// adapter uses, with Adyen's idempotency semantics, signed webhooks and deterministic fault
// injection. Use it in tests (it is an [http.Handler]; [NewServer] starts it on a loopback
// port like [net/http/httptest.NewServer]) or standalone behind your own [http.Server]:
//
//	srv := adyentest.NewUnstartedServer(nil)
//	log.Fatal(http.ListenAndServe("127.0.0.1:12112", srv)) // base URL http://127.0.0.1:12112/v71
//
// Requests need an X-API-Key header (any non-empty key, or exactly Config.APIKey); anything
// else gets 401 errorCode "000". Errors are Adyen's body {status, errorCode, message,
// errorType}.
//
// # Endpoints
//
// Under /v71 ([Server.URL] includes it). Each behaviour below is Adyen's documented one, with
// the page it comes from; where Adyen documents nothing, the text says what the fake chose.
//
//   - POST /payments {merchantAccount, amount{currency, value}, reference (<= 80),
//     paymentMethod{type "scheme", storedPaymentMethodId}, returnUrl, shopperReference (3 to 256),
//     shopperInteraction "ContAuth", recurringProcessingModel, metadata (<= 20 entries, keys <=
//     20, values <= 80)}: a payment with a token, which Adyen refuses without its shopper, ContAuth
//     (or a security code) and a recurringProcessingModel
//     (https://docs.adyen.com/online-payments/tokenization/make-token-payments). Test cards (storedPaymentMethodId): [PaymentMethodVisa]
//     Authorised; [PaymentMethodDeclined] Refused with refusalReason "Refused" (code 2);
//     [PaymentMethodInsufficientFunds] Refused, "Not enough balance" (code 12);
//     [PaymentMethodAuthenticationRequired] RedirectShopper with a redirect action (finish it
//     with [Server.CompleteRedirect]). Anything else: 422 invalid_payment_method.
//   - Capture (https://docs.adyen.com/online-payments/capture): "By default, payments are
//     captured automatically without a delay, immediately after authorization"; a capture
//     delay, or manual capture, is a merchant account setting. Config.CaptureMode
//     ([CaptureAutomatic] by default, or [CaptureManual]) and Config.CaptureDelay model it:
//     under automatic capture an Authorised payment is captured (the money moved) at
//     authorisation or once the delay passed on Config.Clock, and no CAPTURE notification is
//     emitted (Adyen's CAPTURE webhook is "the result of the request to capture a payment":
//     https://docs.adyen.com/api-explorer/Webhooks/1/post/CAPTURE); under manual capture it
//     stays authorised, nothing moved, until a capture request. AUTHORISATION success "true"
//     reports the authorisation in both modes.
//   - POST /payments/{pspReference}/captures {merchantAccount, amount, reference}: 201 {status
//     "received"}; the CAPTURE notification says whether it succeeded
//     (https://docs.adyen.com/api-explorer/Checkout/71/post/payments/(paymentPspReference)/captures).
//     It succeeds once per payment (the rest of a partial capture is released), on an
//     authorised payment not captured yet nor cancelled; under automatic capture it fails.
//   - POST /payments/{pspReference}/refunds {merchantAccount, amount, reference}: 201 {status
//     "received"}; the REFUND notification decides: success "false" for more than what was
//     captured and not refunded, another currency, or an uncaptured payment
//     ([ReasonRefundNotCaptured], Adyen's own text in its REFUND example,
//     https://github.com/Adyen/adyen-openapi/blob/main/json/Webhooks-v1.json).
//   - POST /payments/{pspReference}/reversals {merchantAccount, reference}: cancel or refund,
//     "Refunds a payment if it has already been captured, and cancels a payment if it has not
//     yet been captured", always the full amount
//     (https://docs.adyen.com/api-explorer/Checkout/71/post/payments/(paymentPspReference)/reversals,
//     https://docs.adyen.com/online-payments/reversal). 201 {status "received"}, then
//     CANCEL_OR_REFUND with success, reason, originalReference (the payment) and
//     additionalData "modification.action" ([ModificationAction]) "cancel" or "refund"
//     (https://docs.adyen.com/api-explorer/Webhooks/1/post/REVERSAL, and the CANCEL_OR_REFUND
//     example of Adyen's webhook spec).
//   - POST /cancels {merchantAccount, paymentReference, reference}: the technical cancel,
//     "Cancels the authorisation on a payment that has not yet been captured ... in a
//     TECHNICAL_CANCEL webhook" (https://docs.adyen.com/api-explorer/Checkout/71/post/cancels);
//     "After a payment has been captured, you can no longer cancel it"
//     (https://docs.adyen.com/online-payments/cancel). 201 {status "received"} and one
//     TECHNICAL_CANCEL per payment carrying that reference: success "true" for an uncaptured
//     authorisation (or a payment awaiting authentication, or one already cancelled); success
//     "false" with reason [ReasonCancelCaptured] for a captured payment, whose money stays
//     captured, and "false" for a refused one. When no payment has the reference (Adyen
//     documents nothing for that case), one TECHNICAL_CANCEL success "false" with
//     [ReasonNoPayment] and no originalReference; a later payment with that reference is not
//     blocked (Adyen does not deduplicate references). So a failed technical cancel is never
//     proof that no payment exists.
//   - Amounts are in Adyen's minor units, whose decimals are Adyen's own
//     (https://docs.adyen.com/development-resources/currency-codes): 2 for CLP and ISK, 0 for
//     CVE and IDR, unlike ISO 4217. The fake reads them with its own table ([Decimals],
//     [FormatValue]); [Server.Totals] reports NetAmount under it.
//
// Every endpoint refuses a request without a field Adyen's API reference requires of it (see
// [ErrorCodeRequired]): 422 with errorType "validation" and the body {status, errorCode,
// message, errorType}, as Adyen documents (https://docs.adyen.com/development-resources/error-codes).
// Adyen's codes where its pages name them: "100" (no amount), "14_030" (no returnUrl), "000"
// ("Recurring payments require a shopperReference", "CVC is required for OneClick card
// payments"), "901" (merchant account), "704" (in progress), "905" (internal). Elsewhere the
// codes are the fake's own (required_field, invalid_field, invalid_payment_method, ...), since
// payonce's adapter does not act on Adyen's numeric validation catalogue.
//
// # Idempotency
//
// As PROVIDERS.md describes Adyen: Idempotency-Key (at most 64 characters) is scoped to the
// API key and kept for Config.Retention (7 days by default) on Config.Clock; a reuse after
// that starts a new request. A replay answers the first response byte for byte, with the key
// echoed in an Idempotency-Key header and no replay marker (Adyen has none). Every response is
// final for its key, validation errors and non-transient 5xx included, except those with
// "Transient-Error: true", which keep nothing. The same key with another body or endpoint gets
// 422 [ErrorCodeKeyMismatch] (Adyen's answer is undocumented); while the first request still
// executes, 422 errorCode "704". The reference is not deduplicated: two keys, one reference,
// two payments.
//
// # Faults
//
// [Server.Inject] queues a one-shot [Fault] for the next matching request; Config.Faults apply
// by probability, drawn from Config.Seed, so the same seed and request sequence give the same
// faults. Kinds: [Latency], [FailBefore] (500 with Transient-Error, nothing done), [FailAfter]
// (done, then a cached 500), [ResetAfter] (done, response lost), [Hang].
//
// [Server.WaitHeld] waits until requests are held by a Latency or Hang fault (one about to
// execute keeps its key in use meanwhile), and [Server.EndLatency] lets the Latency ones go on
// at once: a test acts on that event ("a
// duplicate arrives while the first still executes", "the client gives up on a request the
// provider received") rather than after a sleep that a loaded machine outlasts.
//
// net/http's Transport resends, on a reused keep-alive connection, a request carrying an
// Idempotency-Key when the connection fails before the response; disable keep-alives in the
// test's client to observe a [ResetAfter].
//
// # Webhooks
//
// Every payment outcome emits AUTHORISATION (success "true" or "false" with the refusal
// reason; additionalData carries "metadata.<key>" entries); captures, refunds, reversals and
// technical cancels emit CAPTURE, REFUND, CANCEL_OR_REFUND and TECHNICAL_CANCEL. Each item is
// signed as Adyen signs it:
// additionalData.hmacSignature = base64(HMAC-SHA256(hex-decoded Config.HMACKey,
// [NotificationItem.SigningString])); see [Sign]. With Config.WebhookURL set, one goroutine
// owned by the Server POSTs {live "false", notificationItems} there in emission order, up to 5
// items per delivery, each delivery 1+Config.DuplicateWebhooks times; a delivery that errs or
// answers non-2xx is retried a few times with a short backoff, then abandoned.
// [Server.Events] lists the items and how their deliveries went; [Server.WaitDeliveries] waits
// for the queue to drain. Close stops delivery; undelivered items are dropped. Replays emit
// nothing.
//
// # Ground truth
//
// [Server.Counts] (by reference), [Server.CountsByIdempotencyKey] and [Server.Totals] report
// what really exists at the fake; the same is served over HTTP at the root, unauthenticated:
//
//	GET /_fake/counts?reference=R         -> {"payments":n,"refunds":n,"captures":n,"cancels":n,"reversals":n}
//	GET /_fake/counts?idempotency_key=K   -> the same
//	GET /_fake/totals                     -> {"EUR":{"authorised":n,"captured":n,"refunded":n,"net":n,"net_amount":"d.dd"}}
package adyentest
