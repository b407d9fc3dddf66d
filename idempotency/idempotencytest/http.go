package idempotencytest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/payonce/payonce/idempotency"
)

// faultyDoer fails the recording of the next outcome, after the handler
// ran, as a lost connection at commit would.
type faultyDoer struct {
	inner    idempotency.Doer
	failNext atomic.Bool
}

var errInjected = errors.New("idempotencytest: injected failure: the outcome could not be recorded")

func (f *faultyDoer) Do(ctx context.Context, req idempotency.Request, action idempotency.Action) (idempotency.Result, error) {
	return f.inner.Do(ctx, req, func(ctx context.Context) (idempotency.Response, error) {
		resp, err := action(ctx)
		if err == nil && f.failNext.CompareAndSwap(true, false) {
			return idempotency.Response{}, errInjected
		}
		return resp, err
	})
}

// HTTPCase describes a handler under test for [CheckHTTP]: your handler,
// already wrapped by the idempotency middleware as you serve it.
type HTTPCase struct {
	// Handler is the protected handler (middleware included). Required
	// unless Build is set.
	Handler http.Handler
	// Build, with Doer, lets the checker also test what happens when an
	// outcome cannot be recorded after the handler ran (a lost database
	// connection at commit): Build must return your protected handler
	// using the Doer it is given (which wraps Doer and injects that fault)
	// in idempotency.Middleware. A handler whose side effect escapes the
	// outcome's transaction then shows a second side effect on retry.
	Build func(idempotency.Doer) http.Handler
	// Doer is the Doer your service uses (for example pgstore's
	// Executor.WithTx()). Used with Build.
	Doer idempotency.Doer
	// NewRequest builds a request of the protected route for scope (as your
	// authentication expects it) with the given Idempotency-Key ("" for
	// none). Variants 0 and 1 must differ in a significant field. Required.
	NewRequest func(scope, key string, variant int) *http.Request
	// Effects counts the side effects (rows, jobs, messages) that scope's
	// requests produced so far. Required.
	Effects func(scope string) int
	// KeyRequired says the route refuses requests without a key.
	KeyRequired bool
	// Scopes are two distinct authenticated scopes. Default
	// {"idempotencytest-a", "idempotencytest-b"}.
	Scopes [2]string
	// Concurrency is the number of simultaneous duplicates. Default 16.
	Concurrency int
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func serve(h http.Handler, r *http.Request) answer {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	res := w.Result()
	b, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, res.Header, b}
}

