package idempotency

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// LeaseExpiredError is why a holder stopped on its own: no claim or
// heartbeat sent within the last LockTimeout minus LeaseMargin was
// confirmed by the store (the store unreachable from this node, the pool
// exhausted, calls timing out). The store may still show the lease, but
// the holder can no longer tell whether it ran out there, so it acts as if
// it had: the action's context is cancelled with this cause and
// [CheckLease] refuses every new external call. It matches ErrLeaseLost.
type LeaseExpiredError struct {
	// Trusted is how long a confirmed claim or heartbeat is trusted:
	// LockTimeout minus LeaseMargin, from the moment it was sent.
	Trusted time.Duration
	// LastErr is the last heartbeat's error; nil when none had failed
	// (the heartbeats could not even be sent in time).
	LastErr error
}

func (e *LeaseExpiredError) Error() string {
	if e.LastErr == nil {
		return fmt.Sprintf("idempotency: lease not renewed within %s: the holder stopped", e.Trusted)
	}
	return fmt.Sprintf("idempotency: lease not renewed within %s: the holder stopped (last heartbeat: %v)", e.Trusted, e.LastErr)
}

// Is reports ErrLeaseLost.
func (e *LeaseExpiredError) Is(target error) bool { return target == ErrLeaseLost }

// SafeToRetry reports false, as ErrLeaseLost does: the holder stopped
// without knowing what its action did.
func (e *LeaseExpiredError) SafeToRetry() bool { return false }

// errLeaseEnded is what CheckLease answers once the action returned and
// its outcome was recorded or its lease given back: work left behind by
// the action (a goroutine it started) no longer runs under the lease.
var errLeaseEnded = fmt.Errorf("%w: the action's lease ended with the action", ErrLeaseLost)

// CheckLease reports whether the lease of the action running with ctx
// (or a context derived from it) is still trusted: nil while it is, an
// error matching ErrLeaseLost once it was lost to another processor, went
// unconfirmed for LockTimeout minus LeaseMargin (a *LeaseExpiredError), or
// ended with the action. It is cheap (a clock reading, no store call) and
// exact: it does not wait for the cancellation of ctx to be delivered.
//
// Call it right before every external call whose effect must not happen
// twice at once (a payment provider's charge, an e-mail, a message), and
// do not make the call when it fails:
//
//	if err := idempotency.CheckLease(ctx); err != nil {
//		return idempotency.Response{}, err // transient: the key is released, a retry runs again
//	}
//	res, err := provider.Charge(ctx, req)
//
// A context that carries no lease (not an action's of [Executor.Do] or
// [Executor.DoRecording], such as pgstore's DoTx, whose row lock keeps
// duplicates out) answers nil.
func CheckLease(ctx context.Context) error {
	g, ok := ctx.Value(leaseKey{}).(*leaseGuard)
	if !ok {
		return nil
	}
	return g.check()
}

// leaseGuard is the holder's own view of its lease, on the monotonic
// clock: the lease is trusted until the send time of the last confirmed
// claim or heartbeat plus LockTimeout minus LeaseMargin. The store starts
// counting LockTimeout when it receives the request, after it was sent,
// so its lease cannot end before that deadline unless its clock runs
// ahead of ours by more than the margin. When the deadline passes
// without a confirmed renewal, the action's context is cancelled with a
// *LeaseExpiredError.
type leaseGuard struct {
	lease     Lease
	reclaimed bool          // the claim took over an orphaned record
	hb        heartbeats    // the action's (see Executor.startHeartbeats)
	base      time.Time     // the claim's send time, with its monotonic reading
	trusted   time.Duration // LockTimeout - LeaseMargin
	// until is the deadline, in nanoseconds after base: read without the
	// lock by check, written under it.
	until atomic.Int64
	cause atomic.Pointer[error] // set once the lease is no longer trusted
	// returned is set once the action returned: the heartbeats go on
	// while its outcome is recorded, but nothing runs under the lease.
	returned atomic.Bool
	cancel   context.CancelCauseFunc

	mu      sync.Mutex
	timer   *time.Timer // the deadline's; nil until the heartbeats start
	lastErr error
}

func newLeaseGuard(sent time.Time, trusted time.Duration, cancel context.CancelCauseFunc) *leaseGuard {
	g := &leaseGuard{base: sent, trusted: trusted, cancel: cancel}
	g.until.Store(int64(trusted))
	return g
}

func (g *leaseGuard) deadline() time.Time { return g.base.Add(time.Duration(g.until.Load())) }

// check answers CheckLease: the lease's end, if it ended, else a
// *LeaseExpiredError (and the action's cancellation) once the deadline
// passed, whether or not the deadline's timer has fired yet.
func (g *leaseGuard) check() error {
	if err := g.cause.Load(); err != nil {
		return *err
	}
	if g.returned.Load() {
		return errLeaseEnded
	}
	if time.Since(g.base) < time.Duration(g.until.Load()) {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.expireLocked()
}

// arm starts the deadline's timer; the heartbeats call it when they
// start, so that an action shorter than one heartbeat interval (the
// common case) never pays for a timer of its own.
func (g *leaseGuard) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.timer == nil && g.cause.Load() == nil {
		g.timer = time.AfterFunc(time.Until(g.deadline()), g.fire)
	}
}

func (g *leaseGuard) fire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cause.Load() != nil {
		return
	}
	if left := time.Until(g.deadline()); left > 0 { // renewed meanwhile
		g.timer.Reset(left)
		return
	}
	g.expireLocked()
}

// renewed moves the deadline after a heartbeat sent at sent was
// confirmed. A confirmation that comes after the deadline renews nothing:
// the holder had no lease it could trust for a moment, and stops. It
// reports whether the lease is still trusted.
func (g *leaseGuard) renewed(sent time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cause.Load() != nil {
		return false
	}
	if !time.Now().Before(g.deadline()) {
		g.expireLocked()
		return false
	}
	if until := sent.Sub(g.base) + g.trusted; until > time.Duration(g.until.Load()) {
		g.until.Store(int64(until))
		if g.timer != nil {
			g.timer.Reset(time.Until(g.deadline()))
		}
	}
	return true
}

// failed notes a heartbeat's error, for the cause, and reports whether
// the lease is still trusted.
func (g *leaseGuard) failed(err error) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lastErr = err
	if g.cause.Load() != nil {
		return false
	}
	if !time.Now().Before(g.deadline()) {
		g.expireLocked()
		return false
	}
	return true
}

// lost ends the lease: the store said another processor holds the key.
func (g *leaseGuard) lost() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.endLocked(&ErrLeaseLost)
}

// ended ends the lease with the action: its outcome is recorded or the
// lease given back.
func (g *leaseGuard) ended() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.endLocked(&errLeaseEnded) // the common end: a shared cause, no allocation
}

func (g *leaseGuard) expireLocked() error {
	if err := g.cause.Load(); err != nil {
		return *err
	}
	cause := error(&LeaseExpiredError{Trusted: g.trusted, LastErr: g.lastErr})
	return g.endLocked(&cause)
}

// endLocked ends the lease with *cause (never written through) unless it
// ended already, and returns the cause it ended with.
func (g *leaseGuard) endLocked(cause *error) error {
	if err := g.cause.Load(); err != nil {
		return *err
	}
	g.cause.Store(cause)
	if g.timer != nil {
		g.timer.Stop()
	}
	g.cancel(*cause)
	return *cause
}
