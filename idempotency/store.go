package idempotency

import (
	"context"
	"time"
)

// Store keeps idempotency records. Implementations: pgstore (PostgreSQL,
// production) and memstore (one process, tests). Every implementation must
// pass the conformance suite in package idempotencytest.
//
// All time comparisons are the store's own: pgstore uses the database
// clock, never the application's.
type Store interface {
	// Claim atomically creates the record in PROCESSING with a lease of
	// p.LockTimeout, or reports the existing record. It takes over an
	// orphaned record (PROCESSING whose lease ended) by compare-and-swap on
	// its lock version, so exactly one contender wins. The stored
	// fingerprint is compared in constant time before acting on an
	// existing record; a mismatch changes nothing.
	Claim(ctx context.Context, p ClaimParams) (Claim, error)
	// Complete stores the outcome (COMPLETED or FAILED) for the lease's
	// holder, and keeps the record until retention from now. It returns
	// ErrLeaseLost, changing nothing, when the lease is no longer the
	// record's current one.
	Complete(ctx context.Context, l Lease, c Completion) error
	// Release ends the lease now and keeps the record PROCESSING, so that
	// a retry re-drives the action. ErrLeaseLost as for Complete.
	Release(ctx context.Context, l Lease) error
	// Heartbeat extends the lease to d from now. ErrLeaseLost as for
	// Complete.
	Heartbeat(ctx context.Context, l Lease, d time.Duration) error
	// Get returns the record of (scope, key), or ErrNotFound.
	Get(ctx context.Context, scope, key string) (Record, error)
	// Prune takes at most limit records that are expired and not
	// PROCESSING and returns how many it took. It deletes each one,
	// except a record claimed under ExpiredRefused whose refusal horizon
	// has not passed: that one it reduces to a tombstone, without its
	// response, which keeps refusing the key (see [ExpiredRefused]). It
	// deletes tombstones whose horizon has passed. It never touches a
	// PROCESSING record.
	Prune(ctx context.Context, limit int) (int, error)
}

// Abandoner is implemented by stores that can take back a claim: delete a
// PROCESSING record held by the lease, as if it had never been claimed
// (ErrLeaseLost, changing nothing, when the lease is not the record's
// current one). The executor abandons a claim whose action returns an
// error made by [Abandon], for instance when a rate limit refuses a new
// key: the refused request leaves no record behind.
type Abandoner interface {
	Abandon(ctx context.Context, l Lease) error
}

// ClaimParams are the inputs of [Store.Claim].
type ClaimParams struct {
	Scope       string
	Key         string
	Fingerprint Fingerprint
	// LockTimeout is the lease a new or reclaimed claim gets.
	LockTimeout time.Duration
	// Retention is how long the record is kept; a claim sets the record's
	// expiry to now + Retention, and [Store.Complete] renews it.
	Retention time.Duration
	// Expired says what a claim of an expired record does.
	Expired ExpiredPolicy
	// RefusalHorizon, under ExpiredRefused, is how long past its expiry
	// the record that this claim creates (or renews) keeps refusing its
	// key: the prune keeps it that long as a tombstone. Zero means
	// DefaultRefusalHorizon. It must be zero under ExpiredIsNew, whose
	// records are deleted when they expire.
	RefusalHorizon time.Duration
	// RefuseForeign refuses (ClaimForeign) a key that this scope has no
	// record of but another scope has a live one: the key is someone
	// else's, and this scope learns nothing about it. Decided in the same
	// round trip as the claim. Default false: scopes never see each other
	// at all.
	RefuseForeign bool
}

// Validate checks the parameters: a valid scope, key and fingerprint, a
// positive LockTimeout, a Retention longer than it, a known policy. Every
// store calls it first; errors are *InvalidError naming the field.
func (p ClaimParams) Validate() error {
	if err := ValidateScope(p.Scope); err != nil {
		return err
	}
	if err := ValidateKey(p.Key); err != nil {
		return err
	}
	if err := p.Fingerprint.Validate(); err != nil {
		return err
	}
	switch {
	case p.LockTimeout <= 0:
		return invalid("LockTimeout", "must be positive, got %s", p.LockTimeout)
	case p.Retention <= p.LockTimeout:
		return invalid("Retention", "must exceed LockTimeout (%s), got %s", p.LockTimeout, p.Retention)
	case p.Expired != ExpiredIsNew && p.Expired != ExpiredRefused:
		return invalid("Expired", "unknown policy %d", p.Expired)
	case p.RefusalHorizon < 0:
		return invalid("RefusalHorizon", "must be positive (0 means %s), got %s", DefaultRefusalHorizon, p.RefusalHorizon)
	case p.RefusalHorizon > 0 && p.Expired != ExpiredRefused:
		return invalid("RefusalHorizon", "applies only under Expired: ExpiredRefused; set Expired to ExpiredRefused, or leave RefusalHorizon zero")
	}
	return nil
}

