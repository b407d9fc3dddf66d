package idempotency

import (
	"testing"
	"testing/synctest"
	"time"
)

// An entry past its end leaves memory even if nobody asks for it again:
// nothing of an erased record outlives MaxAge in a cache whose store
// reports no changes.
func TestReplayCacheSweepsIdleEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := (&ReplayCache{MaxAge: 5 * time.Second}).withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		c, err := newReplayCache(cfg)
		if err != nil {
			t.Fatal(err)
		}
		fill := func(key string) {
			now := time.Now()
			c.put(Request{Scope: "cus_a", Key: key}, Claim{State: ClaimReplay, StoreNow: now,
				Record: Record{Status: StatusCompleted, Response: &Response{Code: 201, Body: []byte("secret")},
					ExpiresAt: now.Add(time.Hour)}}, now, c.generation())
		}
		held := func() (int, int) {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.lru.Len(), len(c.byHash)
		}
		fill("cus_a_k1")
		time.Sleep(2 * time.Second)
		fill("cus_a_k2")
		if n, h := held(); n != 2 || h != 2 {
			t.Fatalf("held %d entries, %d hashes", n, h)
		}
		time.Sleep(3 * time.Second) // k1's MaxAge
		synctest.Wait()
		if n, h := held(); n != 1 || h != 1 {
			t.Fatalf("after k1's MaxAge: held %d entries, %d hashes", n, h)
		}
		time.Sleep(2 * time.Second) // k2's
		synctest.Wait()
		if n, h := held(); n != 0 || h != 0 {
			t.Fatalf("after k2's MaxAge: held %d entries, %d hashes", n, h)
		}
		c.mu.Lock()
		armed := c.sweep != nil
		c.mu.Unlock()
		if armed {
			t.Fatal("the sweep stays armed over an empty cache")
		}
	})
}
