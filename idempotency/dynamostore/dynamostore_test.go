package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/dynamostore"
	"github.com/payonce/payonce/idempotency/dynamostore/dynamotest"
)

func request(t *testing.T, intent string) idempotency.Request {
	t.Helper()
	k, err := idempotency.ComposeKey("usr_A1", "createOrder", intent)
	if err != nil {
		t.Fatal(err)
	}
	f, err := idempotency.NewFingerprint().Decimal("amount", "10").String("currency", "EUR").Sum()
	if err != nil {
		t.Fatal(err)
	}
	return idempotency.Request{Scope: "usr_A1", Key: k, Fingerprint: f}
}

func params(r idempotency.Request, lock, retention time.Duration) idempotency.ClaimParams {
	return idempotency.ClaimParams{Scope: r.Scope, Key: r.Key, Fingerprint: r.Fingerprint, LockTimeout: lock, Retention: retention}
}

// newStore is another store on b's table over api, with its own config
// (Table set here).
func (b bundle) newStore(t *testing.T, api dynamostore.API, cfg dynamostore.Config) *dynamostore.Store {
	t.Helper()
	cfg.Table = b.table
	s, err := dynamostore.New(context.Background(), api, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rawItem reads r's record as DynamoDB holds it.
func (b bundle) rawItem(t *testing.T, r idempotency.Request) map[string]types.AttributeValue {
	t.Helper()
	out, err := b.client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(b.table),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "r#" + r.Scope + "#" + r.Key}}, ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item == nil {
		t.Fatalf("raw item: %v %v", out, err)
	}
	return out.Item
}

func numAttr(t *testing.T, m map[string]types.AttributeValue, name string) int64 {
	t.Helper()
	n, ok := m[name].(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("attribute %s: %#v", name, m[name])
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Many goroutines, one key, through the executor on a store with the
// default configuration (real clock, default skew buffer): one execution.
// The action holds on until every other caller has had its answer, so all
// of them meet it in progress; a retry afterwards replays it.
func TestOneExecutionUnderStorm(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	store := b.newStore(t, b.client, dynamostore.Config{})
	exec, err := idempotency.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 32
	r := request(t, "storm")
	var runs atomic.Int64
	others := make(chan error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ran := false
			_, err := exec.Do(context.Background(), r, func(ctx context.Context) (idempotency.Response, error) {
				ran = true
				runs.Add(1)
				for range n - 1 {
					select {
					case <-others:
					case <-ctx.Done():
						return idempotency.Response{}, ctx.Err()
					}
				}
				return idempotency.Response{Code: 201, Body: []byte("once")}, nil
			})
			if ran && err != nil {
				t.Errorf("the executing caller: %v", err)
			}
			if !ran {
				if !errors.Is(err, idempotency.ErrInProgress) {
					t.Errorf("a duplicate: %v, want in progress", err)
				}
				others <- err
			}
		}()
	}
	close(start)
	wg.Wait()
	if runs.Load() != 1 {
		t.Fatalf("executions = %d, want 1", runs.Load())
	}
	res, err := exec.Do(context.Background(), r, func(context.Context) (idempotency.Response, error) {
		runs.Add(1)
		return idempotency.Response{}, nil
	})
	if err != nil || !res.Replayed || string(res.Response.Body) != "once" || runs.Load() != 1 {
		t.Fatalf("retry: %+v %v, executions %d", res, err, runs.Load())
	}
}

// Two instances whose clocks differ by 1.5s, within the default skew
// buffer (2s): the one ahead does not take over a lease that ended by its
// clock but not by the holder's; it does once the lease ended 2s ago by
// its own. Without the buffer it would have run beside the holder.
func TestSkewBuffer(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	holder := b.newStore(t, b.client, dynamostore.Config{Clock: b.clock.now})
	var ahead clock
	ahead.shift.Store(int64(1500 * time.Millisecond))
	aheadStore := b.newStore(t, b.client, dynamostore.Config{Clock: ahead.now})
	var aheadNoBuffer clock
	aheadNoBuffer.shift.Store(int64(1500 * time.Millisecond))
	unbuffered := b.newStore(t, b.client, dynamostore.Config{Clock: aheadNoBuffer.now, SkewBuffer: -1})
	ctx := context.Background()
	r := request(t, "skew")
	p := params(r, time.Second, time.Hour)

	if c, err := holder.Claim(ctx, p); err != nil || c.State != idempotency.ClaimAcquired {
		t.Fatalf("holder: %v %v", c.State, err)
	}
	c, err := aheadStore.Claim(ctx, p)
	if err != nil || c.State != idempotency.ClaimInProgress {
		t.Fatalf("instance 1.5s ahead: %v %v, want in progress (the lease ended 0.5s ago by its clock, less than the buffer)", c.State, err)
	}
	// The lease is held until its end plus the buffer: 1s + 2s - 1.5s
	// from now, less the milliseconds the claims took.
	if c.RetryAfter > 1500*time.Millisecond || c.RetryAfter < time.Second {
		t.Fatalf("RetryAfter = %s, want about 1.5s", c.RetryAfter)
	}
	if c, err := unbuffered.Claim(ctx, p); err != nil || c.State != idempotency.ClaimReclaimed {
		t.Fatalf("without a skew buffer: %v %v, want the (unsafe) reclaim the buffer prevents", c.State, err)
	}
	ahead.shift.Add(int64(4 * time.Second))
	if c, err := aheadStore.Claim(ctx, p); err != nil || c.State != idempotency.ClaimReclaimed {
		t.Fatalf("once the lease ended more than the buffer ago: %v %v, want reclaimed", c.State, err)
	}
}

// interleaved is the real client with a hook run once just before the
// first reclaim's UpdateItem (the one that sets the next lock version):
// another holder's write lands between the claim's read and its write.
type interleaved struct {
	*dynamodb.Client
	once   sync.Once
	before func()
}

func (c *interleaved) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if _, reclaim := in.ExpressionAttributeValues[":nv"]; reclaim {
		c.once.Do(c.before)
	}
	return c.Client.UpdateItem(ctx, in, opts...)
}

