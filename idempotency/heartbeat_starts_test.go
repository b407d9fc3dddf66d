package idempotency

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// beatStore grants every claim, counts the heartbeats of each key, and
// closes a key's channel in first at its first heartbeat.
type beatStore struct {
	Store // nil: the executor calls none of the others here
	mu    sync.Mutex
	beats map[string]int
	first map[string]chan struct{}
}

func (s *beatStore) Claim(_ context.Context, p ClaimParams) (Claim, error) {
	return Claim{State: ClaimAcquired, Lease: Lease{Scope: p.Scope, Key: p.Key, Version: 1}}, nil
}
func (s *beatStore) Complete(context.Context, Lease, Completion) error { return nil }
func (s *beatStore) Release(context.Context, Lease) error              { return nil }
func (s *beatStore) Heartbeat(_ context.Context, l Lease, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.beats[l.Key]++; s.beats[l.Key] == 1 {
		if ch, ok := s.first[l.Key]; ok {
			close(ch)
		}
	}
	return nil
}

// The executor's one queue of actions waiting for their first heartbeat
// starts each action's heartbeats one interval after its claim, the
// ones that arrive out of order included, never those of actions that
// ended before, and holds no action once they all ended.
func TestHeartbeatQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &beatStore{beats: map[string]int{}, first: map[string]chan struct{}{}}
		for i := range 4 {
			store.first[fmt.Sprintf("long%d", i)] = make(chan struct{})
		}
		e, err := New(store, &Config{LockTimeout: 30 * time.Second, HeartbeatInterval: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		fp := Fingerprint(fmt.Sprintf("%064d", 0))
		do := func(key string, action Action) {
			if _, err := e.Do(context.Background(), Request{Scope: "s", Key: key, Fingerprint: fp}, action); err != nil {
				t.Error(key, err)
			}
		}
		var wg sync.WaitGroup
		// Long actions, one started every 3 s: each waits for its own
		// first heartbeat, which must come 10 s after its claim.
		for i := range 4 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 3 * time.Second)
				started := time.Now()
				key := fmt.Sprintf("long%d", i)
				do(key, func(ctx context.Context) (Response, error) {
					<-store.first[key]
					if took := time.Since(started); took != 10*time.Second {
						t.Errorf("long%d: first heartbeat after %s, want 10s", i, took)
					}
					return Response{Code: 200}, nil
				})
			})
		}
		// Short actions in between, ending before their interval: they
		// enter the queue ahead of later long ones and must leave it.
		for i := range 20 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 500 * time.Millisecond)
				do(fmt.Sprintf("short%d", i), func(ctx context.Context) (Response, error) {
					time.Sleep(time.Duration(i%5) * time.Second)
					return Response{Code: 200}, nil
				})
			})
		}
		wg.Wait()
		// One more, after every other action ended: it must leave the
		// queue as it ends, not when its heartbeat would have been due.
		do("last", func(ctx context.Context) (Response, error) { return Response{Code: 200}, nil })
		synctest.Wait()
		store.mu.Lock()
		defer store.mu.Unlock()
		for i := range 20 {
			if n := store.beats[fmt.Sprintf("short%d", i)]; n != 0 {
				t.Errorf("short%d: %d heartbeats, want none", i, n)
			}
		}
		e.hbStarts.mu.Lock()
		defer e.hbStarts.mu.Unlock()
		if n := len(e.hbStarts.queue); n != 0 {
			t.Errorf("%d actions left in the queue after every action ended", n)
		}
	})
}
