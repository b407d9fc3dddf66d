package pgstore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest"
)

// Two instances (two pools, two limiters) share one limit through the
// database, under concurrency.
func TestLimiterSharedAcrossInstances(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := pgtest.PoolURL(t, b.url)
	l1, err := pgstore.NewLimiter(b.pool, 10, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := pgstore.NewLimiter(other, 10, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		l := l1
		if i%2 == 1 {
			l = l2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, after, err := l.Allow(context.Background(), "usr_flood")
			if err != nil {
				t.Error(err)
			}
			if ok {
				allowed.Add(1)
			} else if after <= 0 || after > time.Hour {
				t.Errorf("retry after %s", after)
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 10 {
		t.Fatalf("allowed %d, want 10", allowed.Load())
	}
	if ok, _, err := l1.Allow(context.Background(), "usr_other"); err != nil || !ok {
		t.Fatalf("another scope: %v %v", ok, err)
	}
	for _, bad := range []struct {
		limit  int
		window time.Duration
		field  string
	}{{0, time.Minute, "limit"}, {1, time.Millisecond, "window"}} {
		_, err := pgstore.NewLimiter(b.pool, bad.limit, bad.window)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != bad.field {
			t.Errorf("NewLimiter(%d, %s): %v", bad.limit, bad.window, err)
		}
	}
}