// A reclaim is a compare-and-swap on the lease end read: a heartbeat that
// lands between the read and the write makes it fail, and the claimant,
// reading again, finds the lease live.
func TestReclaimLosesToHeartbeat(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	r := request(t, "heartbeat-race")
	p := params(r, time.Second, time.Hour)
	first, err := b.store.Claim(ctx, p)
	if err != nil || first.State != idempotency.ClaimAcquired {
		t.Fatalf("holder: %v %v", first.State, err)
	}
	b.advance(t, 2*time.Second)
	var beat error
	api := &interleaved{Client: b.client, before: func() { beat = b.store.Heartbeat(ctx, first.Lease, 30*time.Second) }}
	other := b.newStore(t, api, dynamostore.Config{Clock: b.clock.now, SkewBuffer: -1})
	c, err := other.Claim(ctx, p)
	if beat != nil {
		t.Fatalf("the holder's heartbeat: %v", beat)
	}
	if err != nil || c.State != idempotency.ClaimInProgress {
		t.Fatalf("claim racing a heartbeat: %v %+v %v, want in progress (the reclaim must be conditioned on the lease end it read)", c.State, c.Lease, err)
	}
	done := idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 201}, Retention: time.Hour}
	if err := b.store.Complete(ctx, first.Lease, done); err != nil {
		t.Fatalf("the holder's complete: %v", err)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	client := dynamotest.Client(t)
	ctx := context.Background()
	_, err := dynamostore.New(ctx, client, &dynamostore.Config{Table: "payonce-missing"})
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), "dynamostore.CreateTable") {
		t.Fatalf("missing table: %v, want an error naming CreateTable", err)
	}
	other := dynamotest.TableName()
	if _, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: aws.String(other),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest}); err != nil {
		t.Fatal(err)
	}
	for field, call := range map[string]func() error{
		"Config.Table ": func() error { _, err := dynamostore.New(ctx, client, &dynamostore.Config{Table: other}); return err },
		"Config.Table":  func() error { _, err := dynamostore.New(ctx, client, nil); return err },
		"client":        func() error { _, err := dynamostore.New(ctx, nil, &dynamostore.Config{Table: "t"}); return err },
		"name":          func() error { return dynamostore.CreateTable(ctx, client, "") },
	} {
		var ie *idempotency.InvalidError
		if err := call(); !errors.As(err, &ie) || ie.Field != strings.TrimSpace(field) {
			t.Fatalf("%s: %v, want an InvalidError naming it", field, err)
		}
	}
}