// RefuseFor is how long past its expiry the record this claim creates
// keeps refusing its key: 0 under ExpiredIsNew (deleted when it expires),
// else RefusalHorizon, or DefaultRefusalHorizon when it is zero.
func (p ClaimParams) RefuseFor() time.Duration {
	switch {
	case p.Expired != ExpiredRefused:
		return 0
	case p.RefusalHorizon == 0:
		return DefaultRefusalHorizon
	}
	return p.RefusalHorizon
}

// ExpiredPolicy says what happens to a request whose key's record has
// expired. An expired record is never replayed.
//
// ExpiredIsNew is the default. Retention is chosen to cover every
// retry window of the key's clients and the deduplication windows of the
// systems downstream; past it, a request with the key is almost always a
// new intent that reused a key, which ExpiredIsNew serves and
// ExpiredRefused would answer with an error its client cannot act on. It
// also lets the prune delete a record as soon as it expires, so the store
// holds Retention's worth of keys and nothing more. Choose ExpiredRefused
// when a request that arrives long after its key expired must never run
// again (a stale payment order re-sent from a queue or an outbox), at the
// cost of a tombstone per key for RefusalHorizon past its expiry.
type ExpiredPolicy int

const (
	// ExpiredIsNew treats the request as new: the expired record is
	// replaced (its lock version still grows, so the fencing token never
	// repeats), and the prune deletes it. The default.
	ExpiredIsNew ExpiredPolicy = iota
	// ExpiredRefused refuses the request with ErrExpired, and keeps doing
	// so after the prune. A record claimed under this policy is reduced by
	// the prune, once it has expired, to a tombstone: its scope, key,
	// fingerprint, status, lock version and times, without its response
	// (status code, headers and body are deleted, as the prune deletes
	// other records). The tombstone refuses the key until the record's
	// expiry plus ClaimParams.RefusalHorizon (the executor's
	// Config.RefusalHorizon, default DefaultRefusalHorizon); a later
	// prune then deletes it, and a request with the key after that is new.
	// Until then a claim under ExpiredIsNew (a configuration that changed)
	// renews it as it renews any expired record, and the lock version
	// still grows.
	ExpiredRefused
)

// DefaultRefusalHorizon is how long past its expiry a record claimed under
// ExpiredRefused keeps refusing its key by default: 30 days. It outlasts
// the redelivery windows a stale request typically travels through (an
// SQS queue keeps a message 14 days at most, Kafka 7 days by default; a
// client's retries stop within hours) at the cost of one small row per
// key (no response) for a month.
const DefaultRefusalHorizon = 30 * 24 * time.Hour

// ClaimState is the result of a claim.
type ClaimState int

const (
	// ClaimAcquired: the record is new (or replaced an expired one) and
	// the caller holds its lease.
	ClaimAcquired ClaimState = iota + 1
	// ClaimReclaimed: the record was orphaned (PROCESSING, lease ended)
	// and the caller took it over with the next lock version.
	ClaimReclaimed
	// ClaimReplay: the record is COMPLETED or FAILED; Record holds the
	// stored response.
	ClaimReplay
	// ClaimInProgress: another holder's lease is live. RetryAfter says
	// when it ends.
	ClaimInProgress
	// ClaimMismatch: the record exists with another fingerprint. Nothing
	// was changed.
	ClaimMismatch
	// ClaimExpired: the record expired (or is a tombstone) and the policy
	// is ExpiredRefused. Nothing was changed.
	ClaimExpired
	// ClaimForeign: RefuseForeign was set and the key belongs to another
	// scope only. Nothing was changed.
	ClaimForeign
)

func (s ClaimState) String() string {
	switch s {
	case ClaimAcquired:
		return "acquired"
	case ClaimReclaimed:
		return "reclaimed"
	case ClaimReplay:
		return "replay"
	case ClaimInProgress:
		return "in_progress"
	case ClaimMismatch:
		return "mismatch"
	case ClaimExpired:
		return "expired"
	case ClaimForeign:
		return "foreign"
	}
	return "unknown"
}

// Claim is the result of [Store.Claim].
type Claim struct {
	State ClaimState
	// Lease is set for ClaimAcquired and ClaimReclaimed.
	Lease Lease
	// Record is set for ClaimReplay (with its Response) and, as far as the
	// store knows it, for ClaimInProgress.
	Record Record
	// RetryAfter is set for ClaimInProgress: the time left on the live
	// lease, by the store's clock.
	RetryAfter time.Duration
	// StoreNow is the store's clock when it read the record, with
	// Record.ExpiresAt set, for ClaimReplay; stores that leave it zero
	// are not served by the replay cache ([ReplayCache]).
	StoreNow time.Time
}

// Completion is the outcome stored by [Store.Complete].
type Completion struct {
	// Status is StatusCompleted or StatusFailed.
	Status   Status
	Response Response
	// Retention is how long the record is kept from now.
	Retention time.Duration
}
