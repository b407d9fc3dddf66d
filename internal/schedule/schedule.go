// Package schedule runs payonce's periodic jobs (the reconciler, saga
// recovery) on cron specs, one way for all of them.
package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
)

// Parser accepts the standard five fields with an optional leading seconds
// field, and descriptors such as "@every 1m" or "@hourly".
var Parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Check returns why spec is not a schedule Parser accepts, or nil. An
// "@every" interval must be positive (the parser alone takes "@every -1s"
// for every second).
func Check(spec string) error {
	if _, err := Parser.Parse(spec); err != nil {
		return err
	}
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		if every, err := time.ParseDuration(d); err == nil && every <= 0 {
			return fmt.Errorf("interval of %q must be positive", spec)
		}
	}
	return nil
}

// Start runs job on spec until ctx ends or stop is called. Runs never
// overlap: a run still going when the next is due skips it. A run's error
// is logged as msg, unless ctx ended. stop cancels the running job's
// context and waits for it to return; it may be called more than once.
// spec must have passed Check: a bad spec schedules nothing.
func Start(ctx context.Context, spec string, logger *slog.Logger, msg string, job func(context.Context) error) (stop func()) {
	c := cron.New(cron.WithParser(Parser), cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	ctx, cancel := context.WithCancel(ctx)
	_, _ = c.AddFunc(spec, func() {
		if err := job(ctx); err != nil && ctx.Err() == nil {
			logger.Error(msg, "err", err)
		}
	})
	c.Start()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-c.Stop().Done()
		})
	}
}
