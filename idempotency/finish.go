package idempotency

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Recording an outcome (or giving a lease back) outlives the request's
// cancellation, for FinishTimeout: the action may have had its effect.
// A context of its own per call (WithoutCancel, then WithTimeout) costs a
// timer, and pgx, seeing a context that can end, registers a callback on
// it per statement: together about a third of the executor's allocations
// per Do. The calls that start within the same slice of time share one
// deadline instead: each gets a light context that answers Done, Err and
// Deadline from the shared one and every value from its own request's
// context (its span, its logger's fields). Each call keeps at least
// FinishTimeout and at most an eighth more.

// finishDeadlines hands out the shared deadlines of one executor.
type finishDeadlines struct {
	timeout time.Duration
	cur     atomic.Pointer[finishDeadline]
	mu      sync.Mutex // held to replace cur
}

// finishDeadline is one shared deadline: a context that ends at until.
type finishDeadline struct {
	ctx   context.Context
	until time.Time
}

// get returns a deadline at least the timeout after now.
func (f *finishDeadlines) get(now time.Time) context.Context {
	want := now.Add(f.timeout)
	if d := f.cur.Load(); d != nil && !d.until.Before(want) {
		return d.ctx
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if d := f.cur.Load(); d != nil && !d.until.Before(want) {
		return d.ctx
	}
	until := want.Add(f.timeout / 8)
	// The context ends by itself at until, cancelling what still uses it:
	// its calls have had their time. Nothing cancels it earlier.
	ctx, cancel := context.WithDeadline(context.Background(), until)
	_ = cancel
	f.cur.Store(&finishDeadline{ctx: ctx, until: until})
	return ctx
}

// finishCtx is a call's finishing context: the shared deadline's Done,
// Err and Deadline, and the request context's values.
type finishCtx struct {
	context.Context                 // the shared deadline
	values          context.Context // the request's context
}

// Value answers from the shared deadline first, which holds no value but
// the one through which the context package finds its cancellation (so
// that a context derived from this one, or a context.AfterFunc on it,
// registers with the shared deadline and starts no goroutine), then from
// the request's context.
func (c *finishCtx) Value(key any) any {
	if key == (finishingKey{}) {
		return c
	}
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.values.Value(key)
}

// finishingKey finds a finishCtx under the values added to it (a span).
type finishingKey struct{}

// EndsOnlyAtDeadline reports whether ctx is one of the contexts in which an
// Executor records an outcome or gives a lease back, or one that only adds
// values to it (a span): such a context ends at its deadline (see
// Config.FinishTimeout) and is never cancelled before. A store may then
// bound its calls by that deadline alone instead of watching the context:
// pgstore sets it on the connection, which spares pgx a callback per
// statement. A context derived with a cancellation of its own reports
// false.
func EndsOnlyAtDeadline(ctx context.Context) bool {
	f, ok := ctx.Value(finishingKey{}).(*finishCtx)
	return ok && ctx.Done() == f.Done()
}
