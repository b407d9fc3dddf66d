package saga

// Crash points, for the crash tests.
const (
	PointBeforeCommit = pointBeforeCommit
	PointAfterCommit  = pointAfterCommit
)
