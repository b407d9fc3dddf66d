package paypaltest

import (
	"time"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// ManualClock is a clock that moves only when told to, for Config.Clock (and the adapter's own
// Config.Clock, so that both sides see the same time): Now returns its time and Advance(d)
// moves it forward by d. It is safe for concurrent use.
//
//	clock := paypaltest.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
//	srv := paypaltest.NewServer(&paypaltest.Config{Clock: clock.Now})
//	clock.Advance(7 * time.Hour) // Orders request ids are now forgotten, tokens still valid
type ManualClock = fakekit.ManualClock

// NewManualClock returns a ManualClock reading start.
func NewManualClock(start time.Time) *ManualClock {
	return fakekit.NewManualClock(start)
}
