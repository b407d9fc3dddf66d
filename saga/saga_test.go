package saga_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/saga"
)

var ctx = context.Background()

func TestRunCompletes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := b.params("order-1", order{Item: "book", Amount: 1200})

	res, err := b.orch.Run(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != saga.StatusCompleted || res.Replayed || res.Saga != "checkout" {
		t.Fatalf("result: %+v", res)
	}
	var out map[string]string
	if err := json.Unmarshal(res.Output, &out); err != nil || out["shipment"] != saga.SubKey("order-1", "ship") {
		t.Fatalf("output %s (%v): want the last step's", res.Output, err)
	}
	if got := b.effects(t); got != completedEffects {
		t.Fatalf("effects %+v, want %+v", got, completedEffects)
	}
	if keys := b.remote.applied("charge"); len(keys) != 1 || keys[0] != saga.SubKey("order-1", "charge") {
		t.Fatalf("charges at the remote: %v", keys)
	}

	s := b.state(t, "order-1")
	if s.Status != saga.StatusCompleted || s.FinishedAt.IsZero() || s.Name != "checkout" ||
		!equalStatuses(stepStatuses(s), saga.StepDone, saga.StepDone, saga.StepDone) {
		t.Fatalf("state: %+v", s)
	}
	for _, st := range s.Steps {
		if st.Attempts != 1 || st.Output == nil || st.Error != "" || st.StartedAt.IsZero() || st.FinishedAt.IsZero() {
			t.Fatalf("step %s: %+v", st.Name, st)
		}
	}
	var in order
	if err := json.Unmarshal(s.Input, &in); err != nil || in.Item != "book" || in.Amount != 1200 {
		t.Fatalf("stored input %s (%v)", s.Input, err)
	}

	again, err := b.orch.Run(ctx, p)
	if err != nil || !again.Replayed || !bytes.Equal(again.Body, res.Body) || !bytes.Equal(again.Output, res.Output) {
		t.Fatalf("replay: %+v %v, want the first answer %s", again, err, res.Body)
	}
	if got := b.effects(t); got != completedEffects {
		t.Fatalf("effects after the replay %+v", got)
	}
}

// The reference scenario 8: step 2 fails transiently; the retry resumes
// from step 2 and does not repeat step 1.
func TestScenario8RetryResumesAtFailedStep(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := b.params("order-8", order{Item: "lamp", Amount: 4500})
	charge := saga.SubKey("order-8", "charge")
	b.remote.fail("charge", charge, faultTransient)

	_, err := b.orch.Run(ctx, p)
	var pending *saga.PendingError
	if !errors.As(err, &pending) || !errors.Is(err, saga.ErrPending) || pending.Step != "charge" || pending.Unknown {
		t.Fatalf("first run: %v, want pending at charge", err)
	}
	s := b.state(t, "order-8")
	if s.Status != saga.StatusRunning || !equalStatuses(stepStatuses(s), saga.StepDone, saga.StepPending, saga.StepPending) ||
		s.Steps[1].Error == "" {
		t.Fatalf("state after the transient failure: %+v", s)
	}

	res, err := b.orch.Run(ctx, p)
	if err != nil || res.Status != saga.StatusCompleted || res.Replayed {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if got := b.effects(t); got != completedEffects {
		t.Fatalf("effects %+v, want %+v (step 1 once)", got, completedEffects)
	}
	if j := b.journal.list(); !reflect.DeepEqual(j, []string{"reserve", "charge", "ship"}) {
		t.Fatalf("calls that succeeded: %v, want step 1 once", j)
	}
	s = b.state(t, "order-8")
	if s.Steps[0].Attempts != 1 || s.Steps[1].Attempts != 2 || s.Steps[2].Attempts != 1 {
		t.Fatalf("attempts: %d %d %d, want 1 2 1", s.Steps[0].Attempts, s.Steps[1].Attempts, s.Steps[2].Attempts)
	}
	if n := b.remote.callsOf("charge", charge); n != 2 {
		t.Fatalf("charge called %d times with its sub-key, want 2 (the same key on the retry)", n)
	}
}

func TestPermanentFailureCompensatesInReverse(t *testing.T) {
	t.Parallel()
	t.Run("at step 2", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		p := b.params("order-2", order{Item: "pen", Amount: 300})
		b.remote.fail("charge", saga.SubKey("order-2", "charge"), faultPermanent)

		res, err := b.orch.Run(ctx, p)
		var rb *saga.RolledBackError
		if !errors.As(err, &rb) || rb.Step != "charge" || !strings.Contains(rb.Reason, "declined") {
			t.Fatalf("run: %v, want rolled back at charge", err)
		}
		if res.Status != saga.StatusRolledBack || res.FailedStep != "charge" || res.Output != nil {
			t.Fatalf("result: %+v", res)
		}
		if got, want := b.effects(t), (effects{reserve: 1, unreserve: 1}); got != want {
			t.Fatalf("effects %+v, want %+v (the failed charge is not refunded)", got, want)
		}
		s := b.state(t, "order-2")
		if !equalStatuses(stepStatuses(s), saga.StepCompensated, saga.StepFailed, saga.StepPending) {
			t.Fatalf("steps: %v", stepStatuses(s))
		}
	})
	t.Run("at step 3", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		p := b.params("order-3", order{Item: "pen", Amount: 300, FailShip: true})

		res, err := b.orch.Run(ctx, p)
		if !errors.Is(err, saga.ErrRolledBack) || res.Status != saga.StatusRolledBack || res.FailedStep != "ship" ||
			res.Reason != "address undeliverable" {
			t.Fatalf("run: %+v %v", res, err)
		}
		if j := b.journal.list(); !reflect.DeepEqual(j, []string{"reserve", "charge", "refund", "unreserve"}) {
			t.Fatalf("calls: %v, want the compensations in reverse order", j)
		}
		if got := b.effects(t); got != rolledBackEffects {
			t.Fatalf("effects %+v, want %+v", got, rolledBackEffects)
		}
		if keys := b.remote.applied("refund"); len(keys) != 1 || keys[0] != saga.CompensationKey("order-3", "charge") {
			t.Fatalf("refunds: %v, want one with the compensation's sub-key", keys)
		}
		s := b.state(t, "order-3")
		if !equalStatuses(stepStatuses(s), saga.StepCompensated, saga.StepCompensated, saga.StepFailed) ||
			s.Steps[1].CompensationAttempts != 1 || s.Steps[1].CompensatedAt.IsZero() {
			t.Fatalf("steps: %+v", s.Steps)
		}
		again, err := b.orch.Run(ctx, p)
		if !errors.Is(err, saga.ErrRolledBack) || !again.Replayed || !bytes.Equal(again.Body, res.Body) {
			t.Fatalf("replay: %+v %v", again, err)
		}
	})
}

