package idempotency

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Most actions end well within one heartbeat interval, so most never
// heartbeat. A timer of their own per action, started and stopped on every
// call, is what the executor's bookkeeping spent most on after its
// allocations. The actions of one executor wait for their first heartbeat
// in one queue instead, behind one timer: an action enters the queue when
// it starts and leaves it when it ends, and the timer, set for the first
// action due, starts the heartbeats of every action whose interval has
// passed, each in a goroutine of its own, and is set again for the next.
// Since every action waits the same interval after its claim was sent, the
// queue is nearly in arrival order, and the timer fires about once per
// interval however many actions run.

// heartbeatStarts is an executor's queue of actions waiting for their
// first heartbeat: a min-heap on their due times.
type heartbeatStarts struct {
	mu    sync.Mutex
	queue []*heartbeats
	timer *time.Timer // nil until first needed
	// armed is when timer fires; zero when it is not set.
	armed time.Time
}

// heap.Interface, on the queue; the index of each entry is kept in it
// so that an action that ends leaves the queue at once.
func (s *heartbeatStarts) Len() int           { return len(s.queue) }
func (s *heartbeatStarts) Less(i, j int) bool { return s.queue[i].due.Before(s.queue[j].due) }
func (s *heartbeatStarts) Swap(i, j int) {
	s.queue[i], s.queue[j] = s.queue[j], s.queue[i]
	s.queue[i].index, s.queue[j].index = i, j
}
func (s *heartbeatStarts) Push(x any) {
	h := x.(*heartbeats)
	h.index = len(s.queue)
	s.queue = append(s.queue, h)
}
func (s *heartbeatStarts) Pop() any {
	n := len(s.queue) - 1
	h := s.queue[n]
	s.queue[n], s.queue = nil, s.queue[:n]
	h.index = -1
	return h
}

// startHeartbeats renews the lease of the action guarded by g from after
// on, until stop. ctx is the request's: the heartbeats keep its values,
// not its cancellation.
func (e *Executor) startHeartbeats(ctx context.Context, g *leaseGuard, after time.Duration) *heartbeats {
	h := &g.hb // allocated with the guard
	s := &e.hbStarts
	h.starts, h.ctx, h.g = s, ctx, g
	now := time.Now()
	h.due = now.Add(after)
	s.mu.Lock()
	heap.Push(s, h)
	if s.armed.IsZero() || h.due.Before(s.armed) {
		e.armHeartbeatsLocked(now, h.due)
	}
	s.mu.Unlock()
	return h
}

// armHeartbeatsLocked sets the queue's timer for at (s.mu held).
func (e *Executor) armHeartbeatsLocked(now, at time.Time) {
	s := &e.hbStarts
	s.armed = at
	if s.timer == nil {
		s.timer = time.AfterFunc(at.Sub(now), e.dueHeartbeats)
		return
	}
	s.timer.Reset(at.Sub(now))
}

// dueHeartbeats, the queue's timer, starts the heartbeats of the actions
// due and sets the timer for the next one. The timer may fire early (set
// for an action that ended since, or reset while it was firing): then
// nothing is due yet.
func (e *Executor) dueHeartbeats() {
	s := &e.hbStarts
	var due []*heartbeats
	s.mu.Lock()
	s.armed = time.Time{}
	now := time.Now()
	for len(s.queue) > 0 && !s.queue[0].due.After(now) {
		due = append(due, heap.Pop(s).(*heartbeats))
	}
	if len(s.queue) > 0 {
		e.armHeartbeatsLocked(now, s.queue[0].due)
	}
	s.mu.Unlock()
	for _, h := range due {
		e.beginHeartbeats(h)
	}
}

// beginHeartbeats starts h's loop, unless its action stopped meanwhile.
func (e *Executor) beginHeartbeats(h *heartbeats) {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	hbctx, cancel := context.WithCancel(context.WithoutCancel(h.ctx))
	h.cancel, h.done = cancel, make(chan struct{})
	h.mu.Unlock()
	go func() {
		defer close(h.done)
		e.heartbeat(hbctx, h.g, h.g.lease)
	}()
}

// leave takes h out of the queue, if it is still there.
func (s *heartbeatStarts) leave(h *heartbeats) {
	s.mu.Lock()
	if h.index >= 0 {
		heap.Remove(s, h.index)
	}
	s.mu.Unlock()
}
