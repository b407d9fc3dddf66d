package pgstore

import (
	"context"
	"sync/atomic"
	"testing"
)

// TestGrouperLeadKeepsTheQueueFirst checks the member-free fast path:
// lead takes a free flight only while nobody waits, so a caller that skips
// building its member never overtakes callers already queued.
func TestGrouperLeadKeepsTheQueueFirst(t *testing.T) {
	var inFlight atomic.Int64
	flushed := make(chan int, 4)
	g := &grouper[*member]{maxFlights: 1, stall: groupStall, inFlight: &inFlight,
		flush: func(batch []*member) {
			for _, m := range batch {
				m.finish()
			}
			flushed <- len(batch)
		}}
	if !g.lead() {
		t.Fatal("lead on an idle grouper: want a flight of its own")
	}
	if g.lead() {
		t.Fatal("lead while the only flight is taken: want false")
	}
	a := &member{ctx: context.Background(), done: make(chan struct{})}
	b := &member{ctx: context.Background(), done: make(chan struct{})}
	if g.join(a) || g.join(b) {
		t.Fatal("join while the flight is taken: want queued")
	}
	// A second flight is allowed now, but two callers wait: lead must
	// not pass them.
	g.mu.Lock()
	g.maxFlights = 2
	g.mu.Unlock()
	if g.lead() {
		t.Fatal("lead while callers are queued: want false (they go first)")
	}
	g.leave() // the first flight ends and goes on with the queue
	if n := <-flushed; n != 2 {
		t.Fatalf("group of %d, want the 2 queued callers", n)
	}
	<-a.done
	<-b.done
}
