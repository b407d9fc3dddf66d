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
// Under /v71 ([Server.URL] includes it):
//
//   - POST /payments {merchantAccount, amount{currency, value}, reference (<= 80),
//     paymentMethod{type "scheme", storedPaymentMethodId}, returnUrl, metadata (<= 20 entries,
//     keys <= 20, values <= 80)}. Test cards (storedPaymentMethodId): [PaymentMethodVisa]
//     Authorised; [PaymentMethodDeclined] Refused with refusalReason "Refused" (code 2);
//     [PaymentMethodInsufficientFunds] Refused, "Not enough balance" (code 12);
//     [PaymentMethodAuthenticationRequired] RedirectShopper with a redirect action (finish it
//     with [Server.CompleteRedirect]). Anything else: 422 invalid_payment_method. Payments are
//     captured automatically: Authorised counts as money moved.
//   - POST /payments/{pspReference}/refunds and /captures {merchantAccount, amount,
//     reference}: 201 {pspReference, paymentPspReference, status "received"}. The outcome is
//     decided at once and told only by the REFUND or CAPTURE notification: success "false"
//     when the amount exceeds what is left to refund (or capture), the currency differs, or
//     the payment is not authorised or was cancelled. An unknown pspReference: 422
//     unknown_psp_reference.
//   - POST /cancels {merchantAccount, paymentReference, reference}: 201 {status "received"}
//     and one TECHNICAL_CANCEL per payment carrying that reference: success "true" when it
//     was Authorised without refunds, awaiting authentication, or already cancelled (it is
//     void and leaves [Server.Totals]); "false" when it was refused or refunded. When no
//     payment has the reference, one TECHNICAL_CANCEL with success "false" ("No payment with
//     this reference"): the fake does not claim to void what it does not hold, and a later
//     payment with that reference is not blocked (Adyen does not deduplicate references). So a
//     successful technical cancel proves the payment void; a failed one proves nothing about a
//     request still in flight.
//
// Validation errors are 422 with errorType "validation" and the fake's own errorCodes
// (required_field, invalid_field, invalid_payment_method, ...), not Adyen's numeric catalogue;
// "000", "901" (merchant account), "704" and "905" (internal) are Adyen's.
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
// net/http's Transport resends, on a reused keep-alive connection, a request carrying an
// Idempotency-Key when the connection fails before the response; disable keep-alives in the
// test's client to observe a [ResetAfter].
//
// # Webhooks
//
// Every payment outcome emits AUTHORISATION (success "true" or "false" with the refusal
// reason; additionalData carries "metadata.<key>" entries), and refunds, captures and cancels
// emit REFUND, CAPTURE and TECHNICAL_CANCEL. Each item is signed as Adyen signs it:
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
//	GET /_fake/counts?reference=R         -> {"payments":n,"refunds":n,"captures":n,"cancels":n}
//	GET /_fake/counts?idempotency_key=K   -> the same
//	GET /_fake/totals                     -> {"EUR":{"authorised":n,"refunded":n,"net":n}}
package adyentest
