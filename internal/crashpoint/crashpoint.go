// Package crashpoint lets tests stop a process, or pause one actor, at a
// named point of payonce's code (payments, the reconciler, the webhook
// receiver and the operator's resolve call Reach at each recovery point
// and each point where a decision was taken but not yet committed).
// Outside tests nothing is set and Hit and Reach do nothing.
package crashpoint

import (
	"context"
	"sync/atomic"
)

// Named points. A point is reached with the idempotency key of the action
// it works on (payonce's composed key).
const (
	// Charge and refund: the key is claimed, nothing else recorded.
	AfterClaim = "after_claim"
	// The intent is committed (and counted as sent); the provider not
	// called yet.
	AfterIntent = "after_intent"
	// The provider answered; nothing local recorded it.
	AfterProvider = "after_provider"
	// The outcome is committed; the caller has no answer yet.
	AfterCommit = "after_commit"
	// The reconciler holds the intent's key and has read it again; the
	// provider not asked yet.
	ReconcileHeld = "reconcile_held"
	// The reconciler's lookup answered and its decision is taken; not
	// applied yet.
	ReconcileBeforeApply = "reconcile_before_apply"
	// A webhook's events are verified and parsed; not applied yet.
	WebhookBeforeApply = "webhook_before_apply"
	// An operator's review decision is checked; not applied yet.
	OperatorBeforeApply = "operator_before_apply"
)

var hook atomic.Pointer[func(point, key string)]

// Set installs f for every later Hit in this process; nil removes it.
// Tests call it in a child process they then kill at a point.
func Set(f func(point, key string)) {
	if f == nil {
		hook.Store(nil)
		return
	}
	hook.Store(&f)
}

// Hit reports reaching point while working on key.
func Hit(point, key string) {
	if f := hook.Load(); f != nil {
		(*f)(point, key)
	}
}

var reach atomic.Pointer[func(ctx context.Context, point, key string)]

// SetReach installs f for every later Reach in this process; nil removes
// it. f may block: that pauses the actor that reached the point (its ctx
// says which, see WithActor) until f returns.
func SetReach(f func(ctx context.Context, point, key string)) {
	if f == nil {
		reach.Store(nil)
		return
	}
	reach.Store(&f)
}

// Reach reports reaching point while working on key on behalf of the
// actor ctx carries: the SetReach hook first (which may pause it), then
// the Set hook (which may kill the process).
func Reach(ctx context.Context, point, key string) {
	if f := reach.Load(); f != nil {
		(*f)(ctx, point, key)
	}
	Hit(point, key)
}

type actorKey struct{}

// WithActor names the actor working with ctx (a client retry, a
// reconciler run, a webhook delivery, an operator), for SetReach hooks.
func WithActor(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, actorKey{}, name)
}

// Actor is the actor ctx was given by WithActor, or "".
func Actor(ctx context.Context) string {
	s, _ := ctx.Value(actorKey{}).(string)
	return s
}
