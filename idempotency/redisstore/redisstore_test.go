package redisstore_test

import (
	"context"
	"errors"
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

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func params(t *testing.T, scope, intent string) idempotency.ClaimParams {
	t.Helper()
	k, err := idempotency.ComposeKey(scope, "createOrder", intent)
	if err != nil {
		t.Fatal(err)
	}
	f, err := idempotency.NewFingerprint().Decimal("amount", "10").String("currency", "EUR").Sum()
	if err != nil {
		t.Fatal(err)
	}
	return idempotency.ClaimParams{Scope: scope, Key: k, Fingerprint: f, LockTimeout: 30 * time.Second, Retention: time.Hour}
}

// Many callers on one key, through executors of four stores (four
// clients, as four processes would hold): the action runs once. While it
// runs, every other caller is told "in progress"; afterwards, every caller
// gets the stored outcome.
func TestExecutorOneExecution(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	prefix := redistest.Prefix()
	var execs []*idempotency.Executor
	for range 4 {
		s, err := redisstore.New(redistest.Client(t), &redisstore.Config{KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		e, err := idempotency.New(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		execs = append(execs, e)
	}
	p := params(t, "usr_storm", "one")
	r := idempotency.Request{Scope: p.Scope, Key: p.Key, Fingerprint: p.Fingerprint}
	const callers = 64
	var (
		runs       atomic.Int64
		others     sync.WaitGroup // the callers that did not run the action
		inProgress atomic.Int64
	)
	others.Add(callers - 1)
	action := func(ctx context.Context) (idempotency.Response, error) {
		runs.Add(1)
		others.Wait() // hold the key until every other caller has been answered
		return idempotency.Response{Code: 201, Body: []byte("once")}, nil
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var ran bool
			res, err := execs[i%len(execs)].Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) {
				ran = true
				return action(ctx)
			})
			if ran {
				if err != nil || string(res.Response.Body) != "once" {
					t.Errorf("the executing caller: %+v %v", res, err)
				}
				return
			}
			defer others.Done()
			switch {
			case errors.Is(err, idempotency.ErrInProgress):
				inProgress.Add(1)
			case err == nil && res.Replayed && string(res.Response.Body) == "once":
			default:
				t.Errorf("a duplicate caller: %+v %v", res, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if runs.Load() != 1 || inProgress.Load() != callers-1 {
		t.Fatalf("executions = %d, in progress = %d; want 1 and %d", runs.Load(), inProgress.Load(), callers-1)
	}
	for i, e := range execs {
		res, err := e.Do(ctx, r, action)
		if err != nil || !res.Replayed || string(res.Response.Body) != "once" {
			t.Fatalf("executor %d after the outcome: %+v %v", i, res, err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("executions = %d after the replays", runs.Load())
	}
}

// Each key expires by itself (PEXPIREAT), by the server's clock, once
// nothing can need it: a finished record at its expiry, or at the end of
// its refusal horizon under ExpiredRefused; a PROCESSING one not before its
// lease ends.
func TestKeyExpiry(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	b := setup(t, nil)
	recordKey := func(p idempotency.ClaimParams) string { return b.prefix + ":{" + p.Scope + "}:r:" + p.Key }
	expireAt := func(p idempotency.ClaimParams) time.Time {
		t.Helper()
		at, err := b.rdb.PExpireTime(ctx, recordKey(p)).Result()
		if err != nil || at <= 0 {
			t.Fatalf("PEXPIRETIME: %v %v", at, err)
		}
		return time.UnixMilli(int64(at / time.Millisecond))
	}
	done := idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 201}, Retention: time.Hour}

	isNew := params(t, "usr_exp", "new")
	c, err := b.store.Claim(ctx, isNew)
	if err != nil || c.State != idempotency.ClaimAcquired {
		t.Fatalf("claim: %v %v", c.State, err)
	}
	rec, _ := b.store.Get(ctx, isNew.Scope, isNew.Key)
	if got := expireAt(isNew); !got.Equal(rec.ExpiresAt) {
		t.Fatalf("PROCESSING record expires at %v, want its ExpiresAt %v", got, rec.ExpiresAt)
	}
	if err := b.store.Heartbeat(ctx, c.Lease, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	rec, _ = b.store.Get(ctx, isNew.Scope, isNew.Key)
	if got := expireAt(isNew); !got.Equal(rec.LockedUntil) {
		t.Fatalf("after a heartbeat past its expiry the record expires at %v, want the lease's end %v", got, rec.LockedUntil)
	}
	if err := b.store.Complete(ctx, c.Lease, done); err != nil {
		t.Fatal(err)
	}
	rec, _ = b.store.Get(ctx, isNew.Scope, isNew.Key)
	if got := expireAt(isNew); !got.Equal(rec.ExpiresAt) {
		t.Fatalf("finished record expires at %v, want its ExpiresAt %v", got, rec.ExpiresAt)
	}

	refused := params(t, "usr_exp", "refused")
	refused.Expired, refused.RefusalHorizon = idempotency.ExpiredRefused, 24*time.Hour
	c, err = b.store.Claim(ctx, refused)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Complete(ctx, c.Lease, done); err != nil {
		t.Fatal(err)
	}
	rec, _ = b.store.Get(ctx, refused.Scope, refused.Key)
	if got, want := expireAt(refused), rec.ExpiresAt.Add(24*time.Hour); !got.Equal(want) {
		t.Fatalf("ExpiredRefused record expires at %v, want %v (its refusal horizon's end)", got, want)
	}

	// A short retention, in real time: Redis deletes the record.
	short := params(t, "usr_exp", "short")
	short.LockTimeout, short.Retention = 20*time.Millisecond, 50*time.Millisecond
	if _, err := b.store.Claim(ctx, short); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := b.store.Get(ctx, short.Scope, short.Key); errors.Is(err, idempotency.ErrNotFound) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the record never expired")
		case <-time.After(10 * time.Millisecond): // poll until Redis has deleted it
		}
	}
}

// A scope's keys carry the hash tag {<scope>}, so that they share a
// Cluster slot; the prune registry is the one key outside the scopes.
func TestKeysTaggedByScope(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	b := setup(t, nil)
	p := params(t, "usr_tag", "k")
	c, err := b.store.Claim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Complete(ctx, c.Lease, idempotency.Completion{Status: idempotency.StatusCompleted, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	keys, err := b.rdb.Keys(ctx, b.prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{b.prefix + ":{usr_tag}:r:" + p.Key: true, b.prefix + ":{usr_tag}:due": true, b.prefix + ":prune": true}
	if len(keys) != len(want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
	for _, k := range keys {
		if !want[k] {
			t.Fatalf("unexpected key %q among %v", k, keys)
		}
	}
}

// Bad arguments to New are refused naming the argument or field.
func TestNewRefuses(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = ring.Close() })
	for name, tc := range map[string]struct {
		client redis.UniversalClient
		cfg    *redisstore.Config
		field  string
	}{
		"nil client":           {nil, nil, "client"},
		"ring":                 {ring, nil, "client"},
		"brace":                {rdb, &redisstore.Config{KeyPrefix: "a{b}"}, "Config.KeyPrefix"},
		"long prefix":          {rdb, &redisstore.Config{KeyPrefix: strings.Repeat("p", 65)}, "Config.KeyPrefix"},
		"negative replicas":    {rdb, &redisstore.Config{WaitReplicas: -1, WaitTimeout: time.Second}, "Config.WaitReplicas"},
		"replicas, no timeout": {rdb, &redisstore.Config{WaitReplicas: 1}, "Config.WaitTimeout"},
		"negative timeout":     {rdb, &redisstore.Config{WaitReplicas: 1, WaitTimeout: -time.Second}, "Config.WaitTimeout"},
		"timeout, no replicas": {rdb, &redisstore.Config{WaitTimeout: time.Second}, "Config.WaitTimeout"},
	} {
		_, err := redisstore.New(tc.client, tc.cfg)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%s: err = %v, want an InvalidError naming %s", name, err, tc.field)
		}
	}
}

// The client's errors name the operation and a short hash of the key,
// never the key.
func TestErrorsHideTheKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := params(t, "usr_err", "secret-intent")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.store.Claim(ctx, p)
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("claim with a cancelled context: %v", err)
	}
	if strings.Contains(err.Error(), p.Key) || !strings.Contains(err.Error(), idempotency.ShortHash(p.Key)) {
		t.Fatalf("error %q must hold the key's short hash %s, not the key", err, idempotency.ShortHash(p.Key))
	}
}

// The scripts survive a flushed script cache (a restarted or failed-over
// server): EVALSHA's NOSCRIPT falls back to EVAL.
func TestScriptCacheFlushed(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	b := setup(t, nil)
	p := params(t, "usr_flush", "k")
	if _, err := b.store.Claim(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := b.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := b.store.Claim(ctx, p)
	if err != nil || c.State != idempotency.ClaimInProgress {
		t.Fatalf("claim after SCRIPT FLUSH: %v %v", c.State, err)
	}
}
