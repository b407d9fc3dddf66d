// Package dynamostore is an [idempotency.Store] on Amazon DynamoDB (AWS
// SDK for Go v2), designed from the record's logical model (key,
// fingerprint, status, lease with a fencing token, response, expiry, the
// refusal tombstone), for services that already run on DynamoDB or
// outgrow one PostgreSQL primary.
//
//	client := dynamodb.NewFromConfig(awsCfg)
//	err := dynamostore.CreateTable(ctx, client, "payonce-idempotency") // once, or in infrastructure code
//	...
//	store, err := dynamostore.New(ctx, client, &dynamostore.Config{Table: "payonce-idempotency"})
//	...
//	exec, err := idempotency.New(store, nil)
//	...
//	res, err := exec.Do(ctx, req, action)
//
// # Table
//
// One item per (scope, key), partition key "r#<scope>#<key>" ('#' is in
// neither charset, so no two pairs share an item), with the scope and key
// kept as attributes of their own. No sort key and no index: every access
// is by the full key, except [Store.Prune]'s Scan. See [CreateTable] for
// the definition; [New] checks the table with DescribeTable and answers a
// missing one with an error saying how to create it.
//
// # Guarantees
//
// Every state change is one conditional write, which DynamoDB applies
// atomically to the item:
//
//   - claim of a new key: PutItem conditioned on attribute_not_exists(pk);
//     of many contenders exactly one creates the item.
//   - renewal of an expired record (ExpiredIsNew): PutItem conditioned on
//     the lock version and status read.
//   - reclaim of an orphaned lease: UpdateItem conditioned on status
//     PROCESSING and the lock version and lease end read, a
//     compare-and-swap: exactly one contender wins, and a heartbeat that
//     lands between the read and the write makes it fail.
//   - complete, release, heartbeat: UpdateItem, and abandon DeleteItem,
//     conditioned on status PROCESSING and the holder's lock version (the
//     fencing token); a holder that lost its lease gets
//     idempotency.ErrLeaseLost and changes nothing.
//
// A write whose condition fails is decided again on a fresh, strongly
// consistent GetItem. A new record's lock version starts at a random value
// below 2^30, as pgstore's, so that a key deleted and claimed again does
// not hand a stalled holder's token out again. Fingerprints are compared
// in Go with idempotency.Fingerprint.Equal (constant time), never in an
// expression. Errors name a key by its short hash
// (idempotency.ShortHash), never in full. The package passes the
// conformance suite (idempotencytest.Exercise) on a real dynalite, with
// and without the replay cache, sealed responses (Config.Keyring)
// included.
//
// # Clock and skew
//
// DynamoDB's expressions have no clock: every lease end, expiry and
// refusal horizon is an instant computed by the application's clock
// (Config.Clock, default time.Now) and compared by it. PostgreSQL
// (pgstore: now()) and Redis (redisstore: TIME inside the script) decide
// by the one clock of the server, and the applications' clocks do not
// matter there. Here they do: an instance whose clock runs ahead sees a
// lease end early and could take over a key whose holder is still at
// work. Config.SkewBuffer (default 2s) is the bound the deployment
// promises on the difference between its instances' clocks (NTP keeps
// them within milliseconds; Amazon Time Sync within microseconds): a
// lease is taken over only once it ended SkewBuffer ago by the
// claimant's clock, so a duplicate waits up to SkewBuffer longer after a
// crash (a released lease, whose holder said it is done, is taken over
// at once). A clock that is off by more than SkewBuffer breaks the
// at-most-one-holder promise; a lease's fencing token still keeps the
// stale holder's outcome from being recorded, but not its side effect.
// Expiry is decided by the same clock, and a record's expiry and
// retention are its writer's: instances whose clocks differ by d see it
// expire up to d apart. Choose pgstore or redisstore where the clocks of
// the application hosts cannot be trusted within a few seconds.
//
// # Expiry, TTL and prune
//
// Each item carries the TTL attribute "purge" (Unix seconds): when
// nothing can need it any more (a finished record at its expiry, or at
// the end of its refusal horizon when it was claimed under
// idempotency.ExpiredRefused; a PROCESSING record not before its expiry
// nor its lease's end), plus the skew buffer. DynamoDB deletes expired
// items late (typically within days) and never early, so every read
// decides expiry by itself: an expired record is never replayed, whether
// TTL deleted it or not. [Store.Prune] (run it with idempotency.NewPruner)
// adds what TTL cannot: the count, and the tombstone: a record claimed
// under ExpiredRefused loses its response at its expiry and keeps
// refusing its key until its horizon, as pgstore's prune does. Prune is
// a Scan with a filter: DynamoDB bills the whole table read (every item,
// expired or not, 4 KB per read unit, halved for eventually consistent
// reads), not what the filter returns. The store resumes each Prune call
// where the previous one stopped, so a Pruner's pass reads the table about
// twice at most whatever its batch size (once, and once more by the call
// that finds nothing left); on a large table, run it rarely (daily) and
// let TTL do the deleting.
//
// # Scopes
//
// ClaimParams.RefuseForeign looks a key up among the scopes that claimed
// it with RefuseForeign (the item "o#<key>", a string set kept at least
// twice the retention by its TTL) and refuses it when one of them holds a
// live record. The lookup and the claim are separate steps (two scopes
// racing for a new key may both get it, as with pgstore's READ COMMITTED
// snapshot); a claim that refuses foreign keys costs a read more, and,
// when the key is new to its scope, two or three round trips more plus
// one per other scope that claimed it.
//
// # Costs
//
// A claim of a new key is one PutItem (one write unit for a small item).
// A claim of an existing key (replay, in progress, mismatch) is a failed
// PutItem (billed as a write) and a strongly consistent GetItem; a reclaim
// or renewal adds one write. While most recent claims find an existing
// record (a retry storm, a client that replays), the store reads first
// instead, as pgstore's default claim strategy does: a replay is then one
// strongly consistent GetItem (a read unit per 4 KB), and a new key costs
// that read more; it goes back to writing first when new keys prevail
// again ([Store.Claim]). Complete, release and heartbeat are one
// UpdateItem each, billed by the item's size: a response of 40 KB costs
// 40 write units to store and 10 read units per replay. An item is at
// most 400 KB: Complete refuses a response that would not fit with an
// *idempotency.InvalidError naming Completion.Response, storing nothing
// (the executor reports the outcome unrecorded; once the lease runs out
// a retry runs the action again): keep stored responses well below.
//
// # Transactions
//
// Transactions with the caller's own writes are PostgreSQL's: Store
// implements no idempotency.TxStore, and what takes one (DoTx, WithTx,
// package inbox, package cronslot) does not compile against it. DynamoDB's
// TransactWriteItems could join a claim with the caller's own items, but
// not with the ledger's PostgreSQL rows: payments, the ledger, sagas, the
// inbox and cron slots stay on pgstore.
//
// # Tests
//
// Package dynamotest starts dynalite (an implementation of the DynamoDB
// API, from npm, installed into the module's .bin/dynalite on first use)
// for the package's tests: nothing is mocked. dynalite has no TTL
// deletion; what TTL would add is checked by reading the attribute.
package dynamostore