// A remote step whose outcome is unknown stays UNKNOWN, the caller is
// told the outcome is pending, and the retry re-runs it with the same
// sub-key: one effect.
func TestUnknownOutcomeRerunsWithSameSubKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := b.params("order-u", order{Item: "desk", Amount: 25000})
	charge := saga.SubKey("order-u", "charge")
	b.remote.fail("charge", charge, faultUnknown, faultTransient)

	for i, wantStatus := range []saga.StepStatus{saga.StepUnknown, saga.StepUnknown} {
		_, err := b.orch.Run(ctx, p)
		var pending *saga.PendingError
		if !errors.As(err, &pending) || pending.Step != "charge" || !pending.Unknown {
			t.Fatalf("run %d: %v, want the charge's outcome pending", i, err)
		}
		s := b.state(t, "order-u")
		if s.Status != saga.StatusRunning || s.Steps[1].Status != wantStatus || s.Steps[0].Status != saga.StepDone {
			t.Fatalf("run %d: state %+v", i, s)
		}
	}
	// The lease was released: the retry runs at once, it is not refused
	// as in progress.
	res, err := b.orch.Run(ctx, p)
	if err != nil || res.Status != saga.StatusCompleted {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if keys := b.remote.applied("charge"); len(keys) != 1 || keys[0] != charge {
		t.Fatalf("charges: %v, want one, with the step's sub-key", keys)
	}
	if n := b.remote.callsOf("charge", charge); n != 3 {
		t.Fatalf("%d calls with the sub-key, want 3", n)
	}
	if got := b.effects(t); got != completedEffects {
		t.Fatalf("effects %+v", got)
	}
	var out struct {
		ChargeID string `json:"charge_id"`
	}
	s := b.state(t, "order-u")
	if err := json.Unmarshal(s.Steps[1].Output, &out); err != nil || out.ChargeID != "charge_1" {
		t.Fatalf("charge output %s: want the effect the unknown call had", s.Steps[1].Output)
	}
}

