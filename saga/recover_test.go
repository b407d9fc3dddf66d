package saga_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/saga"
)

// Recover drives sagas left pending forward (an unknown step, re-run with
// its sub-key) and back (a compensation to retry), and leaves alone what
// it cannot: an unregistered definition, a saga with a live lease.
func TestRecoverDrivesStuckSagas(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.remote.fail("charge", saga.SubKey("order-fwd", "charge"), faultUnknown)
	b.remote.fail("refund", saga.CompensationKey("order-back", "charge"),
		faultTransient, faultTransient, faultTransient)
	if _, err := b.orch.Run(ctx, b.params("order-fwd", order{Item: "a", Amount: 1})); !errors.Is(err, saga.ErrPending) {
		t.Fatal(err)
	}
	if _, err := b.orch.Run(ctx, b.params("order-back", order{Item: "b", Amount: 2, FailShip: true})); !errors.Is(err, saga.ErrPending) {
		t.Fatal(err)
	}

	// A process that does not know the checkout saga leaves them be.
	stranger, err := saga.New(b.pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := stranger.Recover(ctx); err != nil || res.Stuck != 2 || res.Unregistered != 2 {
		t.Fatalf("recover without the definition: %+v %v", res, err)
	}

	res, err := b.orch.Recover(ctx)
	if err != nil || res != (saga.RecoverResult{Stuck: 2, Completed: 1, RolledBack: 1}) {
		t.Fatalf("recover: %+v %v", res, err)
	}
	if s := b.state(t, "order-fwd"); s.Status != saga.StatusCompleted {
		t.Fatalf("forward: %s", s.Status)
	}
	if s := b.state(t, "order-back"); s.Status != saga.StatusRolledBack {
		t.Fatalf("back: %s", s.Status)
	}
	if keys := b.remote.applied("charge"); len(keys) != 2 {
		t.Fatalf("charges %v, want one per saga", keys)
	}
	if n := len(b.remote.applied("refund")); n != 1 {
		t.Fatalf("%d refunds, want 1", n)
	}
	// The client's retry gets the answer Recover stored.
	again, err := b.orch.Run(ctx, b.params("order-fwd", order{Item: "a", Amount: 1}))
	if err != nil || !again.Replayed || again.Status != saga.StatusCompleted {
		t.Fatalf("client after recovery: %+v %v", again, err)
	}
	if res, err := b.orch.Recover(ctx); err != nil || res != (saga.RecoverResult{}) {
		t.Fatalf("second recover: %+v %v", res, err)
	}
}

// Recover reads the open sagas a page at a time and stops at its batch:
// the rest are found by the next run, oldest progress first, and none is
// driven twice.
func TestRecoverPagesThroughOpenSagas(t *testing.T) {
	t.Parallel()
	b := setup(t, &saga.Config{LockTimeout: 2 * time.Second, CompensationBackoff: time.Millisecond, RecoverBatch: 3})
	saga.SetRecoverPage(b.orch, 2)
	for i := range 5 {
		key := fmt.Sprintf("order-page-%d", i)
		b.remote.fail("charge", saga.SubKey(key, "charge"), faultUnknown)
		if _, err := b.orch.Run(ctx, b.params(key, order{Item: "p", Amount: i + 1})); !errors.Is(err, saga.ErrPending) {
			t.Fatal(err)
		}
	}
	for run, want := range []saga.RecoverResult{{Stuck: 3, Completed: 3}, {Stuck: 2, Completed: 2}, {}} {
		if res, err := b.orch.Recover(ctx); err != nil || res != want {
			t.Fatalf("recover %d: %+v %v, want %+v", run+1, res, err, want)
		}
	}
	for i := range 5 {
		if s := b.state(t, fmt.Sprintf("order-page-%d", i)); s.Status != saga.StatusCompleted {
			t.Errorf("saga %d: %s", i, s.Status)
		}
	}
	if keys := b.remote.applied("charge"); len(keys) != 5 {
		t.Fatalf("charges %v, want one per saga", keys)
	}
}

// Recoverers and clients at once on the same stuck sagas: each saga is
// driven by one of them at a time, and every effect happens once.
func TestRecoverersAndClientsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.remote.delay = 5 * time.Millisecond
	const sagas = 6
	for i := 0; i < sagas; i++ {
		key := fmt.Sprintf("order-%d", i)
		b.remote.fail("charge", saga.SubKey(key, "charge"), faultUnknown)
		if _, err := b.orch.Run(ctx, b.params(key, order{Item: key, Amount: i + 1, FailShip: i%2 == 1})); !errors.Is(err, saga.ErrPending) {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for r := 0; r < 3; r++ {
		o := b.orchestrator(t, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := o.Recover(ctx); err != nil {
				errs <- err
			}
		}()
	}
	for i := 0; i < sagas; i++ {
		key := fmt.Sprintf("order-%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.orch.Run(ctx, b.params(key, order{Item: key, Amount: i + 1, FailShip: i%2 == 1}))
			if err != nil && !errors.Is(err, idempotency.ErrInProgress) && !errors.Is(err, saga.ErrRolledBack) {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, err := b.orch.Recover(ctx); err != nil { // whatever a busy recoverer skipped
		t.Fatal(err)
	}
	for i := 0; i < sagas; i++ {
		s := b.state(t, fmt.Sprintf("order-%d", i))
		want := saga.StatusCompleted
		if i%2 == 1 {
			want = saga.StatusRolledBack
		}
		if s.Status != want {
			t.Fatalf("saga %d: %s, want %s", i, s.Status, want)
		}
		for _, st := range s.Steps {
			if (st.Kind == saga.Local && st.Attempts > 1) || st.CompensationAttempts > 1 {
				t.Fatalf("saga %d step %s: %d attempts, %d compensations", i, st.Name, st.Attempts, st.CompensationAttempts)
			}
		}
	}
	want := effects{reserve: sagas, charge: sagas, ship: sagas / 2, refund: sagas / 2, unreserve: sagas / 2}
	if got := b.effects(t); got != want {
		t.Fatalf("effects %+v, want %+v", got, want)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(ctx) })
	b := setup(t, &saga.Config{MeterProvider: mp, CompensationBackoff: time.Millisecond})

	if _, err := b.orch.Run(ctx, b.params("order-m1", order{Item: "a", Amount: 1, FailShip: true})); !errors.Is(err, saga.ErrRolledBack) {
		t.Fatal(err)
	}
	b.remote.fail("charge", saga.SubKey("order-m2", "charge"), faultUnknown)
	if _, err := b.orch.Run(ctx, b.params("order-m2", order{Item: "b", Amount: 2})); !errors.Is(err, saga.ErrPending) {
		t.Fatal(err)
	}
	if _, err := b.orch.Recover(ctx); err != nil {
		t.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				got[m.Name+label(dp.Attributes, "step")+label(dp.Attributes, "outcome")] += dp.Value
			}
		}
	}
	for name, want := range map[string]int64{
		saga.MetricStepsExecuted + "/reserve/done":        2,
		saga.MetricStepsExecuted + "/charge/done":         2,
		saga.MetricStepsExecuted + "/charge/unknown":      1,
		saga.MetricStepsExecuted + "/ship/failed":         1,
		saga.MetricStepsExecuted + "/ship/done":           1,
		saga.MetricCompensations + "/charge/compensated":  1,
		saga.MetricCompensations + "/reserve/compensated": 1,
		saga.MetricStuck: 1,
	} {
		if got[name] != want {
			t.Fatalf("%s = %d, want %d (all: %v)", name, got[name], want, got)
		}
	}
}

func label(set attribute.Set, key attribute.Key) string {
	if v, ok := set.Value(key); ok {
		return "/" + v.AsString()
	}
	return ""
}

// Start runs Recover on its schedule until stopped.
func TestStartRecoversOnSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	o := b.orchestrator(t, &saga.Config{RecoverSpec: "@every 1s"})
	b.remote.fail("charge", saga.SubKey("order-s", "charge"), faultUnknown)
	if _, err := b.orch.Run(ctx, b.params("order-s", order{Item: "a", Amount: 1})); !errors.Is(err, saga.ErrPending) {
		t.Fatal(err)
	}
	stop := o.Start(ctx)
	defer stop()
	for deadline := time.Now().Add(2 * time.Minute); b.state(t, "order-s").Status != saga.StatusCompleted; {
		if time.Now().After(deadline) {
			t.Fatalf("not recovered: %+v", b.state(t, "order-s"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if got := b.effects(t); got != completedEffects {
		t.Fatalf("effects %+v", got)
	}
}
