package idempotencytest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
)

// InstancesConfig sizes [CheckInstances]. The zero value is usable.
type InstancesConfig struct {
	// Callers is the number of concurrent callers of one key through the
	// middleware. Default 32.
	Callers int
	// Keys and CallersPerKey size the storm on Executor.Do: Keys keys at
	// once, CallersPerKey callers each. Defaults 6 and 8.
	Keys, CallersPerKey int
}

// CheckInstances checks a store from the point of view of a service run
// as several instances: newExecutors returns n executors, each over its
// own client and store (n processes of one service) on one shared
// keyspace, fresh for each call. Two checks run, as subtests:
//
//   - MiddlewareStorm: a storm of one request (same key, same body)
//     through three instances' middleware runs the handler once; every
//     other caller is answered 409 in progress with Retry-After while it
//     runs, and each one's retry through another instance gets the first
//     response byte for byte, marked replayed; the same key with another
//     body is refused (422) without the first answer or the key, and
//     changes nothing.
//   - DoStorm: Executor.Do on many keys at once through three executors:
//     each key's action runs once, every caller is told "in progress"
//     first and, retrying, gets that run's response.
//
// The handler and actions hold their key until every other caller has had
// its first answer, so the checks wait for events, not durations.
func CheckInstances(t *testing.T, newExecutors func(t *testing.T, n int) []*idempotency.Executor, cfg *InstancesConfig) {
	t.Helper()
	c := InstancesConfig{Callers: 32, Keys: 6, CallersPerKey: 8}
	if cfg != nil {
		if cfg.Callers > 0 {
			c.Callers = cfg.Callers
		}
		if cfg.Keys > 0 {
			c.Keys = cfg.Keys
		}
		if cfg.CallersPerKey > 0 {
			c.CallersPerKey = cfg.CallersPerKey
		}
	}
	t.Run("MiddlewareStorm", func(t *testing.T) {
		t.Parallel()
		checkMiddlewareStorm(t, newExecutors, c.Callers)
	})
	t.Run("DoStorm", func(t *testing.T) {
		t.Parallel()
		checkDoStorm(t, newExecutors, c.Keys, c.CallersPerKey)
	})
}

