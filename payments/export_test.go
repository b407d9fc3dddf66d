package payments

import "context"

// CrashHooks sets the points where the crash tests stop the process.
type CrashHooks struct {
	AfterClaim, AfterIntent, AfterProvider, AfterCommit func(ctx context.Context, key string)
}

// SetCrashHooks installs h on c (tests only).
func SetCrashHooks(c *Client, h CrashHooks) {
	c.hooks = hooks{afterClaim: h.AfterClaim, afterIntent: h.AfterIntent, afterProvider: h.AfterProvider, afterCommit: h.AfterCommit}
}
