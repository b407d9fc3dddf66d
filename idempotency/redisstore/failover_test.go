package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/redisstore"
	"github.com/payonce/payonce/idempotency/redisstore/redistest"
)

// TestFailover storms a 3-primary, 3-replica Cluster with claims on
// shared keys, all served by one primary, from many goroutines; SIGKILLs
// that primary once a third of the keys have been executed; waits for the
// cluster to promote its replica; restarts the killed node (it rejoins as
// the new primary's replica, without which no write on its slots could be
// acknowledged by a replica again); every caller retries until each key is
// done. It counts the executions per key, without and with WaitReplicas.
//
// Without WaitReplicas a claim the primary acknowledged but had not yet
// sent to its replica is lost with it, and a second caller executes the
// key again: the test reports such duplicates and does not require them
// (a run may have none). With WaitReplicas=1 it requires none: see the
// package documentation, Durability.
//
// It takes about half a minute per mode on a loaded machine: run it with
//
//	PAYONCE_REDIS_FAILOVER=1 go test -race -count=1 -run TestFailover -v ./idempotency/redisstore
func TestFailover(t *testing.T) {
	if os.Getenv("PAYONCE_REDIS_FAILOVER") != "1" {
		t.Skip("set PAYONCE_REDIS_FAILOVER=1 to run the failover storm (it starts and kills its own cluster)")
	}
	for _, mode := range []struct {
		name string
		cfg  redisstore.Config
	}{
		{"NoWait", redisstore.Config{}},
		{"WaitReplicas1", redisstore.Config{WaitReplicas: 1, WaitTimeout: time.Second}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			dups, keys, execs := failoverStorm(t, mode.cfg)
			t.Logf("FIGURES %s: keys %d, executions %d, keys executed twice or more %d", mode.name, keys, execs, dups)
			if mode.cfg.WaitReplicas > 0 && dups > 0 {
				t.Fatalf("%d keys executed more than once with WaitReplicas=%d", dups, mode.cfg.WaitReplicas)
			}
		})
	}
}

const (
	stormKeys    = 600
	stormCallers = 16
)

// failoverStorm runs one storm and returns the keys executed more than
// once, the keys, and the executions.
func failoverStorm(t *testing.T, cfg redisstore.Config) (dups, keys, execs int) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := redistest.NewCluster(t, 3, 1)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, MaintNotificationsConfig: redistest.NoMaintNotifications(), DialTimeout: 300 * time.Millisecond,
		ReadTimeout: 2 * time.Second, WriteTimeout: time.Second, MaxRedirects: 8})
	defer rdb.Close()
	cfg.KeyPrefix = "storm"
	store, err := redisstore.New(rdb, &cfg)
	if err != nil {
		t.Fatal(err)
	}

	// The shared keys: one per scope, every scope served by one primary,
	// the one the storm kills.
	var victim string
	var all []idempotency.ClaimParams
	for i := 0; len(all) < stormKeys; i++ {
		p := params(t, fmt.Sprintf("usr_%d", i), "k")
		p.LockTimeout = 20 * time.Second // longer than a failover: a holder records its outcome on the promoted replica
		addr, err := redistest.PrimaryFor(ctx, rdb, "storm:{"+p.Scope+"}:r:"+p.Key)
		if err != nil {
			t.Fatal(err)
		}
		if victim == "" {
			victim = addr
		}
		if addr == victim {
			all = append(all, p)
		}
	}

	counts := make([]atomic.Int64, len(all))
	var total atomic.Int64
	killAt := int64(len(all) / 3)
	reached := make(chan struct{})
	var once sync.Once
	done := idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 201}, Retention: time.Hour}

	// The failure: once a third of the keys have been executed, kill the
	// victim, wait for its replica's promotion, restart it as a replica.
	failed := make(chan error, 1)
	go func() {
		select {
		case <-reached:
		case <-ctx.Done():
			failed <- ctx.Err()
			return
		}
		if err := c.Kill(victim); err != nil {
			failed <- err
			return
		}
		if err := c.WaitFailover(ctx, victim); err != nil {
			failed <- err
			return
		}
		failed <- c.Restart(ctx, victim)
	}()

	var wg sync.WaitGroup
	for w := range stormCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pending := make([]int, 0, len(all))
			for i := range all {
				pending = append(pending, (i+w*len(all)/stormCallers)%len(all)) // each caller in its own order
			}
			for len(pending) > 0 && ctx.Err() == nil {
				next := pending[:0]
				for _, i := range pending {
					if !stormOnce(ctx, store, all[i], done, &counts[i], func() {
						if total.Add(1) == killAt {
							once.Do(func() { close(reached) })
						}
					}) {
						next = append(next, i)
					}
				}
				pending = next
				if len(pending) > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond): // back off before the next round of retries
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := <-failed; err != nil {
		t.Fatalf("failover: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the storm did not end: %v", ctx.Err())
	}
	for i := range counts {
		n := counts[i].Load()
		if n == 0 {
			t.Fatalf("key %d never executed", i)
		}
		if n > 1 {
			dups++
		}
		execs += int(n)
	}
	return dups, len(all), execs
}

// stormOnce is one caller's attempt at key p: it reports whether the key
// is done (executed by this caller and recorded, or replayed).
func stormOnce(ctx context.Context, s *redisstore.Store, p idempotency.ClaimParams, done idempotency.Completion, count *atomic.Int64, executed func()) bool {
	c, err := s.Claim(ctx, p)
	if err != nil {
		return false // a node down, not acknowledged, a slot moving: retry
	}
	switch c.State {
	case idempotency.ClaimReplay:
		return true
	case idempotency.ClaimAcquired, idempotency.ClaimReclaimed:
	default:
		return false // in progress: retry
	}
	count.Add(1) // the action
	executed()
	// Record the outcome, retrying through the failover while the lease
	// lasts; a lost lease means another caller took the key over.
	deadline := time.Now().Add(p.LockTimeout - 2*time.Second)
	for time.Now().Before(deadline) {
		err := s.Complete(ctx, c.Lease, done)
		if err == nil || errors.Is(err, idempotency.ErrLeaseLost) {
			return err == nil
		}
		if strings.Contains(err.Error(), "context") {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond): // back off before retrying the complete
		}
	}
	return false
}