func TestCompensation(t *testing.T) {
	t.Parallel()
	t.Run("fails permanently: needs review", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		p := b.params("order-r", order{Item: "sofa", Amount: 90000, FailShip: true})
		b.remote.fail("refund", saga.CompensationKey("order-r", "charge"), faultPermanent)

		res, err := b.orch.Run(ctx, p)
		var nr *saga.NeedsReviewError
		if !errors.As(err, &nr) || res.Status != saga.StatusNeedsReview {
			t.Fatalf("run: %+v %v, want needs review", res, err)
		}
		for _, want := range []string{"compensation of step charge failed", "declined", "address undeliverable"} {
			if !strings.Contains(nr.Reason, want) || !strings.Contains(res.Reason, want) {
				t.Fatalf("reason %q lacks %q", nr.Reason, want)
			}
		}
		s := b.state(t, "order-r")
		if s.Status != saga.StatusNeedsReview || s.FinishedAt.IsZero() ||
			!equalStatuses(stepStatuses(s), saga.StepDone, saga.StepNeedsReview, saga.StepFailed) || s.Steps[1].Error == "" {
			t.Fatalf("state: %+v", s)
		}
		// A human decides: nothing more is compensated, retries replay.
		again, err := b.orch.Run(ctx, p)
		if !errors.Is(err, saga.ErrNeedsReview) || !again.Replayed || !bytes.Equal(again.Body, res.Body) {
			t.Fatalf("replay: %+v %v", again, err)
		}
		if got, want := b.effects(t), (effects{reserve: 1, charge: 1}); got != want {
			t.Fatalf("effects %+v, want %+v", got, want)
		}
	})
	t.Run("retried until done", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil) // CompensationAttempts 3
		p := b.params("order-t", order{Item: "sofa", Amount: 90000, FailShip: true})
		refund := saga.CompensationKey("order-t", "charge")
		b.remote.fail("refund", refund, faultTransient, faultUnknown, faultTransient, faultTransient)

		_, err := b.orch.Run(ctx, p)
		var pending *saga.PendingError
		if !errors.As(err, &pending) || !pending.Compensating || pending.Step != "charge" {
			t.Fatalf("run: %v, want the refund pending", err)
		}
		if s := b.state(t, "order-t"); s.Status != saga.StatusCompensating || s.Steps[1].Status != saga.StepCompensating {
			t.Fatalf("state: %+v", s)
		}
		res, err := b.orch.Run(ctx, p)
		if !errors.Is(err, saga.ErrRolledBack) || res.Status != saga.StatusRolledBack {
			t.Fatalf("retry: %+v %v", res, err)
		}
		if got := b.effects(t); got != rolledBackEffects {
			t.Fatalf("effects %+v, want %+v", got, rolledBackEffects)
		}
		if n := b.remote.callsOf("refund", refund); n != 5 {
			t.Fatalf("refund called %d times with its key, want 5", n)
		}
	})
}

// 16 callers run one key at once: one drives the saga, the others are
// told it is in progress and then get its answer; each step runs once.
func TestConcurrentRunsExecuteEachStepOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.remote.delay = 20 * time.Millisecond
	p := b.params("order-c", order{Item: "chair", Amount: 7000})

	const n = 16
	results := make([]saga.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			for deadline := time.Now().Add(2 * time.Minute); ; {
				results[i], errs[i] = b.orch.Run(ctx, p)
				if !errors.Is(errs[i], idempotency.ErrInProgress) || time.Now().After(deadline) {
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	first := 0
	for i := 0; i < n; i++ {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if !results[i].Replayed {
			first++
		}
		if !bytes.Equal(results[i].Body, results[0].Body) {
			t.Fatalf("caller %d got %s, caller 0 %s", i, results[i].Body, results[0].Body)
		}
	}
	if first != 1 {
		t.Fatalf("%d callers ran the saga, want 1", first)
	}
	if got := b.effects(t); got != completedEffects {
		t.Fatalf("effects %+v, want %+v", got, completedEffects)
	}
	if calls := b.remote.callsOf("charge", saga.SubKey("order-c", "charge")); calls != 1 {
		t.Fatalf("charge called %d times", calls)
	}
	for _, st := range b.state(t, "order-c").Steps {
		if st.Attempts != 1 {
			t.Fatalf("step %s ran %d times", st.Name, st.Attempts)
		}
	}
}

func TestFingerprintMismatchChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	other := saga.Definition{Name: "other", Steps: []saga.Step{{Name: "noop", Kind: saga.Local,
		Action: func(context.Context, *saga.Call) (any, error) { return nil, nil }}}}
	if err := b.orch.Register(other); err != nil {
		t.Fatal(err)
	}
	p := b.params("order-f", order{Item: "mug", Amount: 900})
	b.remote.fail("charge", saga.SubKey("order-f", "charge"), faultTransient)

	refused := func(when string) {
		t.Helper()
		before := b.state(t, "order-f")
		beforeEffects := b.effects(t)
		for _, q := range []saga.RunParams{
			b.params("order-f", order{Item: "mug", Amount: 901}),
			{Saga: "other", Scope: scope, Key: "order-f", Input: order{Item: "mug", Amount: 900}},
		} {
			if _, err := b.orch.Run(ctx, q); !errors.Is(err, idempotency.ErrFingerprintMismatch) {
				t.Fatalf("%s: %s with other fields: %v, want a mismatch", when, q.Saga, err)
			}
		}
		if after := b.state(t, "order-f"); !reflect.DeepEqual(after, before) {
			t.Fatalf("%s: the refusal changed the saga:\n%+v\n%+v", when, before, after)
		}
		if got := b.effects(t); got != beforeEffects {
			t.Fatalf("%s: the refusal had effects: %+v, before %+v", when, got, beforeEffects)
		}
	}

	if _, err := b.orch.Run(ctx, p); !errors.Is(err, saga.ErrPending) {
		t.Fatalf("first run: %v", err)
	}
	refused("pending")
	// Field order and whitespace are not significant.
	same := p
	same.Input = []byte(` {"amount": 900, "item": "mug"} `)
	first, err := b.orch.Run(ctx, same)
	if err != nil || first.Status != saga.StatusCompleted {
		t.Fatalf("resume: %+v %v", first, err)
	}
	refused("completed")
	again, err := b.orch.Run(ctx, p)
	if err != nil || !again.Replayed || !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("replay after the refusals: %+v %v", again, err)
	}
}

