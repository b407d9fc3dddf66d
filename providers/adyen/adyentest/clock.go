package adyentest

import (
	"time"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

// ManualClock is a clock that moves only when told to, for Config.Clock: Now returns its time
// and Advance(d) moves it forward by d. It is safe for concurrent use.
//
//	clock := adyentest.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
//	srv := adyentest.NewServer(&adyentest.Config{Clock: clock.Now})
//	clock.Advance(8 * 24 * time.Hour) // idempotency keys are now forgotten
type ManualClock = fakekit.ManualClock

// NewManualClock returns a ManualClock reading start.
func NewManualClock(start time.Time) *ManualClock {
	return fakekit.NewManualClock(start)
}
