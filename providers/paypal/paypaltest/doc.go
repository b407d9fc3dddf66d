// Package paypaltest is a stateful fake of the PayPal REST endpoints payonce's PayPal adapter
// uses (OAuth2, Orders v2, Payments v2, Transaction Search, webhook verification), with PayPal's
// documented behaviour (each cited where it is implemented), its PayPal-Request-Id semantics
// and deterministic fault injection. Use it in tests (it is an [http.Handler];
// [NewServer] starts it on a loopback port like [net/http/httptest.NewServer]) or standalone:
//
//	srv := paypaltest.NewUnstartedServer(nil)
//	log.Fatal(http.ListenAndServe("127.0.0.1:12112", srv))
//
// # Authentication
//
// POST /v1/oauth2/token takes Basic auth with Config.ClientID and Config.Secret
// ([DefaultClientID], [DefaultSecret]) and grant_type=client_credentials, and answers
// {access_token, token_type "Bearer", expires_in} (Config.TokenLifetime, 9 h by default, on
// Config.Clock). Every other endpoint needs "Authorization: Bearer <token>" with a token that
// is issued, unexpired and not revoked ([Server.RevokeTokens]); otherwise 401
// AUTHENTICATION_FAILURE. [Server.TokenRequests] counts the tokens issued.
//
// # Endpoints
//
//   - POST /v2/checkout/orders {intent "CAPTURE", one purchase unit {reference_id, custom_id
//     (<= 127), invoice_id, description, amount {currency_code, value}}, payment_source.card.
//     vault_id}. The amount is checked against PayPal's own currency table (see Currencies).
//     With a payment source the create is single-step, as PayPal documents: it needs a
//     PayPal-Request-Id (400 PAYPAL_REQUEST_ID_REQUIRED), and PayPal authorizes and captures in
//     the create itself, answering the order COMPLETED with purchase_units[].payments.captures[]
//     (https://developer.paypal.com/api/orders-v2/save-with-purchase/cards/). The vault id is a
//     test payment method: [PaymentMethodVisa] gives a COMPLETED capture,
//     [PaymentMethodDeclined] and [PaymentMethodInsufficientFunds] a DECLINED one (the order is
//     COMPLETED either way: "A completed order can indicate ... a payment was declined",
//     https://developer.paypal.com/api/orders/v2/definitions/order_status/),
//     [PaymentMethodAuthenticationRequired] PAYER_ACTION_REQUIRED and no capture (see
//     [Server.CompletePayerAction]); any other is 422 PAYMENT_SOURCE_CANNOT_BE_USED. Without a
//     payment source the order is CREATED and waits for the payer ([Server.ApproveOrder]).
//   - GET /v2/checkout/orders/{id}: purchase_units[].payments.captures and .refunds.
//   - POST /v2/checkout/orders/{id}/capture, for an APPROVED order (approved by the payer, or
//     whose payer completed 3-D Secure): one capture, COMPLETED, or DECLINED with
//     processor_response.response_code [ResponseCodeGenericDecline] ("0005") or
//     [ResponseCodeInsufficientFunds] ("0051"). The order becomes COMPLETED either way. An order
//     already captured, by an earlier capture or by its single-step create, is 422
//     ORDER_ALREADY_CAPTURED; an order not APPROVED is 422 ORDER_NOT_APPROVED.
//   - GET /v2/payments/captures/{id}; POST /v2/payments/captures/{id}/refund {amount?,
//     custom_id, invoice_id, note_to_payer}, bounded by what is left of the capture (422
//     REFUND_AMOUNT_EXCEEDED, CAPTURE_FULLY_REFUNDED, REFUND_CAPTURE_CURRENCY_MISMATCH);
//     GET /v2/payments/refunds/{id}. Refunds complete at once; [Server.FailRefund] makes one
//     fail later (status FAILED, its amount refundable again), which GET order and GET refund
//     show.
//   - POST /v1/notifications/verify-webhook-signature (see Webhooks).
//   - GET /v1/reporting/transactions?start_date=...&end_date=...&page=...&page_size=...
//     (Transaction Search). Every completed capture is recorded as a transaction with event
//     code [EventCodeCheckoutPayment] (T0006), its amount and its order's custom_id and
//     invoice_id (custom_field, invoice_id; captures made by a single-step create included),
//     every completed refund as [EventCodePaymentRefund] (T1107) with its amount negated, both
//     status S, initiated at Config.Clock's time, with the capture's or refund's id as transaction_id (a refund's
//     paypal_reference_id is its capture). [Server.FailRefund] turns the refund's transaction to
//     status V. start_date and end_date are required, RFC 3339 with seconds, at most
//     [MaxSearchRange] (31 days) apart; the range is inclusive at both ends, to the second
//     (PayPal does not document whether end_date is; clients should not count on either).
//     page (from 1) and page_size (1..[MaxSearchPageSize], default 100) page the oldest-first
//     list; fields is ignored (transaction_info is always returned). A missing, malformed or
//     out-of-range parameter is 400 INVALID_REQUEST with details[{field, value, location
//     "query", issue}]. Config.SearchLag models the indexing delay ("It takes a maximum of three
//     hours for executed transactions to appear in the list transactions call",
//     https://developer.paypal.com/docs/api/transaction-search/v1/):
//     transactions initiated after now - SearchLag are not returned yet, and that time is the
//     answer's last_refreshed_datetime. Dates in the answer use PayPal's form
//     "2025-03-01T12:00:00+0000".
//
// Errors are PayPal's shape: {name, message, debug_id, details[{field, value, location, issue,
// description}]}.
//
// # Currencies
//
// The fake checks amounts with PayPal's own currency table, written from PayPal's pages and
// independent of the adapter's code and of ISO 4217 (where HUF and TWD have 2 decimal places):
// the 24 currencies of https://developer.paypal.com/api/rest/reference/currency-codes/ and
// https://developer.paypal.com/docs/reports/reference/paypal-supported-currencies/ (RUB, on the
// former only, is refused); HUF, JPY and TWD take no decimals ("This currency does not support
// decimals. If you pass a decimal amount, an error occurs"), the others at most two. A currency
// code that is not three capital letters is 400 INVALID_CURRENCY_CODE; an unsupported currency
// 422 CURRENCY_NOT_SUPPORTED; any fraction in HUF, JPY or TWD ("10.50", and "10.00" too) 422
// DECIMALS_NOT_SUPPORTED; more than two decimals otherwise 422 DECIMAL_PRECISION (issue names
// from https://developer.paypal.com/api/rest/integration/orders-api/troubleshooting/ and the
// Orders v2 and Payments v2 error references). Amounts in answers are written with PayPal's
// decimals ("10" HUF). Refunds follow the same rules.
//
// # Request ids
//
// A create, capture or refund carrying a PayPal-Request-Id (at most 108 characters) is
// remembered per client id for Config.OrderRetention (6 h) for the Orders v2 calls, a create
// AND a capture of an order ("The server stores keys for 6 hours. The API callers can request
// the times to up to 72 hours by speaking to their Account Manager", on both
// https://developer.paypal.com/api/orders/v2/#orders_create and #orders_capture), or
// Config.RefundRetention (45 days) for a refund of a capture ("The server stores keys for 45
// days", https://developer.paypal.com/api/payments/v2/#captures_refund), measured on
// Config.Clock; after that the id starts a NEW request: a create with a payment source then makes
// and captures a second order. A request id seen before is answered 200 with the latest status
// of the resource it created or changed (the order for creates and captures, the refund for
// refunds), where the first answer was 201 ("PayPal returns the latest status of the previous
// request that used that same header", https://developer.paypal.com/api/rest/reference/idempotency/;
// 201 and 200, https://developer.paypal.com/api/rest/responses/). PayPal does not document what a
// known request id with other parameters does beyond "latest status"; the fake returns the
// original resource's latest status as well, whatever the body or endpoint, and counts such
// replays ([Server.MismatchedReplays]): detecting the mismatch is the client's job. While the
// first request still executes, a duplicate gets 409 RESOURCE_CONFLICT /
// PREVIOUS_REQUEST_IN_PROGRESS ("PayPal processes the first request and might fail the second
// request"). Requests that change nothing (validation errors, ORDER_ALREADY_CAPTURED) are not
// remembered. Reads ignore the header.
//
// # Faults
//
// [Server.Inject] queues a one-shot [Fault] for the next matching request; Config.Faults apply
// by probability, drawn from Config.Seed, so the same seed and request sequence give the same
// faults. Kinds: [Latency], [FailBefore], [FailAfter], [ResetAfter], [Hang]. After FailAfter or
// ResetAfter the request id is remembered, so the retry is a 200 replay.
//
// [Server.WaitHeld] waits until requests are held by a Latency or Hang fault (one about to
// execute keeps its key in use meanwhile), and [Server.EndLatency] lets the Latency ones go on
// at once: a test acts on that event ("a
// duplicate arrives while the first still executes", "the client gives up on a request the
// provider received") rather than after a sleep that a loaded machine outlasts.
//
// net/http resends by itself a request on a reused keep-alive connection that failed before any
// response when the request is idempotent for it (GET, or a POST with an Idempotency-Key
// header) or was never written. Disable keep-alives in the test's HTTP client to observe lost
// responses exactly once.
//
// # Webhooks
//
// With Config.WebhookURL set, the fake POSTs PayPal events there: PAYMENT.CAPTURE.COMPLETED or
// PAYMENT.CAPTURE.DECLINED on a capture (resource: the capture, with custom_id and
// supplementary_data.related_ids.order_id), PAYMENT.CAPTURE.REFUNDED on a refund (resource: the
// refund). Each delivery attempt carries PAYPAL-AUTH-ALGO ([AuthAlgo]), PAYPAL-CERT-URL
// ([CertURL]), a new PAYPAL-TRANSMISSION-ID, PAYPAL-TRANSMISSION-TIME and
// PAYPAL-TRANSMISSION-SIG. Real PayPal signs "<transmission id>|<time>|<webhook id>|<crc32 of
// the body>" with a certificate's RSA key; the fake signs the same string with a private HMAC
// key, so only its own verification endpoint can check it: POST
// /v1/notifications/verify-webhook-signature answers SUCCESS only when the transmission is one
// the fake sent, with that signature and time, for that event body (compared after JSON
// compaction) and webhook_id is Config.WebhookID ([DefaultWebhookID]); FAILURE otherwise.
//
// One goroutine owned by the Server delivers events in the order they happened, each
// 1+Config.DuplicateWebhooks times with the same event id; a delivery that errs or answers
// non-2xx is retried a few times with a short backoff, then abandoned. [Server.Events] lists
// what was emitted and how its deliveries went; [Server.WaitDeliveries] waits for the queue to
// drain. Close stops delivery and waits for the goroutine. Replays emit nothing.
//
// # Ground truth
//
// [Server.CountsByCustomID], [Server.CountsByRequestID] and [Server.Totals] report what really
// exists at the fake; the same is served over HTTP without authentication:
//
//	GET  /_fake/counts?custom_id=K    -> {"orders":n,"captures":n,"refunds":n}
//	GET  /_fake/counts?request_id=R   -> {"orders":n,"captures":n,"refunds":n}
//	GET  /_fake/totals                -> {"EUR":{"captured":n,"refunded":n,"net":n}} (minor units)
//	GET  /_fake/tokens                -> {"issued":n}
//	POST /_fake/tokens/revoke         -> 204
package paypaltest
