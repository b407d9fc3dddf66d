package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/redisstore/redistest"
)

// On a Cluster, a scope's keys (its records and its due index) share one
// slot, scopes spread over every primary, and the store works across
// them: claims, replays, and a prune that finds the registry wherever it
// lives and the scopes' records on their own primaries.
func TestClusterScopesSpread(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	b := setupCluster(t, nil)
	cluster := b.rdb.(*redis.ClusterClient)
	const scopes = 48
	done := idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 201, Body: []byte("ok")}, Retention: time.Hour}
	var all []idempotency.ClaimParams
	for i := range scopes {
		scope := fmt.Sprintf("usr_%02d", i)
		for _, intent := range []string{"a", "b"} {
			p := params(t, scope, intent)
			c, err := b.store.Claim(ctx, p)
			if err != nil || c.State != idempotency.ClaimAcquired {
				t.Fatalf("claim %s/%s: %v %v", scope, intent, c.State, err)
			}
			if err := b.store.Complete(ctx, c.Lease, done); err != nil {
				t.Fatalf("complete %s/%s: %v", scope, intent, err)
			}
			all = append(all, p)
		}
		// The scope's keys, as the store wrote them, share a slot.
		keys, err := scanAll(ctx, cluster, b.prefix+":{"+scope+"}:*")
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) != 3 { // two records and the due index
			t.Fatalf("scope %s has keys %v, want two records and its due index", scope, keys)
		}
		slot := -1
		for _, k := range keys {
			s, err := cluster.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if slot >= 0 && int(s) != slot {
				t.Fatalf("scope %s: key %q in slot %d, another in %d", scope, k, s, slot)
			}
			slot = int(s)
		}
	}
	// Every primary holds records.
	var primaries atomic.Int64
	err := cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		n := 0
		iter := node.Scan(ctx, 0, b.prefix+":{*}:r:*", 1000).Iterator()
		for iter.Next(ctx) {
			n++
		}
		if n == 0 {
			return fmt.Errorf("primary %s holds no record of %d scopes", node.Options().Addr, scopes)
		}
		primaries.Add(1)
		return iter.Err()
	})
	if err != nil || primaries.Load() != 3 {
		t.Fatalf("primaries with records: %d, %v", primaries.Load(), err)
	}
	for _, p := range all {
		c, err := b.store.Claim(ctx, p)
		if err != nil || c.State != idempotency.ClaimReplay || string(c.Record.Response.Body) != "ok" {
			t.Fatalf("replay of %s: %v %v", p.Scope, c.State, err)
		}
	}
	// Past their expiry, one prune takes every record of every scope.
	b.advance(t, 2*time.Hour)
	n, err := b.store.Prune(ctx, 10*len(all))
	if err != nil || n != len(all) {
		t.Fatalf("prune: %d, %v; want %d", n, err, len(all))
	}
	for _, p := range all {
		if _, err := b.store.Get(ctx, p.Scope, p.Key); !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatalf("get %s after the prune: %v, want ErrNotFound", p.Scope, err)
		}
	}
	if n, err := b.store.Prune(ctx, 10); err != nil || n != 0 {
		t.Fatalf("second prune: %d, %v", n, err)
	}
}

// scanAll returns the keys matching pattern on every primary.
func scanAll(ctx context.Context, cluster *redis.ClusterClient, pattern string) ([]string, error) {
	var (
		mu   sync.Mutex // ForEachMaster runs on the primaries at once
		keys []string
	)
	err := cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			keys = append(keys, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	})
	return keys, err
}

// The harness's shared cluster: three primaries, each with its replica.
func TestClusterHarness(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	rdb := redistest.ClusterClient(t)
	var primaries atomic.Int64
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "connected_slaves:1\r\n") {
			return fmt.Errorf("primary %s: %s", node.Options().Addr, info)
		}
		primaries.Add(1)
		return nil
	})
	if err != nil || primaries.Load() != 3 {
		t.Fatalf("primaries: %d, %v", primaries.Load(), err)
	}
}

// Clusters of fewer than 3 primaries (which redis-cli --cluster create
// refuses; the bench's one-primary line uses one): every slot is served,
// and the store claims, completes and replays across them.
func TestClusterOfFewPrimaries(t *testing.T) {
	for _, primaries := range []int{1, 2} {
		t.Run(fmt.Sprint(primaries), func(t *testing.T) {
			t.Parallel()
			ctx := ctxFor(t)
			c := redistest.NewCluster(t, primaries, 0)
			rdb := c.Client()
			t.Cleanup(func() { _ = rdb.Close() })
			var masters atomic.Int64
			if err := rdb.ForEachMaster(ctx, func(context.Context, *redis.Client) error { masters.Add(1); return nil }); err != nil || masters.Load() != int64(primaries) {
				t.Fatalf("primaries: %d, %v", masters.Load(), err)
			}
			b := setupOn(t, rdb, nil)
			done := idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 201, Body: []byte("ok")}, Retention: time.Hour}
			for i := range 16 {
				p := params(t, fmt.Sprintf("usr_%02d", i), "a")
				cl, err := b.store.Claim(ctx, p)
				if err != nil || cl.State != idempotency.ClaimAcquired {
					t.Fatalf("claim %d: %v %v", i, cl.State, err)
				}
				if err := b.store.Complete(ctx, cl.Lease, done); err != nil {
					t.Fatalf("complete %d: %v", i, err)
				}
				again, err := b.store.Claim(ctx, p)
				if err != nil || again.State != idempotency.ClaimReplay {
					t.Fatalf("claim %d again: %v %v", i, again.State, err)
				}
			}
		})
	}
}
