// Package fakekit is the machinery payonce's stateful provider fakes (stripetest, adyentest,
// paypaltest) share, so that each fake holds only its provider's protocol: endpoints, objects,
// error shapes and signatures.
//
//   - [ManualClock]: a clock that moves only when told to.
//   - [FaultKind], [Spec], [FaultType] and [Faults]: all of the fault machinery. A fake's
//     public Fault type and its kinds' documentation stay the fake's own; its [FaultType] tells
//     fakekit how to read a Fault ([Spec]: kind, delay, probability, method, path, key), how
//     its Path matches ([PathPrefix] or [PathPattern]), and what its provider answers to a
//     failure ([FaultType.Fail]). fakekit validates faults, queues one-shot ones, draws the
//     seeded probabilistic rules, matches them to a [Request] and applies the chosen one
//     before and after execution ([Faults.BeforeExecute], [Faults.Apply], [AnswerExecuted]).
//   - [Lifecycle]: NewServer/Start/URL/Close of an httptest-like server, the closing signal that
//     releases hung requests, the wait a fault imposes before execution ([Lifecycle.Before]),
//     the count of requests a fault holds ([Lifecycle.WaitHeld], [Lifecycle.EndLatency]) and
//     [ResetConnection].
//   - [Keys]: idempotency-key (or request id) entries scoped, retained, claimed, released and
//     completed.
//   - [Deliveries]: an event log and its ordered webhook delivery from one goroutine, with
//     duplicates, retries with backoff, waiting for the queue to drain, and Close.
//   - [ServeAdmin]: the unauthenticated /_fake/ JSON endpoints.
//
// Locks: every type here has its own lock and calls out of it only where its documentation
// says so (the callbacks of [Deliveries]); a fake may call into fakekit with its own lock held.
package fakekit
