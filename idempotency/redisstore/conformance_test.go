package redisstore_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/idempotencytest"
	"github.com/payonce/payonce/idempotency/redisstore"
	"github.com/payonce/payonce/idempotency/redisstore/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// bundle is one test's store on the shared server (or the shared
// cluster), under a key prefix of its own.
type bundle struct {
	rdb    redis.UniversalClient
	store  *redisstore.Store
	prefix string
}

func setup(t *testing.T, cfg *redisstore.Config) bundle {
	t.Helper()
	return setupOn(t, redistest.Client(t), cfg)
}

// setupCluster is setup on the test binary's shared Cluster (3 primaries,
// 1 replica each).
func setupCluster(t *testing.T, cfg *redisstore.Config) bundle {
	t.Helper()
	return setupOn(t, redistest.ClusterClient(t), cfg)
}

func setupOn(t *testing.T, rdb redis.UniversalClient, cfg *redisstore.Config) bundle {
	t.Helper()
	var c redisstore.Config
	if cfg != nil {
		c = *cfg
	}
	c.KeyPrefix = redistest.Prefix()
	s, err := redisstore.New(rdb, &c)
	if err != nil {
		t.Fatal(err)
	}
	return bundle{rdb: rdb, store: s, prefix: c.KeyPrefix}
}

// advanceScript moves back by ARGV[2] ms every instant stored under the
// prefix ARGV[1]: the records' times and the scores of the due indexes
// and of the prune registry. It is the tests' alone: the store's scripts
// read the server's clock and nothing else.
var advanceScript = redis.NewScript(`
local d = tonumber(ARGV[2])
for _, k in ipairs(redis.call('KEYS', ARGV[1] .. ':*')) do
  local kind = redis.call('TYPE', k).ok
  if kind == 'hash' then
    for _, f in ipairs({'lu', 'ca', 'co', 'ea', 'ru'}) do
      local v = redis.call('HGET', k, f)
      if v then redis.call('HSET', k, f, tonumber(v) - d) end
    end
  elseif kind == 'zset' then
    local m = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
    for i = 1, #m, 2 do redis.call('ZADD', k, tonumber(m[i + 1]) - d, m[i]) end
  end
end
return 1
`)

// advanceKeyScript is advanceScript for one key, KEYS[1], of a Cluster
// node: a script may touch keys of one slot only.
var advanceKeyScript = redis.NewScript(`
local d, k = tonumber(ARGV[1]), KEYS[1]
local kind = redis.call('TYPE', k).ok
if kind == 'hash' then
  for _, f in ipairs({'lu', 'ca', 'co', 'ea', 'ru'}) do
    local v = redis.call('HGET', k, f)
    if v then redis.call('HSET', k, f, tonumber(v) - d) end
  end
elseif kind == 'zset' then
  local m = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  for i = 1, #m, 2 do redis.call('ZADD', k, tonumber(m[i + 1]) - d, m[i]) end
end
return 1
`)

// advance makes d pass for every record of the bundle's store. The
// server's clock cannot be moved, so the stored instants move back
// instead, in one script, as pgstore's tests move its rows' timestamps.
// The keys' own expiry (PEXPIREAT) stays in real time: Redis deletes a
// record only when nothing can need it, like a pruner that runs late,
// which TestKeysExpire checks on its own.
func (b bundle) advance(t testing.TB, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	cluster, ok := b.rdb.(*redis.ClusterClient)
	if !ok {
		if err := advanceScript.Run(ctx, b.rdb, nil, b.prefix, d.Milliseconds()).Err(); err != nil {
			t.Fatalf("advance: %v", err)
		}
		return
	}
	// On a Cluster: each primary's keys of the prefix, one by one (the
	// suite advances while nothing else runs on the store).
	err := cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, b.prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := advanceKeyScript.Run(ctx, node, []string{iter.Val()}, d.Milliseconds()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	})
	if err != nil {
		t.Fatalf("advance: %v", err)
	}
}

// TestConformance runs the suite every Store must pass, once more with the
// executor's replay cache, which must change no answer.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, cached := range []bool{false, true} {
		t.Run(map[bool]string{false: "Store", true: "ReplayCache"}[cached], func(t *testing.T) {
			t.Parallel()
			idempotencytest.Exercise(t, func(t *testing.T) idempotencytest.Harness {
				b := setup(t, nil)
				return idempotencytest.Harness{Store: b.store, Advance: b.advance, ReplayCache: cached}
			})
		})
	}
}

// Sealed responses: the suite again, over a store with a keyring.
func TestConformanceSealed(t *testing.T) {
	t.Parallel()
	kr, err := idempotency.NewKeyring("k1", map[string][]byte{"k1": make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	idempotencytest.Exercise(t, func(t *testing.T) idempotencytest.Harness {
		b := setup(t, &redisstore.Config{Keyring: kr})
		return idempotencytest.Harness{Store: b.store, Advance: b.advance}
	})
}

// The suite on a Redis Cluster (3 primaries, 1 replica each), without and
// with Config.WaitReplicas: every script touches one slot, and WAIT goes
// to the key's primary.
func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]*redisstore.Config{
		"Store":        nil,
		"WaitReplicas": {WaitReplicas: 1, WaitTimeout: 5 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			idempotencytest.Exercise(t, func(t *testing.T) idempotencytest.Harness {
				b := setupCluster(t, cfg)
				return idempotencytest.Harness{Store: b.store, Advance: b.advance}
			})
		})
	}
}
