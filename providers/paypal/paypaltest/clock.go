package paypaltest

import (
	"sync"
	"time"
)

// ManualClock is a clock that moves only when told to, for Config.Clock (and the adapter's own
// Config.Clock, so that both sides see the same time):
//
//	clock := paypaltest.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
//	srv := paypaltest.NewServer(&paypaltest.Config{Clock: clock.Now})
//	clock.Advance(7 * time.Hour) // Orders request ids are now forgotten, tokens still valid
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a ManualClock reading start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start}
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