// CheckHTTP runs the scenario table against c's handler and reports, with
// t.Errorf, every invariant the handler breaks: a retry that is not a
// byte-for-byte replay, a retry or a duplicate that produces a second side
// effect, a reused key with other fields that is not refused, another
// scope that gets this scope's response, a missing key that is not
// refused. Keys are fresh for every run.
func CheckHTTP(t testing.TB, c HTTPCase) {
	t.Helper()
	var faulty *faultyDoer
	if c.Build != nil && c.Doer != nil {
		faulty = &faultyDoer{inner: c.Doer}
		c.Handler = c.Build(faulty)
	}
	if c.Handler == nil || c.NewRequest == nil || c.Effects == nil {
		t.Fatalf("idempotencytest.CheckHTTP: Handler (or Build and Doer), NewRequest and Effects are required")
	}
	if c.Scopes[0] == "" {
		c.Scopes = [2]string{"idempotencytest-a", "idempotencytest-b"}
	}
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	a, b := c.Scopes[0], c.Scopes[1]
	// Random keys, as clients must send (the middleware refuses guessable
	// ones by default); name is only for the reader.
	key := func(name string) string { return uuid.NewString() }

	// First request, then the same request again.
	k := key("replay")
	before := c.Effects(a)
	first := serve(c.Handler, c.NewRequest(a, k, 0))
	if first.status < 200 || first.status > 299 {
		t.Errorf("first request: status %d, want 2xx (body %q)", first.status, first.body)
		return
	}
	if got := c.Effects(a) - before; got != 1 {
		t.Errorf("first request: %d side effects, want 1", got)
	}
	again := serve(c.Handler, c.NewRequest(a, k, 0))
	if again.status != first.status || !bytes.Equal(again.body, first.body) {
		t.Errorf("replay: got %d %q, want the first answer byte for byte (%d %q)", again.status, again.body, first.status, first.body)
	}
	if again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: no Idempotent-Replayed: true header")
	}
	if got := c.Effects(a) - before; got != 1 {
		t.Errorf("replay: %d side effects in all, want 1 (the retry executed again)", got)
	}

	// Same key, other significant fields.
	mm := serve(c.Handler, c.NewRequest(a, k, 1))
	if mm.status != http.StatusConflict && mm.status != http.StatusUnprocessableEntity {
		t.Errorf("key reused with other fields: status %d, want 409 or 422", mm.status)
	}
	if len(first.body) > 0 && bytes.Contains(mm.body, first.body) {
		t.Errorf("key reused with other fields: the refusal carries the stored response")
	}
	if got := c.Effects(a) - before; got != 1 {
		t.Errorf("key reused with other fields: %d side effects in all, want 1", got)
	}

	// Concurrent duplicates.
	k = key("storm")
	before = c.Effects(a)
	answers := make([]answer, c.Concurrency)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := c.NewRequest(a, k, 0)
			<-start
			answers[i] = serve(c.Handler, r)
		}(i)
	}
	close(start)
	wg.Wait()
	var ok []byte
	for _, ans := range answers {
		switch {
		case ans.status >= 200 && ans.status <= 299:
			if ok != nil && !bytes.Equal(ok, ans.body) {
				t.Errorf("concurrent duplicates: two different successful answers: %q and %q", ok, ans.body)
			}
			ok = ans.body
		case ans.status == http.StatusConflict:
		default:
			t.Errorf("concurrent duplicates: status %d, want 2xx or 409 (%q)", ans.status, ans.body)
		}
	}
	if got := c.Effects(a) - before; got != 1 {
		t.Errorf("concurrent duplicates: %d side effects, want exactly 1", got)
	}

	// Another scope, the same key.
	k = key("scoped")
	firstA := serve(c.Handler, c.NewRequest(a, k, 0))
	otherB := serve(c.Handler, c.NewRequest(b, k, 0))
	if otherB.header.Get("Idempotent-Replayed") == "true" || (len(firstA.body) > 0 && bytes.Equal(otherB.body, firstA.body)) {
		t.Errorf("another scope with the same key got the first scope's response")
	}

	// The outcome cannot be recorded after the handler ran: whatever the
	// handler did must be undone with it, or the retry does it again.
	if faulty != nil {
		k = key("unrecorded")
		before = c.Effects(a)
		faulty.failNext.Store(true)
		failed := serve(c.Handler, c.NewRequest(a, k, 0))
		if failed.status >= 200 && failed.status <= 299 {
			t.Errorf("outcome not recorded: the client was told %d (success) although nothing was recorded", failed.status)
		}
		retry := serve(c.Handler, c.NewRequest(a, k, 0))
		if retry.status < 200 || retry.status > 299 {
			t.Errorf("outcome not recorded, then retried: status %d, want 2xx", retry.status)
		}
		if got := c.Effects(a) - before; got != 1 {
			t.Errorf("outcome not recorded, then retried: %d side effects, want 1 (the handler's side effect escapes the transaction of its outcome)", got)
		}
	}

	// No key.
	if c.KeyRequired {
		before = c.Effects(a)
		nk := serve(c.Handler, c.NewRequest(a, "", 0))
		if nk.status != http.StatusBadRequest {
			t.Errorf("missing key: status %d, want 400", nk.status)
		}
		if c.Effects(a) != before {
			t.Errorf("missing key: the request had a side effect")
		}
	}
}
