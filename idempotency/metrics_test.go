package idempotency_test

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/memstore"
)

// A scripted scenario, and the exact count of every instrument after it.
func TestMetricsScenario(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var offset atomic.Int64
	store := memstore.New(&memstore.Config{Clock: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }})
	exec, err := idempotency.New(store, &idempotency.Config{MeterProvider: mp, LockTimeout: time.Second, HeartbeatInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	req := func(scope, intent, amount string) idempotency.Request {
		k, _ := idempotency.ComposeKey(scope, "pay", intent)
		fp, _ := idempotency.NewFingerprint().Decimal("amount", amount).Sum()
		return idempotency.Request{Scope: scope, Key: k, Fingerprint: fp}
	}
	ok := func(context.Context) (idempotency.Response, error) { return idempotency.Response{Code: 201}, nil }

	// 3 new keys (2 in scope A, 1 in B), each executed: 3 keys created, 3 actions.
	for _, r := range []idempotency.Request{req("usr_A", "1", "1"), req("usr_A", "2", "1"), req("usr_B", "1", "1")} {
		if _, err := exec.Do(ctx, r, ok); err != nil {
			t.Fatal(err)
		}
	}
	// 2 replays, 1 mismatch.
	for i := 0; i < 2; i++ {
		if res, err := exec.Do(ctx, req("usr_A", "1", "1"), ok); err != nil || !res.Replayed {
			t.Fatal(res, err)
		}
	}
	if _, err := exec.Do(ctx, req("usr_A", "1", "2"), ok); !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatal(err)
	}
	// A crashed holder: 1 in-progress answer, then 1 orphan reclaim (a key
	// created, reclaimed, and an action).
	crashed := req("usr_C", "1", "1")
	if _, err := store.Claim(ctx, idempotency.ClaimParams{Scope: crashed.Scope, Key: crashed.Key, Fingerprint: crashed.Fingerprint,
		LockTimeout: time.Second, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.Do(ctx, crashed, ok); !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatal(err)
	}
	offset.Add(int64(2 * time.Second))
	if res, err := exec.Do(ctx, crashed, ok); err != nil || !res.Reclaimed {
		t.Fatal(res, err)
	}
	// A holder that loses its lease while running: 1 lock timeout, 1
	// transient action (its outcome is not recorded), 1 more key created.
	slow := req("usr_D", "1", "1")
	done := make(chan error)
	started := make(chan struct{})
	go func() {
		_, err := exec.Do(ctx, slow, func(ctx context.Context) (idempotency.Response, error) {
			close(started)
			<-ctx.Done()
			return idempotency.Response{}, context.Cause(ctx)
		})
		done <- err
	}()
	<-started
	offset.Add(int64(2 * time.Second))
	if c, err := store.Claim(ctx, idempotency.ClaimParams{Scope: slow.Scope, Key: slow.Key, Fingerprint: slow.Fingerprint,
		LockTimeout: time.Minute, Retention: time.Hour}); err != nil || c.State != idempotency.ClaimReclaimed {
		t.Fatal(c.State, err)
	}
	if err := <-done; !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]map[attribute.Set]int64{}
	histCount := map[attribute.Set]uint64{}
	var size int64 = -1
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				sums[m.Name] = map[attribute.Set]int64{}
				for _, p := range d.DataPoints {
					sums[m.Name][p.Attributes] = p.Value
				}
			case metricdata.Histogram[float64]:
				if m.Name != idempotency.MetricProcessingDuration {
					t.Errorf("unexpected histogram %s", m.Name)
				}
				for _, p := range d.DataPoints {
					histCount[p.Attributes] = p.Count
				}
			case metricdata.Gauge[int64]:
				if m.Name == idempotency.MetricStoreSize {
					size = d.DataPoints[0].Value
				}
			}
		}
	}
	total := func(name string) (n int64) {
		for _, v := range sums[name] {
			n += v
		}
		return n
	}
	reason := func(r string) int64 {
		return sums[idempotency.MetricDuplicatesBlocked][attribute.NewSet(attribute.String("reason", r))]
	}
	checks := []struct {
		what      string
		got, want int64
	}{
		{"duplicates_blocked{reason=replay}", reason("replay"), 2},
		{"duplicates_blocked{reason=in_progress}", reason("in_progress"), 1},
		{"fingerprint_mismatches", total(idempotency.MetricFingerprintMismatches), 1},
		{"keys_created_per_user", total(idempotency.MetricKeysCreatedPerUser), 4},
		{"keys_created_per_user{scope A}", sums[idempotency.MetricKeysCreatedPerUser][attribute.NewSet(attribute.String("scope_bucket", idempotency.ScopeBucket("usr_A")))], 2},
		{"orphan_reclaims", total(idempotency.MetricOrphanReclaims), 1},
		{"lock_timeouts", total(idempotency.MetricLockTimeouts), 1},
		{"processing_duration_ms{completed}", int64(histCount[attribute.NewSet(attribute.String("outcome", "completed"))]), 4},
		{"processing_duration_ms{transient}", int64(histCount[attribute.NewSet(attribute.String("outcome", "transient"))]), 1},
		{"store_size", size, 5},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
	for set := range sums[idempotency.MetricKeysCreatedPerUser] {
		if v, ok := set.Value("scope_bucket"); !ok || len(v.AsString()) > 2 || set.Len() != 1 {
			t.Errorf("keys_created_per_user carries unbounded attributes: %v", set)
		}
	}
}

// A scope's bucket is FNV-1a (32 bits) modulo ScopeBuckets: dashboards and
// the runbook find a hot scope's bucket by that formula.
func TestScopeBucketIsFNV1a(t *testing.T) {
	for _, scope := range []string{"", "alice", "usr_42", "cus_001", "ü-scope", strings.Repeat("x", 300)} {
		h := fnv.New32a()
		h.Write([]byte(scope))
		if got, want := idempotency.ScopeBucket(scope), strconv.Itoa(int(h.Sum32()%idempotency.ScopeBuckets)); got != want {
			t.Errorf("ScopeBucket(%q) = %s, want %s", scope, got, want)
		}
	}
}
