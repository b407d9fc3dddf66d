package idempotency

import (
	"net/http"
	"time"
)

// Status is the state of an idempotency record.
type Status string

// The states of a record. A record is created PROCESSING by a claim and
// moves once to COMPLETED or FAILED under the holder's fencing token.
const (
	StatusProcessing Status = "PROCESSING"
	StatusCompleted  Status = "COMPLETED"
	StatusFailed     Status = "FAILED"
)

// Response is what an action answered, stored so that every retry gets
// exactly the same answer. Body is kept byte for byte whatever its content
// type; Header holds only what the caller chose to store.
type Response struct {
	Code   int
	Header http.Header
	Body   []byte
}

// Record is the stored state of one (scope, key).
type Record struct {
	Scope       string
	Key         string
	Fingerprint Fingerprint
	Status      Status
	// Response is set once the record is COMPLETED or FAILED, until the
	// record is a tombstone.
	Response *Response
	// LockVersion is the fencing token: it grows by one on every claim
	// that takes the record over (reclaim of an orphan, renewal of an
	// expired record).
	LockVersion int64
	// LockedUntil is when the current holder's lease ends (zero when not
	// PROCESSING).
	LockedUntil time.Time
	CreatedAt   time.Time
	CompletedAt time.Time
	ExpiresAt   time.Time
	// RefuseUntil is set on a tombstone: an expired record claimed under
	// ExpiredRefused that the prune stripped of its response. It refuses
	// its key until then; the prune deletes it afterwards. Zero otherwise.
	RefuseUntil time.Time
}

// Lease is the right to finish a claimed record. Only the holder of the
// record's current lock version can complete, fail, release or extend it.
type Lease struct {
	Scope   string
	Key     string
	Version int64
}
