package reconcile_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/reconcile"
)

// lockedBuffer is a bytes.Buffer safe for the writes of concurrent loggers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Without Config.Logger, a run's summary reaches slog.Default: a service
// that configured its logger sees the reconciler without wiring it again.
// Not parallel: it swaps the process's default logger.
func TestRunLogsToSlogDefaultByDefault(t *testing.T) {
	pool := pgtest.Pool(t)
	var buf lockedBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	r, err := reconcile.New(pool, nil, &reconcile.Config{Instance: "logs-by-default"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.Lines(buf.String()) {
		if strings.Contains(l, `msg="reconcile: run"`) {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, "examined=0") || !strings.Contains(line, "run="+strconv.FormatInt(rep.RunID, 10)) {
		t.Fatalf("no run summary for run %d in slog.Default's output:\n%s", rep.RunID, buf.String())
	}
}
