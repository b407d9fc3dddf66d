package payments

import (
	"context"

	"github.com/payonce/payonce/internal/crashpoint"
)

// hooks are points in a charge where tests stop the process (the crash
// fault matrix kills a child process at each of them). All nil outside
// tests; see export_test.go. Each point is also an internal/crashpoint of
// the same name, for the tests of other packages (the reconciler's).
type hooks struct {
	// afterClaim: the key is claimed, nothing else is recorded.
	afterClaim func(ctx context.Context, key string)
	// afterIntent: the intent is committed, the provider not called.
	afterIntent func(ctx context.Context, key string)
	// afterProvider: the provider answered, nothing local recorded it.
	afterProvider func(ctx context.Context, key string)
	// afterCommit: the outcome is committed, the caller has no answer.
	afterCommit func(ctx context.Context, key string)
}

// Crash points, as internal/crashpoint names them.
const (
	pointAfterClaim    = crashpoint.AfterClaim
	pointAfterIntent   = crashpoint.AfterIntent
	pointAfterProvider = crashpoint.AfterProvider
	pointAfterCommit   = crashpoint.AfterCommit
)

func (h hooks) call(point string, f func(context.Context, string), ctx context.Context, key string) {
	if f != nil {
		f(ctx, key)
	}
	crashpoint.Reach(ctx, point, key)
}
