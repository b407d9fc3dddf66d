// Package fakekit is the machinery payonce's stateful provider fakes (stripetest, adyentest,
// paypaltest) share, so that each fake holds only its provider's protocol: endpoints, objects,
// error shapes and signatures.
//
//   - [ManualClock]: a clock that moves only when told to.
//   - [FaultKind], [Spec], [FaultType] and [Faults]: fault kinds, their validation, a queue of
//     one-shot faults and seeded probabilistic rules, over each fake's own Fault type (which
//     matches requests on its own fields).
//   - [Lifecycle]: NewServer/Start/URL/Close of an httptest-like server, the closing signal that
//     releases hung requests, the part of a fault that happens before execution
//     ([Lifecycle.Before], [Lifecycle.Apply]), the count of requests a fault holds
//     ([Lifecycle.WaitHeld], [Lifecycle.EndLatency]) and [ResetConnection].
//   - [Keys]: idempotency-key (or request id) entries scoped, retained, claimed, released and
//     completed.
//   - [Deliveries]: an event log and its ordered webhook delivery from one goroutine, with
//     duplicates, retries with backoff, waiting for the queue to drain, and Close.
//   - [ServeAdmin]: the unauthenticated /_fake/ JSON endpoints.
//
// Locks: every type here has its own lock and calls out of it only where its documentation
// says so (the callbacks of [Deliveries]); a fake may call into fakekit with its own lock held.
package fakekit