func postOrder(h http.Handler, user, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	r.Header.Set("X-User", user)
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

const order = `{"sku":"pen","qty":2}`

func checkMiddlewareStorm(t *testing.T, newExecutors func(t *testing.T, n int) []*idempotency.Executor, callers int) {
	var calls, answered atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		// Hold until everyone not running this handler has an answer.
		poll := time.NewTicker(time.Millisecond)
		defer poll.Stop()
		for answered.Load()+calls.Load() < int64(callers) {
			select {
			case <-poll.C:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Location", "/orders/o_"+strconv.FormatInt(n, 10))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":"o_%d"}`, n)
	})
	var hs []http.Handler
	for _, e := range newExecutors(t, 3) {
		mw, err := idempotency.Middleware(e, idempotency.MiddlewareConfig{
			Scope:          func(r *http.Request) string { return r.Header.Get("X-User") },
			Routes:         []idempotency.Route{{Pattern: "POST /orders", Action: "createOrder", RequireKey: true}},
			MismatchStatus: http.StatusUnprocessableEntity,
		})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, mw(handler))
	}
	key := rand.Text()

	res := make([]*httptest.ResponseRecorder, callers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res[i] = postOrder(hs[i%len(hs)], "usr_storm", key, order)
			if res[i].Header().Get("Idempotent-Replayed") == "" && res[i].Code == http.StatusCreated {
				return // the caller that ran the handler
			}
			answered.Add(1)
		}()
	}
	close(start)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times for one key, want 1", n)
	}

	var first *httptest.ResponseRecorder
	var retry []int
	for i, w := range res {
		switch {
		case w.Code == http.StatusCreated && w.Header().Get("Idempotent-Replayed") == "":
			if first != nil {
				t.Fatalf("two callers got a first (not replayed) response")
			}
			first = w
		case w.Code == http.StatusConflict:
			if w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "request-in-progress") {
				t.Fatalf("caller %d: 409 without Retry-After or not in progress: %v %s", i, w.Header(), w.Body)
			}
			retry = append(retry, i)
		default:
			t.Fatalf("caller %d: %d %v %s, want the first response or 409 in progress", i, w.Code, w.Header(), w.Body)
		}
	}
	if first == nil || len(retry) != callers-1 {
		t.Fatalf("first response: %v; in progress: %d, want %d", first != nil, len(retry), callers-1)
	}
	// Their retries (each through another instance) get the first response.
	for _, i := range retry {
		w := postOrder(hs[(i+1)%len(hs)], "usr_storm", key, order)
		if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" ||
			!bytes.Equal(w.Body.Bytes(), first.Body.Bytes()) || w.Header().Get("Location") != first.Header().Get("Location") {
			t.Fatalf("retry of caller %d: %d %v %q, want the first response %q replayed", i, w.Code, w.Header(), w.Body, first.Body)
		}
	}

	// The same key with another body: refused, nothing run, nothing changed.
	mm := postOrder(hs[0], "usr_storm", key, `{"sku":"pen","qty":3}`)
	if mm.Code != http.StatusUnprocessableEntity || !strings.Contains(mm.Body.String(), "idempotency-key-reused") ||
		strings.Contains(mm.Body.String(), "o_1") || strings.Contains(mm.Body.String(), key) {
		t.Fatalf("another body under the key: %d %s, want 422 idempotency-key-reused without the first answer or the key", mm.Code, mm.Body)
	}
	if w := postOrder(hs[2], "usr_storm", key, order); !bytes.Equal(w.Body.Bytes(), first.Body.Bytes()) {
		t.Fatalf("after the mismatch: %d %q, want the first response", w.Code, w.Body)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
}

func checkDoStorm(t *testing.T, newExecutors func(t *testing.T, n int) []*idempotency.Executor, keys, callersPerKey int) {
	execs := newExecutors(t, 3)
	fp, err := idempotency.NewFingerprint().Decimal("amount", "10").String("currency", "EUR").Sum()
	if err != nil {
		t.Fatal(err)
	}
	runs := make([]atomic.Int64, keys)
	answered := make([]atomic.Int64, keys)
	bodies := make([][][]byte, keys)
	for k := range bodies {
		bodies[k] = make([][]byte, callersPerKey)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for k := range keys {
		key, err := idempotency.ComposeKey("usr_do", "charge", rand.Text())
		if err != nil {
			t.Fatal(err)
		}
		req := idempotency.Request{Scope: "usr_do", Key: key, Fingerprint: fp}
		// The action holds the key until every caller of it has had a
		// first answer: all of them meet it running.
		action := func(actx context.Context) (idempotency.Response, error) {
			n := runs[k].Add(1)
			poll := time.NewTicker(time.Millisecond)
			defer poll.Stop()
			for answered[k].Load()+runs[k].Load() < int64(callersPerKey) {
				select {
				case <-poll.C:
				case <-actx.Done():
					return idempotency.Response{}, actx.Err()
				}
			}
			return idempotency.Response{Code: 201, Body: fmt.Appendf(nil, "key %d run %d", k, n)}, nil
		}
		for c := range callersPerKey {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				poll := time.NewTicker(5 * time.Millisecond)
				defer poll.Stop()
				ran := false
				act := func(actx context.Context) (idempotency.Response, error) {
					ran = true
					return action(actx)
				}
				for try := 0; ; try++ {
					res, err := execs[(k+c)%len(execs)].Do(ctx, req, act)
					var ip *idempotency.InProgressError
					if try == 0 {
						if !ran && !errors.As(err, &ip) {
							t.Errorf("key %d: a first answer while the action runs: %v, want in progress", k, err)
						}
						answered[k].Add(1)
					}
					if errors.As(err, &ip) {
						select {
						case <-poll.C:
							continue
						case <-ctx.Done():
							t.Errorf("key %d: still in progress at the deadline", k)
							return
						}
					}
					if err != nil {
						t.Errorf("key %d: %v", k, err)
						return
					}
					bodies[k][c] = res.Response.Body
					return
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	for k := range keys {
		if n := runs[k].Load(); n != 1 {
			t.Errorf("key %d: the action ran %d times, want 1", k, n)
		}
		for c := range callersPerKey {
			if want := fmt.Sprintf("key %d run 1", k); string(bodies[k][c]) != want {
				t.Errorf("key %d caller %d: %q, want %q", k, c, bodies[k][c], want)
			}
		}
	}
}
