// Package stripetest is a stateful fake of the Stripe API endpoints payonce's Stripe adapter
// uses, with Stripe's real idempotency semantics and deterministic fault injection. Use it in
// tests (it is an [http.Handler]; [NewServer] starts it on a loopback port like
// [net/http/httptest.NewServer]) or standalone behind your own [http.Server]:
//
//	srv := stripetest.NewUnstartedServer(nil)
//	log.Fatal(http.ListenAndServe("127.0.0.1:12111", srv))
//
// stripe-mock checks request shapes against Stripe's OpenAPI spec but keeps no state; this fake
// keeps state, so it can answer the questions exactly-once tests ask.
//
// # Connecting stripe-go
//
// Point a stripe-go v79 backend at [Server.URL], without package globals, decide the SDK's own
// retries deliberately, and give the backend to the resource clients you need:
//
//	b := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
//		URL:               stripe.String(srv.URL()),
//		MaxNetworkRetries: stripe.Int64(0),
//	})
//	paymentIntents := paymentintent.Client{B: b, Key: "sk_test_x"}
//	refunds := refund.Client{B: b, Key: "sk_test_x"}
//
// Requests need "Authorization: Bearer sk_test_..."; anything else gets 401.
//
// # Endpoints
//
//   - POST /v1/payment_intents (amount, currency, payment_method, customer, confirm,
//     description, metadata[...]); without amount or currency, Stripe's 400 parameter_missing.
//     A card saved with [Server.AttachPaymentMethod] is attached to a Customer and needs that
//     customer, as at Stripe. Test payment methods: [PaymentMethodVisa] succeeds;
//     [PaymentMethodDeclined] and [PaymentMethodInsufficientFunds] answer 402 card_error
//     card_declined with decline_code generic_decline or insufficient_funds (the PaymentIntent
//     exists, in requires_payment_method); [PaymentMethodAuthenticationRequired] gives
//     requires_action.
//   - GET /v1/payment_intents/{id}; GET /v1/payment_intents (newest first; created,
//     created[gt|gte|lt|lte], limit, starting_after).
//   - GET /v1/payment_intents/search (query, limit, page): Stripe's search_result envelope
//     (object, data newest first, has_more, next_page, url). The query language is a subset of
//     Stripe's: metadata['k']:'v' (values matched exactly but case-insensitively, as at
//     Stripe), status:'...', currency:'...', amount and created with :, >, >=, <, <=; a
//     leading '-' negates a clause; clauses are joined by AND, by OR (not both) or by a space
//     (AND); a backslash escapes a quote or a backslash in a quoted value. Anything else is
//     refused with Stripe's 400 invalid_request_error, param "query", and a message naming
//     what is wrong. The index lags: a PaymentIntent is found only once it was created at
//     least Config.SearchLag ago on Config.Clock (default 0), so that the eventual
//     consistency of Stripe's Search (usually under a minute, up to an hour in outages) can
//     be tested.
//   - POST /v1/refunds (payment_intent or charge, amount, metadata[...]), bounded by the amount
//     received: amount_too_large, charge_already_refunded. Refunds succeed at once;
//     [Server.FailRefund] makes one fail later, as a refund to a closed card does.
//   - A declined PaymentIntent can still succeed: [Server.ConfirmPaymentIntent] confirms it
//     again with another payment method, as the customer's browser does with its client
//     secret.
//     GET /v1/refunds/{id}; GET /v1/refunds (newest first; payment_intent, charge, limit 1..100
//     (default 10; anything else is Stripe's 400 parameter_invalid_integer), starting_after),
//     in Stripe's list envelope (object "list", data, has_more, url), each refund with its
//     status and balance_transaction (and failure_balance_transaction once failed).
//   - GET /v1/balance_transactions (newest first; created, created[gt|gte|lt|lte], type,
//     limit 1..100, starting_after; an unknown type or a bad limit is a 400 naming it) and
//     GET /v1/balance_transactions/{id}. The fake keeps the balance as Stripe does, stamped
//     on Config.Clock: a PaymentIntent that succeeds adds a "charge" transaction (amount +,
//     source its latest_charge), a refund a "refund" one (amount -, source the refund), and
//     [Server.FailRefund] a "refund_failure" one (amount +, source the refund), each with its
//     reporting_category equal to its type, fee 0 and net equal to amount. Declined and
//     requires_action PaymentIntents move no money. A charge's funds are pending for
//     [ChargeAvailableAfter], then available; refunds and failures are available at once.
//
// # Idempotency
//
// As Stripe documents it (https://docs.stripe.com/api/idempotent_requests): keys are scoped per
// API key and kept for Config.Retention (24h by default) measured on Config.Clock; Stripe may
// prune a key once it is at least 24 hours old and "generate[s] a new request if a key is reused
// after the original is pruned", so a reuse after the retention executes anew and creates a new
// object. The response of a request that started executing is cached, including declines,
// refund-bound errors and 500s produced after execution ([FailAfter]); a replay with the same
// parameters returns it with "Idempotent-Replayed: true" and "Original-Request". The same key
// with other parameters or another endpoint gets 400 idempotency_error. While the first request
// still executes, another with the same key gets 409 with code idempotency_key_in_use and type
// invalid_request_error (https://docs.stripe.com/api/errors documents the 409 for "using the
// same idempotent key", https://docs.stripe.com/error-codes the code; the type is the one
// observed). Parameter validation failures (missing or malformed parameters, amounts Stripe
// cannot take, unknown ids) and 409 collisions are not cached: a later request with the key
// executes, or replays the first. Writes without a key just execute.
//
// # Amounts
//
// Integer amounts follow Stripe's exponents, which are not ISO 4217's
// (https://docs.stripe.com/currencies), from the fake's own table: two decimals unless
// specified otherwise; zero-decimal currencies (BIF, CLP, DJF, GNF, JPY, KMF, KRW, MGA, PYG,
// RWF, VND, VUV, XAF, XOF, XPF); three-decimal ones (BHD, JOD, KWD, OMR, TND), whose amounts
// on PaymentIntents and refunds must end in 0, else 400 invalid_request_error
// invalid_charge_amount, param "amount"; ISK and UGX, whole units written with two decimals,
// whose amounts must be multiples of 100, else 400 invalid_request_error
// invalid_charge_amount_no_decimal_compatible with Stripe's message. Such refusals are
// validation failures: nothing is created or cached. [FormatAmount] formats an integer amount
// in major units by the same table.
//
// # Faults
//
// [Server.Inject] queues a one-shot [Fault] for the next matching request; Config.Faults apply
// by probability, drawn from Config.Seed, so the same seed and request sequence give the same
// faults. Kinds: [Latency], [FailBefore], [FailAfter], [ResetAfter], [Hang].
//
// [Server.WaitHeld] waits until requests are held by a Latency or Hang fault (one about to
// execute keeps its key in use meanwhile), and [Server.EndLatency] lets the Latency ones go on
// at once: a test acts on that event ("a
// duplicate arrives while the first still executes", "the client gives up on a request the
// provider received") rather than after a sleep that a loaded machine outlasts.
//
// Send through [Server.Client] to see every fault: net/http's Transport resends, on a reused
// keep-alive connection, a request that carries an Idempotency-Key header when the connection
// fails before the response, and stripe-go makes its bodies rewindable. With keep-alives on, a
// [ResetAfter] may therefore be retried by net/http itself and surface as a successful replay.
// Server.Client turns keep-alives off; a client of your own must too
// (http.Transport.DisableKeepAlives) to observe the lost response.
//
// # Webhooks
//
// With Config.WebhookURL set, the fake POSTs Stripe events there: payment_intent.succeeded when
// a PaymentIntent succeeds, payment_intent.payment_failed when one is declined (both also for
// [Server.ConfirmPaymentIntent]), charge.refunded when a refund is created (data.object is the
// charge with amount_refunded and refunded; data.previous_attributes the old values), and
// charge.refund.updated when [Server.FailRefund] fails a refund (data.object the refund,
// status failed; data.previous_attributes status succeeded: at [APIVersion] Stripe announces a
// charge's refund failing that way, refund.failed only since 2024-10-28.acacia). Events carry
// Stripe's envelope (id "evt_...", object "event", type, created, api_version [APIVersion],
// data.object, request) and
// are signed as Stripe signs them: "Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256>" over
// "<t>.<payload>" with Config.WebhookSecret ([DefaultWebhookSecret]), t from Config.Clock, so
// verify deliveries from a fake on a [ManualClock] with IgnoreTolerance. Verify with stripe-go:
//
//	ev, err := webhook.ConstructEventWithOptions(payload, r.Header.Get("Stripe-Signature"),
//		secret, webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
//
// One goroutine owned by the Server delivers events in the order they happened, each
// 1+Config.DuplicateWebhooks times with the same id; a delivery that errs or answers non-2xx is
// retried a few times with a short backoff, then abandoned. [Server.Events] lists what was
// emitted and how its deliveries went; [Server.WaitDeliveries] waits for the queue to drain.
// Close stops delivery and waits for the goroutine; undelivered events are dropped. Replays
// execute nothing and emit nothing. Other event types (payment_intent.created,
// refund.created, ...) are not emitted.
//
// # Ground truth
//
// [Server.CountsByIdempotencyKey], [Server.CountsByMetadata] and [Server.Totals] report what
// really exists at the fake; the same is served over HTTP:
//
//	GET /_fake/counts?idempotency_key=K                -> {"payment_intents":n,"refunds":n}
//	GET /_fake/counts?metadata_key=K&metadata_value=V  -> {"payment_intents":n,"refunds":n}
//	GET /_fake/totals                                  -> {"usd":{"succeeded":n,"refunded":n,"net":n}}
package stripetest