// Errors name a key by its short hash, never in full.
func TestErrorsHideKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	r := request(t, "secret-intent-0123456789")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.store.Get(cancelled, r.Scope, r.Key)
	if err == nil || strings.Contains(err.Error(), r.Key) || !strings.Contains(err.Error(), idempotency.ShortHash(r.Key)) {
		t.Fatalf("client error: %v, want the key's short hash and not the key", err)
	}
	c, err := b.store.Claim(context.Background(), params(r, time.Minute, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	big := idempotency.Completion{Status: idempotency.StatusCompleted, Retention: time.Hour,
		Response: idempotency.Response{Code: 200, Body: make([]byte, 500<<10)}}
	var ie *idempotency.InvalidError
	if err := b.store.Complete(context.Background(), c.Lease, big); !errors.As(err, &ie) || ie.Field != "Completion.Response" || strings.Contains(err.Error(), r.Key) {
		t.Fatalf("a response over the item limit: %v, want an InvalidError naming Completion.Response", err)
	}
	if rec, err := b.store.Get(context.Background(), r.Scope, r.Key); err != nil || rec.Status != idempotency.StatusProcessing {
		t.Fatalf("after the refused complete: %+v %v", rec, err)
	}
}

// The TTL attribute: a finished record's is its expiry plus its refusal
// horizon plus the skew buffer; a heartbeat past the expiry moves it.
func TestTTLAttribute(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	store := b.newStore(t, b.client, dynamostore.Config{Clock: b.clock.now}) // default buffer, 2s
	ctx := context.Background()
	r := request(t, "ttl")
	p := params(r, time.Second, 2*time.Second)
	c, err := store.Claim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Heartbeat(ctx, c.Lease, time.Hour); err != nil {
		t.Fatal(err)
	}
	it := b.rawItem(t, r)
	if lu, purge := numAttr(t, it, "lu"), numAttr(t, it, "purge"); purge*1000 < lu+2000 {
		t.Fatalf("PROCESSING record: purge %d s before its lease's end %d ms plus the buffer", purge, lu)
	}
	p.Expired, p.RefusalHorizon = idempotency.ExpiredRefused, 24*time.Hour
	r2 := request(t, "ttl-refused")
	p.Key = r2.Key
	c, err = store.Claim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Complete(ctx, c.Lease, idempotency.Completion{Status: idempotency.StatusCompleted, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	it = b.rawItem(t, r2)
	want := numAttr(t, it, "ea") + (24 * time.Hour).Milliseconds() + 2000
	if purge := numAttr(t, it, "purge") * 1000; purge < want || purge > want+3000 {
		t.Fatalf("finished record under ExpiredRefused: purge %d ms, want %d ms (expiry + horizon + buffer) rounded up", purge, want)
	}
}

// scanCounter is the real client, counting the items its Scans read.
type scanCounter struct {
	*dynamodb.Client
	scanned atomic.Int64
}

func (c *scanCounter) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	out, err := c.Client.Scan(ctx, in, opts...)
	if err == nil {
		c.scanned.Add(int64(out.ScannedCount))
	}
	return out, err
}

// A Pruner's pass reads the table about twice at most (once, and once
// more by the call that finds nothing left, plus a page per batch),
// whatever its batch size: each Prune call resumes where the previous
// one stopped.
func TestPruneResumes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	// Few expired records among many live ones: a prune that started
	// each batch from the table's start would read the live ones again
	// and again.
	const expired, live = 100, 400
	done := idempotency.Completion{Status: idempotency.StatusCompleted, Response: idempotency.Response{Code: 201}, Retention: time.Hour}
	for i := range expired + live {
		if i == expired {
			b.advance(t, 2*time.Hour)
		}
		c, err := b.store.Claim(ctx, params(request(t, fmt.Sprint("p", i)), time.Minute, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.store.Complete(ctx, c.Lease, done); err != nil {
			t.Fatal(err)
		}
	}
	counter := &scanCounter{Client: b.client}
	store := b.newStore(t, counter, dynamostore.Config{Clock: b.clock.now, SkewBuffer: -1})
	pruner, err := idempotency.NewPruner(store, &idempotency.PrunerConfig{BatchSize: 5, Pause: -1})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := pruner.RunOnce(ctx)
	if err != nil || rep.Deleted != expired || !rep.Drained {
		t.Fatalf("pass: %+v %v, want %d deleted", rep, err, expired)
	}
	t.Logf("a pass over %d items in batches of 5 read %d", expired+live, counter.scanned.Load())
	if n := counter.scanned.Load(); n > 3*(expired+live) {
		t.Fatalf("the pass read %d items of a table of %d: each batch read the table again", n, expired+live)
	}
}
