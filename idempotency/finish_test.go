package idempotency

import (
	"context"
	"errors"
	"testing"
	"time"
)

type finishKey struct{}

// A finishing context outlives its request's cancellation and keeps its
// values; its deadline is at least FinishTimeout and at most an eighth
// more after the call started; calls close in time share one deadline, a
// call later than the shared deadline allows gets a new one; and it ends
// (DeadlineExceeded), with what was derived from it, no earlier than its
// deadline.
func TestFinishContext(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	f := &finishDeadlines{timeout: timeout}
	req, cancel := context.WithCancel(context.WithValue(context.Background(), finishKey{}, "span-7"))
	cancel() // the request is gone; recording its outcome is not

	start := time.Now()
	a := &finishCtx{Context: f.get(start), values: req}
	if a.Err() != nil {
		t.Fatalf("finishing context ended with its request: %v", a.Err())
	}
	if got := a.Value(finishKey{}); got != "span-7" {
		t.Fatalf("the request's value: %v, want span-7", got)
	}
	dl, ok := a.Deadline()
	if !ok || dl.Before(start.Add(timeout)) || dl.After(start.Add(timeout+timeout/8)) {
		t.Fatalf("deadline %v after the start, want within [%v, %v]", dl.Sub(start), timeout, timeout+timeout/8)
	}
	if b := f.get(start.Add(timeout / 16)); b != a.Context {
		t.Fatal("a call within the shared deadline's slack got a deadline of its own")
	}
	later := start.Add(timeout / 4)
	c := f.get(later)
	if c == a.Context {
		t.Fatal("a call later than the shared deadline allows shares it")
	}
	if dl, _ := c.Deadline(); dl.Before(later.Add(timeout)) {
		t.Fatalf("the later call's deadline is %v after it, want at least %v", dl.Sub(later), timeout)
	}

	derived, stop := context.WithCancel(a)
	defer stop()
	fired := make(chan struct{})
	defer context.AfterFunc(a, func() { close(fired) })()
	<-derived.Done()
	<-fired
	if time.Now().Before(start.Add(timeout)) {
		t.Fatalf("ended %v after the start, before its %v", time.Since(start), timeout)
	}
	if !errors.Is(a.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(derived), context.DeadlineExceeded) {
		t.Fatalf("ended with %v, derived %v; want DeadlineExceeded", a.Err(), context.Cause(derived))
	}
}

// A store may bound a call by the deadline alone only when nothing can
// cancel its context before: the executor's finishing context, and what
// only adds values to it, but not what adds a cancellation or a deadline
// of its own, nor any other context.
func TestEndsOnlyAtDeadline(t *testing.T) {
	t.Parallel()
	f := &finishDeadlines{timeout: time.Minute}
	fin := &finishCtx{Context: f.get(time.Now()), values: context.Background()}
	cancelled, cancel := context.WithCancel(fin)
	defer cancel()
	shorter, cancel2 := context.WithTimeout(fin, time.Second)
	defer cancel2()
	other, cancel3 := context.WithDeadline(context.Background(), time.Now().Add(time.Minute))
	defer cancel3()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want bool
	}{
		{"finishing", fin, true},
		{"finishing with a value (a span)", context.WithValue(fin, finishKey{}, "span-7"), true},
		{"finishing with its own cancellation", cancelled, false},
		{"finishing with a shorter deadline", shorter, false},
		{"a deadline of its own", other, false},
		{"background", context.Background(), false},
	} {
		if got := EndsOnlyAtDeadline(c.ctx); got != c.want {
			t.Errorf("%s: EndsOnlyAtDeadline = %v, want %v", c.name, got, c.want)
		}
	}
}
