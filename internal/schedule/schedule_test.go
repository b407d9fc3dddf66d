package schedule_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/internal/schedule"
)

func TestCheck(t *testing.T) {
	for _, spec := range []string{"@every 1s", "*/5 * * * *", "0 */5 * * * *", "@hourly"} {
		if err := schedule.Check(spec); err != nil {
			t.Errorf("Check(%q): %v", spec, err)
		}
	}
	for _, spec := range []string{"", "every minute", "* * *", "@every -1s"} {
		if err := schedule.Check(spec); err == nil {
			t.Errorf("Check(%q) accepted a bad spec", spec)
		}
	}
}

// Runs never overlap, and stop cancels the running one and waits for it.
func TestStartNeverOverlapsAndStopWaits(t *testing.T) {
	var running, overlaps, runs atomic.Int32
	started, canceled := make(chan struct{}), make(chan struct{})
	stop := schedule.Start(context.Background(), "@every 1s", slog.New(slog.DiscardHandler), "job failed",
		func(ctx context.Context) error {
			if running.Add(1) > 1 {
				overlaps.Add(1)
			}
			defer running.Add(-1)
			if runs.Add(1) == 1 {
				close(started)
				<-ctx.Done() // outlives every later tick
				close(canceled)
				return ctx.Err()
			}
			return errors.New("not reached")
		})
	<-started
	// Later ticks come while the first run lasts: each must be skipped. On
	// a loaded machine fewer ticks pass, which only weakens, never fails,
	// the check.
	time.Sleep(2500 * time.Millisecond)
	stop()
	stop()
	select {
	case <-canceled:
	default:
		t.Fatal("stop returned before the running job did")
	}
	if overlaps.Load() != 0 || runs.Load() != 1 {
		t.Fatalf("%d runs, %d overlaps: want one run, the later ticks skipped", runs.Load(), overlaps.Load())
	}
}