// A finished saga answers every retry with its stored answer, byte for
// byte, whatever its outcome.
func TestReplayIsByteForByte(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.remote.fail("refund", saga.CompensationKey("order-b3", "charge"), faultPermanent)
	for _, tc := range []struct {
		key  string
		o    order
		want saga.Status
	}{
		{"order-b1", order{Item: "a", Amount: 1}, saga.StatusCompleted},
		{"order-b2", order{Item: "b", Amount: 2, FailShip: true}, saga.StatusRolledBack},
		{"order-b3", order{Item: "c", Amount: 3, FailShip: true}, saga.StatusNeedsReview},
	} {
		p := b.params(tc.key, tc.o)
		first, ferr := b.orch.Run(ctx, p)
		if first.Status != tc.want || first.Replayed || len(first.Body) == 0 {
			t.Fatalf("%s: %+v %v", tc.key, first, ferr)
		}
		// From another process, too.
		for _, o := range []*saga.Orchestrator{b.orch, b.orchestrator(t, nil)} {
			again, err := o.Run(ctx, p)
			if !again.Replayed || !bytes.Equal(again.Body, first.Body) || (err == nil) != (ferr == nil) ||
				(err != nil && err.Error() != ferr.Error()) {
				t.Fatalf("%s: replay %+v %v, first %+v %v", tc.key, again, err, first, ferr)
			}
			again.Replayed = false
			if !reflect.DeepEqual(again, first) {
				t.Fatalf("%s: replayed result %+v, first %+v", tc.key, again, first)
			}
		}
	}
}

func TestDefinitionChangedStopsTheSaga(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := b.params("order-d", order{Item: "cup", Amount: 500})
	b.remote.fail("charge", saga.SubKey("order-d", "charge"), faultUnknown)
	if _, err := b.orch.Run(ctx, p); !errors.Is(err, saga.ErrPending) {
		t.Fatal(err)
	}
	changed, err := saga.New(b.pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	def := checkout(b.remote.URL(), nil)
	def.Steps = def.Steps[:2]
	if err := changed.Register(def); err != nil {
		t.Fatal(err)
	}
	before := b.state(t, "order-d")
	if _, err := changed.Run(ctx, p); !errors.Is(err, saga.ErrDefinitionChanged) {
		t.Fatalf("run with other steps: %v", err)
	}
	if after := b.state(t, "order-d"); !reflect.DeepEqual(after, before) {
		t.Fatalf("the refused run changed the saga")
	}
	if res, err := b.orch.Run(ctx, p); err != nil || res.Status != saga.StatusCompleted {
		t.Fatalf("with the original definition: %+v %v", res, err)
	}
}

// Once a finished saga's idempotency record has expired, a retry gets the
// same answer again, rebuilt from the saga's rows, and a request with
// other fields is still refused: the saga is never run again.
func TestExpiredRecordAnswersTheSameAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := b.params("order-e", order{Item: "vase", Amount: 3100, FailShip: true})
	first, err := b.orch.Run(ctx, p)
	if !errors.Is(err, saga.ErrRolledBack) {
		t.Fatal(err)
	}
	expire := func() {
		t.Helper()
		if _, err := b.pool.Exec(ctx, `UPDATE idempotency_store SET expires_at = now() - interval '1 second'`); err != nil {
			t.Fatal(err)
		}
	}
	expire()
	other := b.params("order-e", order{Item: "vase", Amount: 1})
	if _, err := b.orch.Run(ctx, other); !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("other fields after expiry: %v", err)
	}
	expire()
	again, err := b.orch.Run(ctx, p)
	if !errors.Is(err, saga.ErrRolledBack) || !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("after expiry: %+v %v, want %s", again, err, first.Body)
	}
	if got := b.effects(t); got != rolledBackEffects {
		t.Fatalf("effects %+v, want %+v", got, rolledBackEffects)
	}
	if replay, err := b.orch.Run(ctx, p); !errors.Is(err, saga.ErrRolledBack) || !replay.Replayed || !bytes.Equal(replay.Body, first.Body) {
		t.Fatalf("replay: %+v %v", replay, err)
	}
}

