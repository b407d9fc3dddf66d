package dynamostore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/dynamostore"
)

// counting is the real client, counting the calls a claim makes, with a
// hook run once before the first PutItem after it is armed.
type counting struct {
	*dynamodb.Client
	puts, gets atomic.Int64

	mu        sync.Mutex
	beforePut func()
}

func (c *counting) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.puts.Add(1)
	c.mu.Lock()
	hook := c.beforePut
	c.beforePut = nil
	c.mu.Unlock()
	if hook != nil {
		hook()
	}
	return c.Client.PutItem(ctx, in, opts...)
}

func (c *counting) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.gets.Add(1)
	return c.Client.GetItem(ctx, in, opts...)
}

// cost is the PutItem and GetItem calls of one call of f.
func (c *counting) cost(f func()) (puts, gets int64) {
	p, g := c.puts.Load(), c.gets.Load()
	f()
	return c.puts.Load() - p, c.gets.Load() - g
}

// The claim adapts its first step to the traffic: while claims are of new
// keys a new key costs one PutItem and nothing else; once most claims
// find a record a replay costs one GetItem and no PutItem (not a failed
// PutItem, billed as a write, and a read); when new keys prevail again
// they go back to one PutItem. Every answer stays the right one.
func TestClaimAdaptsToTraffic(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	api := &counting{Client: b.client}
	store := b.newStore(t, api, dynamostore.Config{Clock: b.clock.now, SkewBuffer: -1})
	ctx := context.Background()
	done := idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 201, Body: []byte("once")}, Retention: time.Hour}

	newKey := func(i int, phase string) (int64, int64) {
		t.Helper()
		p := params(request(t, fmt.Sprintf("%s-%d", phase, i)), time.Minute, time.Hour)
		var c idempotency.Claim
		var err error
		puts, gets := api.cost(func() { c, err = store.Claim(ctx, p) })
		if err != nil || c.State != idempotency.ClaimAcquired {
			t.Fatalf("%s: new key %d: %v %v, want acquired", phase, i, c.State, err)
		}
		if err := store.Complete(ctx, c.Lease, done); err != nil {
			t.Fatal(err)
		}
		return puts, gets
	}
	for i := range 20 {
		if puts, gets := newKey(i, "new"); puts != 1 || gets != 0 {
			t.Fatalf("new key %d of a run of new keys: %d PutItem, %d GetItem; want 1 and 0", i, puts, gets)
		}
	}

	replay := params(request(t, "new-0"), time.Minute, time.Hour)
	var puts, gets int64
	for i := range 40 {
		var c idempotency.Claim
		var err error
		puts, gets = api.cost(func() { c, err = store.Claim(ctx, replay) })
		if err != nil || c.State != idempotency.ClaimReplay || string(c.Record.Response.Body) != "once" {
			t.Fatalf("replay %d: %v %+v %v, want the replay of \"once\"", i, c.State, c.Record, err)
		}
	}
	if puts != 0 || gets != 1 {
		t.Fatalf("a replay in a run of replays: %d PutItem, %d GetItem; want 0 and 1 (read first)", puts, gets)
	}

	for i := range 40 {
		puts, gets = newKey(i, "again")
	}
	if puts != 1 || gets != 0 {
		t.Fatalf("a new key once new keys prevail again: %d PutItem, %d GetItem; want 1 and 0", puts, gets)
	}
}

// A claim that read first and found nothing puts the record conditioned
// on its absence: a claim of the same key that lands between its read
// and its PutItem wins, and this one answers "in progress", never
// acquired. One holder.
func TestReadFirstClaimLosesToCreate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	api := &counting{Client: b.client}
	store := b.newStore(t, api, dynamostore.Config{Clock: b.clock.now, SkewBuffer: -1})
	ctx := context.Background()
	// Replays until the store reads first.
	seen := params(request(t, "seen"), time.Minute, time.Hour)
	c, err := store.Claim(ctx, seen)
	if err != nil || c.State != idempotency.ClaimAcquired {
		t.Fatal(c.State, err)
	}
	for range 40 {
		if c, err := store.Claim(ctx, seen); err != nil || c.State != idempotency.ClaimInProgress {
			t.Fatalf("%v %v", c.State, err)
		}
	}

	p := params(request(t, "race"), time.Minute, time.Hour)
	var other idempotency.Claim
	var otherErr error
	api.mu.Lock()
	api.beforePut = func() { other, otherErr = b.store.Claim(ctx, p) }
	api.mu.Unlock()
	var mine idempotency.Claim
	puts, gets := api.cost(func() { mine, err = store.Claim(ctx, p) })
	if otherErr != nil || other.State != idempotency.ClaimAcquired {
		t.Fatalf("the claim in between: %v %v", other.State, otherErr)
	}
	if gets < 2 || puts != 1 {
		t.Fatalf("%d GetItem, %d PutItem: the claim did not read first, then put (is the store reading first?)", gets, puts)
	}
	if err != nil || mine.State != idempotency.ClaimInProgress {
		t.Fatalf("claim that read an absent key, then lost the put: %v %+v %v, want in progress", mine.State, mine.Lease, err)
	}
}
