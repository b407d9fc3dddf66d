// Package idempotency makes critical actions safe to retry: repeated
// requests with the same key produce exactly one execution of the action
// and every retry gets the original outcome back.
//
// # Keys and fingerprints
//
// A key names one intended action: "{scope}_{action}_{intent}" (see
// [ComposeKey]), where scope is the authenticated user or tenant, action the
// operation and intent the client's key or, for server-generated intents,
// [DeriveIntent] of their identifying fields. A [Fingerprint] covers the
// request's significant fields only (see [NewFingerprint]): a retry with the
// same key and fingerprint replays; the same key with another fingerprint
// is refused with [ErrFingerprintMismatch] and changes nothing.
//
// # The executor
//
// [Executor.Do] claims the key in a [Store], runs the action while keeping
// its lease alive by heartbeats, and stores the outcome under the lease's
// fencing token:
//
//	exec, err := idempotency.New(store, nil) // pgstore.New(pool, nil) in production
//	...
//	key, err := idempotency.ComposeKey(userID, "createOrder", r.Header.Get("Idempotency-Key"))
//	fp, err := idempotency.NewFingerprint().String("sku", sku).Int("qty", qty).
//		Decimal("amount", amount).String("currency", currency).Sum()
//	res, err := exec.Do(ctx, idempotency.Request{Scope: userID, Key: key, Fingerprint: fp},
//		func(ctx context.Context) (idempotency.Response, error) {
//			id, err := createOrder(ctx, sku, qty)
//			if errors.Is(err, errOutOfStock) { // permanent: stored and replayed
//				return idempotency.Response{}, idempotency.Permanent(err, idempotency.Response{Code: 409})
//			}
//			if err != nil { // transient: the lease is released, a retry runs again
//				return idempotency.Response{}, err
//			}
//			return idempotency.Response{Code: 201, Body: []byte(`{"order_id":"` + id + `"}`)}, nil
//		})
//	switch {
//	case errors.Is(err, idempotency.ErrInProgress): // 409 + Retry-After
//	case errors.Is(err, idempotency.ErrFingerprintMismatch): // 409 (or 422)
//	case res.Replayed: // the stored outcome, byte for byte
//	}
//
// Work whose result is a Go value rather than an HTTP answer (a queue
// consumer, a job) takes the generic [Do]: the value is stored with a
// [Codec] ([JSON] by default) and every retry gets it back decoded,
// without running the function again:
//
//	label, err := idempotency.Do(ctx, exec, "shipping", "label_"+msg.ID, msg,
//		func(ctx context.Context) (Label, error) { return carrier.BuyLabel(ctx, msg.ID) },
//		idempotency.SignificantFields(idempotency.NewFingerprint().String("order", msg.ID)))
//
// # States and guarantees
//
// A claim creates the record PROCESSING with a lease (LockTimeout). The
// holder completes it (COMPLETED, or FAILED for a [Permanent] error), or
// releases it on a transient error so that a retry re-runs the action. A
// holder that crashed leaves an orphan: once its lease ends, one contender
// takes it over by compare-and-swap on the lock version (the fencing token),
// and the crashed holder, should it come back, can no longer change
// anything ([ErrLeaseLost]). Outcomes are kept for Retention and never
// replayed after it: a request after expiry is new, or refused with
// [ErrExpired] under [ExpiredRefused] (see Expiry).
//
// What "exactly once" covers: the record is exact, and an action whose
// effects commit with the record ([TxExecutor.DoTx], or
// [TxStore.CompleteTx]) runs its effects exactly once. An action with effects
// outside the database runs at most once at a time, as long as it checks
// its lease before each external call ([CheckLease]; see Leases and
// heartbeats). It runs again only if its holder died or stopped before
// recording the outcome; make such effects idempotent
// downstream with a key derived from the same key (as payonce's payments do
// with the providers' idempotency keys).
//
// # Expiry
//
// A record expires Retention (default 24h) after its outcome was stored;
// a [Pruner] then takes it out of the store. What a request with its key
// does afterwards is [Config].Expired:
//
//   - [ExpiredIsNew], the default: the request is new and runs. Retention
//     covers the retries of the key's clients and the deduplication
//     windows downstream; past it, a request with the key is a new intent
//     far more often than a stale one, and the store keeps no more than
//     Retention's worth of keys.
//   - [ExpiredRefused]: the request is refused with [ErrExpired], before
//     and after the prune. The pruner reduces the expired record to a
//     tombstone: scope, key, fingerprint, status, lock version and times,
//     without the response (its status code, headers and body are
//     deleted). The tombstone refuses the key for [Config].RefusalHorizon
//     past the expiry ([DefaultRefusalHorizon], 30 days, by default); a
//     later prune deletes it, and a request with the key is new again.
//
// The policy is recorded with each record when it is claimed: records
// written under ExpiredIsNew are deleted at expiry even if the
// configuration later says ExpiredRefused, and a tombstone claimed under
// ExpiredIsNew is renewed like any expired record, its lock version
// growing, so a fencing token never repeats.
//
// # Leases and heartbeats
//
// A claim takes a lease of [Config].LockTimeout (default 30s) on the
// store's clock. While the action runs, heartbeats extend it every
// HeartbeatInterval (default LockTimeout/3), counted from when the last
// confirmed one was sent, so that one failed heartbeat does not stop a
// healthy action; a failed one is retried sooner.
//
// A holder that cannot renew its lease stops. It keeps its own deadline
// on the monotonic clock: when the last claim or heartbeat was sent (not
// when its answer came), plus LockTimeout, minus LeaseMargin (default
// LockTimeout/10, so 27s after the last confirmed renewal by default). The
// store starts counting the lease only when it receives the request, so
// the holder stops before the store can let another instance reclaim the
// key. The margin covers a store clock that runs ahead of ours and the
// time the action needs to notice. At the deadline, the action's context
// is cancelled. Its cause, a [*LeaseExpiredError], matches [ErrLeaseLost].
// [CheckLease] then refuses every new external call. An action with
// effects outside the database calls it before each one, as payonce's
// payments client does before every provider call:
//
//	if err := idempotency.CheckLease(ctx); err != nil {
//		return idempotency.Response{}, err
//	}
//	res, err := mailer.Send(ctx, msg) // never sent beside another holder's run
//
// This is the trade-off of LockTimeout. A shorter lease stops a holder
// that is cut off from its store sooner. It also lets a retry take over
// a crashed holder's key sooner. The cost is more heartbeats, and a
// database stall of LockTimeout minus LeaseMargin stops actions that
// were healthy. A longer lease keeps a cut-off holder running, unseen,
// for longer. A crashed holder's key need not wait for its lease: with
// pgstore's Config.Instance, a holder restarted under the same name ends
// its dead incarnation's leases at once (see pgstore's "Recovery after a
// crash").
//
// Heartbeats go on after the action returns, until its outcome is
// recorded. Recording is tried up to three times (50 ms, then 100 ms
// apart), all within FinishTimeout (default 10s), and a store may stall
// longer than what is left of the lease. No fixed
// relation between FinishTimeout and LockTimeout could cover that: what is
// left of the lease when the action returns depends on its last confirmed
// heartbeat. So FinishTimeout may be longer than LockTimeout. Before a
// lease is given back (a transient error, a panic, [Abandon]), heartbeats
// stop: one landing after the release would hold the key for another
// LockTimeout. An outcome returned after the holder stopped is still
// recorded under the fencing token. If nobody took the key over, it is
// the true outcome and spares a retry a second run. If somebody did, the
// store refuses it ([ErrLeaseLost]).
//
// # Replays from memory
//
// An executor with a [ReplayCache] ([Config].ReplayCache) answers replays
// of records its store already replayed from a bounded in-process cache,
// without a round trip; another fingerprint is refused as the store
// refuses it. A finished record does not change on the claim path until
// it expires, but an operator may delete it (the runbook's "run it
// again"), an erasure may delete or blank it, and pgstore's SupersedeTx
// rewrites it. So a store that reports such changes ([ChangeWatcher]:
// pgstore, from triggers that see manual SQL too: its replaycache
// migration line) has every executor
// drop the record's entry as the change commits; entries are served only
// while the store has confirmed its reports within 2×SyncInterval (2s by
// default: the bound on a stale replay if its connection dies silently),
// and a lost connection empties the cache. Whatever the store, no entry is
// served past MaxAge (5s by default) after its read, nor past the record's
// expiry on the store's clock minus a margin. Records in progress, missing
// or expired always go to the store, as does every request of a store
// that seals responses and every request with [Request].NoCache.
// [Executor.Close] stops the cache's listener.
//
// # HTTP
//
// [Middleware] protects net/http routes: the key comes from the
// Idempotency-Key header (a bare token or a Structured Field string), the
// scope from the caller's authentication, the fingerprint from the method,
// the route and the significant JSON fields. The answers:
//
//	first request                      the handler's own
//	replay                             the stored status, allowlisted headers and body,
//	                                   byte for byte, with Idempotent-Replayed: true
//	same key, still processing         409 with Retry-After (or wait and replay: WaitInFlight)
//	same key, other significant fields 409 (or 422: MismatchStatus)
//	key missing where required         400
//	malformed key                      400
//	key that cannot carry 128 bits     400: send a UUIDv4 or a ULID (AllowLowEntropyKeys opts out)
//	the same key in another scope      that scope's own record: scopes never share keys
//	                                   (404 under AllowLowEntropyKeys)
//	too many new keys from one scope   429 with Retry-After (Limiter; pgstore.Limiter is shared)
//	body over MaxRequestBody           413
//	no usable scope (not authenticated) 401
//	an expired key under ExpiredRefused 422: use a new key
//	the store unavailable              503 with Retry-After; so is an outcome that could
//	                                   not be recorded
//
// Errors are application/problem+json (RFC 9457) and never echo a key, a
// fingerprint or a stored body. Answers below 500 are stored (4xx as
// FAILED, the rest as COMPLETED); a 5xx or a panic releases the key so that
// a retry runs again. Mode LogOnly records keys and logs what would have
// been blocked (a replay, a request in progress, a key reused with other
// fields) while letting those requests through, for a safe rollout; what
// is refused for its input (a missing or malformed key, a body too large,
// an expired key, another scope's key) is refused in both modes. Stored answers can be
// sealed at rest with [Encrypted], or reduced to a status and a body hash
// per route (Route.StoreHashOnly).
//
// Client keys must carry 128 bits of entropy by default ([CheckEntropy]: a
// UUIDv4, a ULID, or a string long enough): a key like "order-1" is
// answered 400 before anything is stored. Keys that cannot be guessed make
// scopes independent: the middleware stores the key as
// "{action}_{client key}" with the scope in the record's other primary key
// column (user_id), so the same key under two scopes is two records, and
// nothing one tenant sends can block or reveal another's request.
// MiddlewareConfig.AllowLowEntropyKeys accepts any key and keeps the
// earlier answer to a key another scope holds, 404, decided in the claim's
// own statement through the primary key's leading column
// (ClaimParams.RefuseForeign); its cost is that a guessable key used first
// by one tenant blocks it for every other tenant until it expires.
// Server-derived keys (webhooks, queue messages, cron slots: [DeriveIntent],
// package inbox, package cronslot) do not go through the middleware and
// are not subject to the entropy rule: no client chooses them.
//
// # Metrics
//
// With Config.MeterProvider set, the executor records the instruments
// named by the Metric constants (idempotency.duplicates_blocked,
// idempotency.lock_timeouts, idempotency.fingerprint_mismatches,
// idempotency.store_size, idempotency.processing_duration_ms,
// idempotency.keys_created_per_user with scopes hashed into 64 buckets,
// idempotency.orphan_reclaims); deploy/monitoring holds alert rules for
// them.
//
// # Pruning
//
// Expired, finished records are deleted by a [Pruner] on a cron schedule
// (robfig/cron/v3, "@every 1m" by default), in bounded batches with a pause
// between them; several instances may prune at once (pgstore skips rows
// another pruner holds). PROCESSING records are never pruned. It records
// idempotency.pruned_records and idempotency.prune_duration_ms.
//
// # Logs
//
// No log line carries a full key, fingerprint or body: keys appear as
// [ShortHash] prefixes, enough to correlate lines.
//
// # Stores
//
// Package pgstore is the production store on PostgreSQL; package memstore
// keeps records in memory for one process and tests. Both pass the
// conformance suite in package idempotencytest.
package idempotency