// NothingToUndo from a compensation marks its step COMPENSATED with the
// note; from an action it is a bug, and fails the step for good.
func TestNothingToUndo(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	err := b.orch.Register(saga.Definition{Name: "undo", Steps: []saga.Step{
		{Name: "hold", Kind: saga.Local,
			Action: func(context.Context, *saga.Call) (any, error) { return "held", nil },
			Compensate: func(context.Context, *saga.Call) error {
				return saga.NothingToUndo("the hold lapsed by itself")
			}},
		{Name: "misuse", Kind: saga.Remote,
			Action: func(context.Context, *saga.Call) (any, error) {
				return nil, saga.NothingToUndo("not an action's answer")
			}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.orch.Run(ctx, saga.RunParams{Saga: "undo", Scope: scope, Key: "undo-1", Input: nil})
	if !errors.Is(err, saga.ErrRolledBack) || res.FailedStep != "misuse" || !strings.Contains(res.Reason, "only a compensation may") {
		t.Fatalf("run: %+v %v", res, err)
	}
	if st := res.Steps[0]; st.Status != saga.StepCompensated || st.Note != "the hold lapsed by itself" || st.Error != "" {
		t.Fatalf("hold: %+v", st)
	}
	if st := b.state(t, "undo-1").Steps[0]; st.Note != "the hold lapsed by itself" || st.CompensatedAt.IsZero() {
		t.Fatalf("stored hold: %+v", st)
	}
}

// Hooks see each step's commit: BeforeCommit with the outcome decided and
// not committed, AfterCommit once committed, in step order, with the
// step's key.
func TestHooksAroundEachStepsCommit(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	record := func(when string) func(string) {
		return func(key string) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, when+" "+key)
		}
	}
	b := setup(t, &saga.Config{LockTimeout: 2 * time.Second, CompensationBackoff: time.Millisecond,
		Hooks: &saga.Hooks{BeforeCommit: record("before"), AfterCommit: record("after")}})
	if _, err := b.orch.Run(ctx, b.params("order-h", order{Item: "book", Amount: 1200})); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, step := range []string{"reserve", "charge", "ship"} {
		k := saga.SubKey("order-h", step)
		want = append(want, "before "+k, "after "+k)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, want) {
		t.Fatalf("hooks saw\n%q\nwant\n%q", seen, want)
	}
}

// Config.TracerProvider reaches the saga's executor: an idempotency.Do
// span for the run and one for its replay, holding the saga's record key
// only as its short hash.
func TestTracerProvider(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	b := setup(t, &saga.Config{LockTimeout: 2 * time.Second, CompensationBackoff: time.Millisecond,
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	p := b.params("order-traced-5e1c", order{Item: "book", Amount: 1200})
	for range 2 {
		if res, err := b.orch.Run(ctx, p); err != nil || res.Status != saga.StatusCompleted {
			t.Fatalf("Run: %+v %v", res, err)
		}
	}
	key, err := idempotency.ComposeKey(scope, "saga", p.Key)
	if err != nil {
		t.Fatal(err)
	}
	spans := 0
	for _, s := range rec.Ended() {
		if s.Name() != "idempotency.Do" {
			continue
		}
		spans++
		hashed := false
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), p.Key) {
				t.Errorf("attribute %s holds the saga's key", kv.Key)
			}
			hashed = hashed || (string(kv.Key) == idempotency.AttrKeyHash && kv.Value.AsString() == idempotency.ShortHash(key))
		}
		if !hashed {
			t.Errorf("span without the record key's short hash: %v", s.Attributes())
		}
	}
	if spans != 2 {
		t.Fatalf("%d idempotency.Do spans, want 2 (the run and its replay)", spans)
	}
}
