package idempotencytest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// bundle is what every check starts from: its fresh harness, an executor
// on the harness's store, a context that ends with the check, and the
// count of the check's executions.
type bundle struct {
	Harness
	checkState
	exec *idempotency.Executor
}

// checkState is what the checks of Store and of TxStore start from: a
// context that ends with the check, the store checked, and the count of
// the check's executions.
type checkState struct {
	ctx     context.Context
	store   idempotency.Store
	advance func(t testing.TB, d time.Duration) // the harness's Advance
	calls   counter
}

// setup builds the bundle of one check; cfg configures the executor (nil:
// the defaults). Checks that talk to the store alone leave exec unused.
func setup(t *testing.T, h Harness, cfg *idempotency.Config) *bundle {
	t.Helper()
	ctx := checkContext(t)
	if h.ReplayCache {
		cfg, h.Advance = withReplayCache(cfg, h.Advance)
	}
	e, err := idempotency.New(h.Store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() }) // its replay cache's listener
	return &bundle{Harness: h, checkState: checkState{ctx: ctx, store: h.Store, advance: h.Advance}, exec: e}
}

// checkContext is a context that ends with the check, or after a minute.
func checkContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// withReplayCache is cfg (nil: the defaults) with a replay cache whose
// clock follows the harness's: the advance it returns moves both.
func withReplayCache(cfg *idempotency.Config, advance func(testing.TB, time.Duration)) (*idempotency.Config, func(testing.TB, time.Duration)) {
	var c idempotency.Config
	if cfg != nil {
		c = *cfg
	}
	var shift atomic.Int64
	c.ReplayCache = &idempotency.ReplayCache{Size: 1000,
		Clock: func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }}
	return &c, func(t testing.TB, d time.Duration) {
		shift.Add(int64(d))
		advance(t, d)
	}
}

// wantExecutions stops the check unless the action ran n times.
func (b *checkState) wantExecutions(t *testing.T, n int64) {
	t.Helper()
	if got := b.calls.n.Load(); got != n {
		t.Fatalf("executions = %d, want %d", got, n)
	}
}

// mustDo runs r's action through the executor and stops the check on any
// error.
func (b *bundle) mustDo(t *testing.T, r idempotency.Request, action idempotency.Action) idempotency.Result {
	t.Helper()
	res, err := b.exec.Do(b.ctx, r, action)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// claim claims p directly on the store, as holder who, and stops the check
// unless the claim ends in want.
func (b *checkState) claim(t *testing.T, who string, p idempotency.ClaimParams, want idempotency.ClaimState) idempotency.Claim {
	t.Helper()
	c, err := b.store.Claim(b.ctx, p)
	if err != nil || c.State != want {
		t.Fatalf("%s claim: %v %+v %v, want %v", who, c.State, c.Lease, err, want)
	}
	return c
}

// reclaimed claims r as holder A with a one-second lease, lets the lease
// end, and claims r again as holder B, which reclaims it: the params of
// both claims and their answers. A's lease is lost, B's is the record's.
func (b *checkState) reclaimed(t *testing.T, r idempotency.Request) (p idempotency.ClaimParams, a, bc idempotency.Claim) {
	t.Helper()
	p = shortLease(r)
	a = b.claim(t, "A", p, idempotency.ClaimAcquired)
	b.advance(t, 2*time.Second)
	return p, a, b.claim(t, "B", p, idempotency.ClaimReclaimed)
}

// doInBackground runs r's action in a goroutine, as a holder still at
// work, and returns once the action has started; the channel receives
// Do's error when it ends. A Do that ends before its action starts (the
// store refused the claim) fails the test at once, with Do's error.
func (b *bundle) doInBackground(t testing.TB, r idempotency.Request, action idempotency.Action) <-chan error {
	t.Helper()
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := b.exec.Do(b.ctx, r, func(ctx context.Context) (idempotency.Response, error) {
			close(started)
			return action(ctx)
		})
		done <- err
	}()
	select {
	case <-started:
		return done
	case err := <-done:
		t.Fatalf("the holder's Do ended before its action started: %v", err)
		return nil
	}
}

// storm runs fn n times at once, all released together, and waits for
// every run to end.
func storm(n int, fn func()) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn()
		}()
	}
	close(start)
	wg.Wait()
}

const (
	scopeA = "usr_A1"
	scopeB = "usr_B2"
)

func key(t *testing.T, scope, intent string) string {
	t.Helper()
	k, err := idempotency.ComposeKey(scope, "createOrder", intent)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func fp(t *testing.T, amount string) idempotency.Fingerprint {
	t.Helper()
	f, err := idempotency.NewFingerprint().Decimal("amount", amount).String("currency", "EUR").Sum()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func req(t *testing.T, scope, intent, amount string) idempotency.Request {
	return idempotency.Request{Scope: scope, Key: key(t, scope, intent), Fingerprint: fp(t, amount)}
}

func claimParams(r idempotency.Request) idempotency.ClaimParams {
	return idempotency.ClaimParams{Scope: r.Scope, Key: r.Key, Fingerprint: r.Fingerprint,
		LockTimeout: 30 * time.Second, Retention: 24 * time.Hour}
}

// shortLease is claimParams of r with a one-second lease, which an
// Advance of two seconds ends.
func shortLease(r idempotency.Request) idempotency.ClaimParams {
	p := claimParams(r)
	p.LockTimeout = time.Second
	return p
}

// counter is an action's side effect, counted.
type counter struct{ n atomic.Int64 }

func (c *counter) action(resp idempotency.Response) idempotency.Action {
	return func(ctx context.Context) (idempotency.Response, error) {
		c.n.Add(1)
		return resp, nil
	}
}

// slowAction is action that takes d to run, so that the duplicates sent
// with it overlap it.
func (c *counter) slowAction(d time.Duration, resp idempotency.Response) idempotency.Action {
	return func(ctx context.Context) (idempotency.Response, error) {
		c.n.Add(1)
		time.Sleep(d)
		return resp, nil
	}
}

// A body that is not JSON and whose bytes would not survive a JSON
// round trip: replays must give it back byte for byte.
var oddBody = []byte("{\"b\": 2,  \"a\":1}\n\x00\xff not json")

func okResponse() idempotency.Response {
	return idempotency.Response{Code: 201, Header: http.Header{"Content-Type": {"text/plain"}, "X-Order": {"o_1"}}, Body: oddBody}
}

func mustEqualResponse(t *testing.T, got, want idempotency.Response) {
	t.Helper()
	if got.Code != want.Code || !bytes.Equal(got.Body, want.Body) || fmt.Sprint(got.Header) != fmt.Sprint(want.Header) {
		t.Fatalf("response differs:\n got  %d %v %q\n want %d %v %q", got.Code, got.Header, got.Body, want.Code, want.Header, want.Body)
	}
}

func recordString(r idempotency.Record) string {
	resp := "<nil>"
	if r.Response != nil {
		resp = fmt.Sprintf("%d %v %q", r.Response.Code, r.Response.Header, r.Response.Body)
	}
	r.Response = nil
	return fmt.Sprintf("%+v response=%s", r, resp)
}
