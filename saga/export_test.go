package saga

// Crash points, for the crash tests.
const (
	PointBeforeCommit = pointBeforeCommit
	PointAfterCommit  = pointAfterCommit
)

// SetRecoverPage sets how many open sagas o's Recover reads at a time.
func SetRecoverPage(o *Orchestrator, n int) { o.recoverPage = n }
