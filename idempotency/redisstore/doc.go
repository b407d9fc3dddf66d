// Package redisstore is an [idempotency.Store] on Redis (go-redis v9),
// designed from the record's logical model (key, fingerprint, status,
// lease with a fencing token, response, expiry, the refusal tombstone),
// for services that already run Redis or outgrow one PostgreSQL primary.
// It runs on Redis 7.0 or later: a standalone server (or a
// Sentinel-managed primary) through a *redis.Client, or a Redis Cluster
// through a *redis.ClusterClient.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	// or: redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
//	store, err := redisstore.New(rdb, nil)
//	...
//	exec, err := idempotency.New(store, nil)
//	...
//	res, err := exec.Do(ctx, req, action)
//
// # Guarantees
//
// Every state change (claim, reclaim, renewal of an expired record,
// complete, release, heartbeat, abandon, prune) is one Lua script that the
// server runs atomically: its read of the record and its write are one
// step, so of many contenders for a new or orphaned key exactly one gets
// the lease, and a reclaim is a compare-and-swap without a second round
// trip. The lock version is the fencing token: Complete, Release,
// Heartbeat and Abandon act only for the holder of the record's current
// version and return idempotency.ErrLeaseLost otherwise, changing
// nothing. A new record's version starts at a random value below 2^30, as
// pgstore's, so that a key deleted and claimed again does not hand a
// stalled holder's token out again. A Complete repeated by the holder
// with the same status after it succeeded (a retry after a lost reply) is
// answered as a success again, not as a lost lease. The package passes
// the conformance suite (idempotencytest.Exercise) on a real
// redis-server, sealed responses included, and on a real Cluster of three
// primaries with a replica each, with and without Config.WaitReplicas.
//
// # Clock
//
// Every lease and expiry decision uses the server's clock (TIME inside
// the script), never the application's: the application sends durations
// only, and its clock may be skewed without effect. Redis 7 replicates a
// script's effects, not the script, so a replica stores the instants the
// primary decided on.
//
// # Keys and expiry
//
// A record is the hash "<prefix>:{<scope>}:r:<key>" (Config.KeyPrefix,
// default "payonce"); its scope's due index is "<prefix>:{<scope>}:due".
// The hash tag {<scope>} keeps a scope's keys in one Cluster slot. Each
// key expires by itself (PEXPIREAT) once nothing can need it: a finished
// record at its expiry, or, when it was claimed under
// idempotency.ExpiredRefused, at the end of its refusal horizon; a
// PROCESSING record not before its expiry nor its lease's end. Redis
// deletes records even if no pruner runs. [Store.Prune] (run it with
// idempotency.NewPruner) finds the scopes with records due through one
// registry key, "<prefix>:prune", and reduces records claimed under
// ExpiredRefused to tombstones at their expiry (the response deleted,
// the refusal kept), as pgstore's prune does. Errors name a key by its
// short hash (idempotency.ShortHash), never in full.
//
// # Cluster
//
// Every script touches the keys of one scope only (its records and its
// due index, all tagged {<scope>}), so of one slot, and Cluster runs it
// on the primary of that slot. Two keys live outside the scopes' slots,
// and only separate commands from the client write them:
//
//   - The prune registry, "<prefix>:prune": Complete files the scope there
//     (ZADD LT) after its script; Prune files the scope again after
//     pruning it (its next due instant, or out), then reads the scope's
//     due index once more and files it sooner if a Complete came in
//     between. Cost: one more round trip per Complete, two or three more per
//     scope a Prune visits. What can be lost: the registry write, when the
//     client fails between the two commands (the outcome itself is
//     recorded). Then the scope's expired records are not found by Prune
//     until another Complete in the scope files it again; claims are not
//     affected (each claim decides on the record's own expiry), and Redis
//     still deletes every record by itself (PEXPIREAT): what is delayed is
//     the tombstone, a record kept whole, response included, until the
//     end of its refusal horizon instead of reduced at its expiry.
//   - The owners of a key, "<prefix>:owners:{<key>}" (see Scopes): the
//     lookup and the filing are commands apart from the claim, as on a
//     standalone server.
//
// Prune finds the registry on whichever primary holds it (the client
// routes by key) and each scope on its own.
//
// # Scopes
//
// ClaimParams.RefuseForeign looks a key up among the scopes that claimed
// it with RefuseForeign (the set "<prefix>:owners:{<key>}", kept at least
// twice the retention), and refuses it when one of them holds a live
// record: turn it on for every claim of a key space, as the HTTP
// middleware does for all its requests when
// MiddlewareConfig.AllowLowEntropyKeys is set, not for some claims only. The lookup and the claim
// are separate steps (two scopes racing for a new key may both get it, as
// with pgstore's READ COMMITTED snapshot); a claim that refuses foreign
// keys costs three round trips more when the key is new to its scope (a
// check, the list of the scopes that claimed it, the owners' update), and
// one more for each other scope that claimed it.
//
// # Durability
//
// Redis acknowledges a write before any replica has it, and replication
// is asynchronous: a primary that fails after acknowledging a claim can
// lose it, and the replica promoted in its place can let a second holder
// run the action. The same holds for an outcome: a completed record lost
// in a failover is claimed and executed again. Without persistence
// (appendonly no) a restart loses every record. Run Redis with
// appendonly yes (appendfsync everysec loses at most about a second of
// acknowledged writes on a crash; always loses none, at the cost of a
// disk sync per write), and keep the actions' own deduplication
// downstream (the provider references the payments package derives from
// the key).
//
// Config.WaitReplicas closes the failover window for claims. After a
// claim that takes a lease, a heartbeat and a complete, the store sends
// WAIT numreplicas timeout on the same connection to the key's primary
// (one more round trip; replays and "in progress" answers never wait).
// Redis documents that when WAIT returns, every earlier write of the
// connection has been received by the number of replicas it returns
// (https://redis.io/docs/latest/commands/wait/). A claim that fewer
// replicas acknowledge is released at once (fenced by its lock version)
// and answered with a *NotReplicatedError: the action does not run,
// SafeToRetry is true, the middleware answers 503 with Retry-After. A
// heartbeat not acknowledged is reported to the executor as failed, so
// that the holder does not trust a lease a failover could shorten. A
// complete not acknowledged returns a *NotReplicatedError as well: the
// action ran and its outcome is on the primary; the executor tries the
// complete again (a repeated Complete of the holder is not a lost lease,
// and waits again), then reports "outcome not recorded" (the middleware:
// 503). A retry then replays the outcome, unless a failover lost it, and
// then runs the action again: the write a failover can lose is one the
// caller was told was not safe.
//
// WAIT goes over a connection taken with Client.Conn. go-redis v9.23.0
// races on its own options there when maintenance notifications are in
// their default auto mode and the server lacks them (Redis before 8):
// give such clients MaintNotificationsConfig:
// &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}.
//
// Why no claim is lost with WaitReplicas equal to the replicas of each
// primary (one, in the test below): the action runs only after its
// claim's WAIT counted every replica, so every replica holds the record
// (PROCESSING, at the holder's version) before the action starts, and
// the replica promoted in the primary's place is one of them. Redis's own
// words set the limit: WAIT "does not make Redis a strongly consistent
// store"; after a write reaches some replicas it is "more likely (but not
// guaranteed)" that the one promoted is among them, as Sentinel and
// Cluster promote the best replica as a best effort, so a write
// acknowledged by some replicas can still be lost. With one replica per
// primary, or WaitReplicas equal to the replicas per primary, there is
// no other replica to promote; with more replicas than WaitReplicas, that
// caveat stands. Two conditions remain: the lease must outlast a
// failover (cluster-node-timeout plus the election), or a holder cannot
// record its outcome on the promoted replica before its lease ends, and
// the key is claimed and run again (as with pgstore when the database is
// unreachable for longer than the lease); and an operator must not
// promote a replica by hand (CLUSTER FAILOVER FORCE/TAKEOVER) that
// missed writes.
//
// Measured here (TestFailover; run it with
// PAYONCE_REDIS_FAILOVER=1 go test -race -count=1 -run TestFailover -v
// ./idempotency/redisstore): a Cluster of 3 primaries with 1 replica
// each, cluster-node-timeout 1.5 s, no persistence; 600 keys all served
// by one primary; 16 callers, each claiming every key until it is done
// (claim, run, complete, retrying every error); the primary SIGKILLed
// once 200 keys have run, its replica promoted by the cluster, the
// killed node restarted as the new primary's replica; executions counted
// per key.
//
// With a 20 s lease (longer than the failover), in each of 4 runs:
// 600 keys, 600 executions, no key executed twice, both without
// WaitReplicas and with WaitReplicas=1 (runs of about 15 to 25 s per
// mode). Asynchronous replication on one machine lags by well under
// a millisecond, so the window in which a killed primary takes
// acknowledged claims with it is narrow here; it is wider across a
// network, and the absence of duplicates without WAIT proves nothing.
// With a 3 s lease (shorter than the failover: node timeout 1.5 s, plus
// detection and election), one run each: without WaitReplicas 7 of 600
// keys ran twice, with WaitReplicas=1 11 of 600: holders whose
// outcome could not be recorded before their lease ended, and whose key
// was claimed again, WAIT or not. The test asserts no duplicate with
// WaitReplicas=1 and a lease longer than the failover.
//
// Choose pgstore where a lost claim must never run twice and the
// deployment cannot promise one acknowledged replica per primary.
//
// # Rate limits
//
// [Limiter] is the middleware's limit of new keys per scope
// (idempotency.MiddlewareConfig.Limiter) shared by every instance on the
// same Redis: a fixed-window counter per scope, in the scope's slot, on
// the server's clock, that expires at its window's end. It works beside
// any store, and on a Cluster as on a standalone server.
//
// # Transactions
//
// Transactions with the caller's own writes are PostgreSQL's: Store
// implements no idempotency.TxStore, and what takes one (DoTx, WithTx,
// package inbox, package cronslot) does not compile against it. Payments,
// the ledger, sagas, the inbox and cron slots stay on pgstore.
package redisstore
