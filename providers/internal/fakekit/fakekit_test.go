package fakekit_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payonce/payonce/providers/internal/fakekit"
	"github.com/payonce/payonce/providers/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// faultType reads a fake's Fault that is a Spec already. Its provider answers 503 to
// FailBefore, 500 to FailAfter, with the reason in the body.
var faultType = fakekit.FaultType[fault]{
	Name:  "kit",
	Paths: fakekit.PathPattern,
	Spec:  func(f fault) fakekit.Spec { return f },
	Fail: func(w http.ResponseWriter, kind fakekit.FaultKind, why string) {
		http.Error(w, why, map[fakekit.FaultKind]int{fakekit.FailBefore: 503, fakekit.FailAfter: 500}[kind])
	},
}

type fault = fakekit.Spec

// at is a request to path.
func at(path string) fakekit.Request { return fakekit.Request{Method: http.MethodPost, Path: path} }

func TestManualClock(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	c := fakekit.NewManualClock(start)
	c.Advance(90 * time.Minute)
	if got := c.Now(); !got.Equal(start.Add(90 * time.Minute)) {
		t.Fatalf("Now() = %v", got)
	}
}

func TestFaultKindString(t *testing.T) {
	if s := fakekit.ResetAfter.String(); s != "ResetAfter" {
		t.Fatalf("ResetAfter.String() = %q", s)
	}
	if s := fakekit.FaultKind(42).String(); s != "FaultKind(?)" {
		t.Fatalf("FaultKind(42).String() = %q", s)
	}
}

func TestValidation(t *testing.T) {
	for _, tc := range []struct {
		rules []fault
		want  string
	}{
		{[]fault{{Kind: fakekit.FailBefore, Probability: 0}}, "Config.Faults[0].Probability must be in (0, 1], got 0"},
		{[]fault{{Kind: fakekit.FailBefore, Probability: 1}, {Kind: fakekit.Hang, Probability: 1.5}}, "Config.Faults[1].Probability must be in (0, 1], got 1.5"},
		{[]fault{{Kind: fakekit.NoFault, Probability: 1}}, "Config.Faults[0]: Kind is not a known FaultKind"},
		{[]fault{{Kind: fakekit.Latency, Probability: 1}}, "Config.Faults[0]: Delay must be positive for Latency"},
		{[]fault{{Kind: fakekit.Hang, Probability: 1, Path: "payments"}}, `Config.Faults[0]: Path "payments" must start with "/"`},
		{[]fault{{Kind: fakekit.Hang, Probability: 1, Path: "/payments/["}}, `Config.Faults[0]: Path "/payments/[" is not a valid pattern: syntax error in pattern`},
		{[]fault{{Kind: fakekit.Latency, Delay: time.Second, Probability: 1, Path: "/ok"}}, ""},
	} {
		err := faultType.ValidateRules(tc.rules)
		if got := fmtErr(err); got != tc.want {
			t.Errorf("ValidateRules(%+v) = %q, want %q", tc.rules, got, tc.want)
		}
	}
	faults := fakekit.NewFaults(faultType, nil, nil, 0, 0)
	if err := faults.Inject(fault{Kind: fakekit.Hang, Path: "x"}); err == nil {
		t.Fatal("Inject accepted an invalid fault")
	}
	defer func() {
		if r := recover(); r != `kit: Inject: Path "x" must start with "/"` {
			t.Fatalf("MustInject of an invalid fault: panic %v", r)
		}
	}()
	faults.MustInject(fault{Kind: fakekit.Hang, Path: "x"})
}

// A Spec's fields are ANDed, an empty one matching any request; a Path matches as its rule says.
func TestSpecMatches(t *testing.T) {
	req := fakekit.Request{Method: "POST", Path: "/v1/refunds/re_1/", Key: "k1"}
	for _, tc := range []struct {
		spec  fakekit.Spec
		paths fakekit.PathRule
		want  bool
	}{
		{fakekit.Spec{}, fakekit.PathPrefix, true},
		{fakekit.Spec{}, fakekit.PathPattern, true},
		{fakekit.Spec{Method: "post", Key: "k1"}, fakekit.PathPrefix, true},
		{fakekit.Spec{Method: "GET"}, fakekit.PathPrefix, false},
		{fakekit.Spec{Key: "k2"}, fakekit.PathPrefix, false},
		{fakekit.Spec{Path: "/v1/refunds"}, fakekit.PathPrefix, true},
		{fakekit.Spec{Path: "/v1/refunds"}, fakekit.PathPattern, false}, // the collection, not an item
		{fakekit.Spec{Path: "/v1/refunds/re_1"}, fakekit.PathPattern, true},
		{fakekit.Spec{Path: "/v1/refunds/*"}, fakekit.PathPattern, true},
		{fakekit.Spec{Path: "/v1/*"}, fakekit.PathPattern, false}, // "*" is one segment
		{fakekit.Spec{Path: "/v2/"}, fakekit.PathPrefix, false},
	} {
		if got := tc.spec.Matches(tc.paths, req); got != tc.want {
			t.Errorf("%+v.Matches(%v, %+v) = %v, want %v", tc.spec, tc.paths, req, got, tc.want)
		}
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestInjectedFaultsAreOneShotInOrder(t *testing.T) {
	p := fakekit.NewFaults(faultType, nil, nil, 0, 0)
	for _, f := range []fault{{Kind: fakekit.FailBefore, Path: "/x"}, {Kind: fakekit.FailAfter, Path: "/y"}, {Kind: fakekit.Hang, Path: "/x"}} {
		if err := p.Inject(f); err != nil {
			t.Fatal(err)
		}
	}
	var got []fakekit.FaultKind
	for _, path := range []string{"/x", "/x", "/x", "/y", "/y"} {
		got = append(got, p.Pick(at(path)).Kind)
	}
	want := []fakekit.FaultKind{fakekit.FailBefore, fakekit.Hang, fakekit.NoFault, fakekit.FailAfter, fakekit.NoFault}
	if !equal(got, want) {
		t.Fatalf("picked %v, want %v", got, want)
	}
}

func TestRulesAreSeeded(t *testing.T) {
	rules := []fault{{Kind: fakekit.FailBefore, Probability: 0.5, Path: "/x"}}
	draw := func(seed int64) []fakekit.FaultKind {
		p := fakekit.NewFaults(faultType, nil, rules, seed, 7)
		var out []fakekit.FaultKind
		for range 64 {
			out = append(out, p.Pick(at("/x")).Kind)
			if k := p.Pick(at("/other")).Kind; k != fakekit.NoFault {
				t.Fatalf("a rule for /x applied to /other: %v", k)
			}
		}
		return out
	}
	a, b, c := draw(3), draw(3), draw(4)
	if !equal(a, b) {
		t.Fatal("the same seed gave other faults")
	}
	if equal(a, c) {
		t.Fatal("another seed gave the same 64 draws")
	}
	hits := 0
	for _, k := range a {
		if k == fakekit.FailBefore {
			hits++
		}
	}
	if hits < 16 || hits > 48 {
		t.Fatalf("%d of 64 draws hit at probability 0.5", hits)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestKeys(t *testing.T) {
	ks := fakekit.NewKeys[string, int]()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	e, st := ks.Claim("k", t0, time.Hour, "POST /a", "x=1")
	if st != fakekit.KeyNew {
		t.Fatalf("first claim: %v", st)
	}
	if e2, st := ks.Claim("k", t0, time.Hour, "POST /a", "x=1"); st != fakekit.KeyInProgress || e2 != e {
		t.Fatalf("claim while executing: %v", st)
	}
	ks.Complete(e, 42)
	e3, st := ks.Claim("k", t0.Add(59*time.Minute), time.Hour, "POST /b", "x=2")
	if st != fakekit.KeyDone || e3.Result() != 42 || e3.Matches("POST /b", "x=2") || !e3.Matches("POST /a", "x=1") {
		t.Fatalf("claim after completion: state %v, result %d, endpoint %q params %q", st, e3.Result(), e3.Endpoint, e3.Params)
	}
	if _, st := ks.Claim("k", t0.Add(time.Hour), time.Hour, "POST /a", "x=1"); st != fakekit.KeyNew {
		t.Fatalf("claim after the retention: %v, want a new entry", st)
	}

	// Release forgets only the entry it is given.
	old, _ := ks.Claim("r", t0, time.Hour, "", "")
	ks.Release(old)
	cur, st := ks.Claim("r", t0, time.Hour, "", "")
	if st != fakekit.KeyNew {
		t.Fatalf("claim after release: %v", st)
	}
	ks.Release(old) // stale: must not forget cur
	if _, st := ks.Claim("r", t0, time.Hour, "", ""); st != fakekit.KeyInProgress {
		t.Fatalf("a stale release forgot the current entry: %v", st)
	}
	ks.Release(cur)
	ks.Release(nil)
	ks.Complete(nil, 1)
}

func TestLifecycle(t *testing.T) {
	l := fakekit.NewLifecycle("kit")
	if l.URL() != "" {
		t.Fatal("URL before Start")
	}
	l.Start(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !l.Before(r.Context(), fakekit.Hang, 0) {
			return
		}
		w.WriteHeader(http.StatusTeapot)
	}))
	func() {
		defer func() {
			if r := recover(); r != "kit: Server already started" {
				t.Fatalf("second Start: panic %v", r)
			}
		}()
		l.Start(http.NotFoundHandler())
	}()
	if !strings.HasPrefix(l.URL(), "http://127.0.0.1:") {
		t.Fatalf("URL() = %q", l.URL())
	}

	errc := make(chan error, 1)
	go func() {
		resp, err := http.Get(l.URL())
		if err == nil {
			_ = resp.Body.Close()
		}
		errc <- err
	}()
	if err := l.WaitHeld(testkit.Ctx(t), 1, errClosed); err != nil {
		t.Fatalf("the request never hung: %v", err)
	}
	stopped := false
	l.Close(func() { stopped = true })
	if !stopped {
		t.Fatal("Close did not run stop")
	}
	select {
	case <-errc: // released: an empty answer or a closed connection
	case <-time.After(testkit.Patience):
		t.Fatal("the hung request was not released by Close")
	}
	l.Close(nil) // again: no panic
	if err := l.WaitHeld(context.Background(), 1, errClosed); !errors.Is(err, errClosed) {
		t.Fatalf("WaitHeld after Close = %v, want errClosed", err)
	}

	if l.Before(context.Background(), fakekit.Latency, time.Hour) {
		t.Fatal("Latency after Close waited")
	}
	if l.Before(context.Background(), fakekit.FailBefore, 0) || !l.Before(context.Background(), fakekit.ResetAfter, 0) {
		t.Fatal("Before: FailBefore must stop, ResetAfter go on")
	}
}

// WaitHeld counts the requests held now by Latency or Hang; EndLatency lets the Latency ones go
// on at once, and only the ones held when it is called.
func TestWaitHeldAndEndLatency(t *testing.T) {
	l := fakekit.NewLifecycle("kit")
	defer l.Close(nil)
	hangCtx, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	wentOn := make(chan bool, 3)
	go func() { wentOn <- l.Before(context.Background(), fakekit.Latency, time.Hour) }()
	go func() { wentOn <- l.Before(hangCtx, fakekit.Hang, 0) }()
	if err := l.WaitHeld(testkit.Ctx(t), 2, errClosed); err != nil {
		t.Fatal(err)
	}
	l.EndLatency()
	if !<-wentOn {
		t.Fatal("a Latency ended by EndLatency did not go on")
	}
	// The hang is still held, alone: one held, not two.
	if err := l.WaitHeld(testkit.Ctx(t), 1, errClosed); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.WaitHeld(ended, 2, errClosed); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitHeld(2) with one held = %v, want the context's error", err)
	}
	giveUp()
	if <-wentOn {
		t.Fatal("an abandoned Hang went on")
	}
	// A Latency that starts after EndLatency waits its Delay.
	go func() { wentOn <- l.Before(context.Background(), fakekit.Latency, time.Hour) }()
	if err := l.WaitHeld(testkit.Ctx(t), 1, errClosed); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wentOn:
		t.Fatal("a Latency after EndLatency did not wait")
	default:
	}
	l.Close(nil)
	if <-wentOn {
		t.Fatal("a Latency released by Close went on")
	}
}

// Apply applies a whole fault to a request that executes nothing new, answering failures with
// the fake's Fail.
func TestApply(t *testing.T) {
	l := fakekit.NewLifecycle("kit")
	defer l.Close(nil)
	faults := fakekit.NewFaults(faultType, l, nil, 0, 0)
	for _, tc := range []struct {
		kind   fakekit.FaultKind
		goOn   bool
		status int
		body   string
	}{
		{fakekit.NoFault, true, 200, ""},
		{fakekit.Latency, true, 200, ""},
		{fakekit.FailBefore, false, 503, "injected FailBefore: nothing was executed\n"},
		{fakekit.FailAfter, false, 500, "injected FailAfter: nothing new was executed\n"},
	} {
		if tc.kind != fakekit.NoFault {
			faults.MustInject(fault{Kind: tc.kind, Delay: time.Millisecond, Path: "/x"})
		}
		w := httptest.NewRecorder()
		goOn := faults.Apply(w, httptest.NewRequest(http.MethodPost, "/x", nil), at("/x"))
		if goOn != tc.goOn || w.Code != tc.status || w.Body.String() != tc.body {
			t.Errorf("Apply under %v = %v with %d %q, want %v with %d %q", tc.kind, goOn, w.Code, w.Body, tc.goOn, tc.status, tc.body)
		}
	}
}

// BeforeExecute applies the part of a fault before execution; a request that must not go on
// has its key released, and a FailBefore is answered with the fake's Fail.
func TestBeforeExecute(t *testing.T) {
	l := fakekit.NewLifecycle("kit")
	defer l.Close(nil)
	faults := fakekit.NewFaults(faultType, l, nil, 0, 0)
	gaveUp, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		kind     fakekit.FaultKind
		execute  bool
		released bool
		status   int
	}{
		{fakekit.NoFault, true, false, 200},
		{fakekit.FailBefore, false, true, 503},
		{fakekit.FailAfter, true, false, 200}, // the fake answers it after executing
		{fakekit.Hang, false, true, 200},      // abandoned by its client: nothing answered
	} {
		if tc.kind != fakekit.NoFault {
			faults.MustInject(fault{Kind: tc.kind, Path: "/x"})
		}
		w := httptest.NewRecorder()
		released := false
		r := httptest.NewRequestWithContext(gaveUp, http.MethodPost, "/x", nil)
		kind, execute := faults.BeforeExecute(w, r, at("/x"), func() { released = true })
		if kind != tc.kind || execute != tc.execute || released != tc.released || w.Code != tc.status {
			t.Errorf("BeforeExecute under %v = %v, %v (released %v) with %d, want %v, %v (released %v) with %d",
				tc.kind, kind, execute, released, w.Code, tc.kind, tc.execute, tc.released, tc.status)
		}
	}
}

func TestAnswerExecuted(t *testing.T) {
	w := httptest.NewRecorder()
	fakekit.AnswerExecuted(w, fakekit.FailAfter, "k1", func(w http.ResponseWriter) { w.WriteHeader(500) })
	if w.Code != 500 || w.Header().Get("Idempotency-Key") != "k1" {
		t.Fatalf("answered %d with Idempotency-Key %q, want 500 with k1", w.Code, w.Header().Get("Idempotency-Key"))
	}
	w = httptest.NewRecorder()
	fakekit.AnswerExecuted(w, fakekit.NoFault, "", func(w http.ResponseWriter) { w.WriteHeader(201) })
	if w.Code != 201 || w.Header().Get("Idempotency-Key") != "" {
		t.Fatalf("answered %d with headers %v, want 201 without Idempotency-Key", w.Code, w.Header())
	}
}

func TestResetConnection(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fakekit.ResetConnection(w)
	}))
	defer srv.Close()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Post(srv.URL, "text/plain", nil)
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("got a response %s, want the connection dropped", resp.Status)
	}
}

func TestServeAdmin(t *testing.T) {
	gets := map[string]fakekit.AdminGet{
		"counts": func(q url.Values) (any, error) {
			if !q.Has("k") {
				return nil, errors.New("counts needs k")
			}
			return map[string]string{"k": q.Get("k")}, nil
		},
	}
	for _, tc := range []struct {
		method, target string
		status         int
		body           string
	}{
		{http.MethodGet, "/_fake/counts?k=v", 200, `{"k":"v"}`},
		{http.MethodGet, "/_fake/counts", 400, "counts needs k"},
		{http.MethodGet, "/_fake/other", 404, "404 page not found"},
		{http.MethodPost, "/_fake/counts?k=v", 405, "method not allowed"},
	} {
		w := httptest.NewRecorder()
		fakekit.ServeAdmin(w, httptest.NewRequest(tc.method, tc.target, nil), gets)
		if w.Code != tc.status || strings.TrimSpace(w.Body.String()) != tc.body {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.target, w.Code, w.Body, tc.status, tc.body)
		}
	}
}

func TestValidateWebhooks(t *testing.T) {
	for _, tc := range []struct {
		url  string
		dups int
		want string
	}{
		{"", 0, ""},
		{"https://example.test/hook", 2, ""},
		{"", -1, "Config.DuplicateWebhooks must not be negative, got -1"},
		{"example.test/hook", 0, `Config.WebhookURL must be an absolute http(s) URL, got "example.test/hook"`},
	} {
		if got := fmtErr(fakekit.ValidateWebhooks(tc.url, tc.dups)); got != tc.want {
			t.Errorf("ValidateWebhooks(%q, %d) = %q, want %q", tc.url, tc.dups, got, tc.want)
		}
	}
}

type event struct {
	n                 int
	delivered, failed int
}

// receiver records delivery bodies; it fails the first failFirst requests. Once hang is set,
// it holds every request until its client gives up, after a send on arrived.
type receiver struct {
	*httptest.Server
	mu        sync.Mutex
	bodies    []string
	headers   []http.Header
	failFirst int
	hang      bool
	arrived   chan struct{}
}

func newReceiver(t *testing.T, failFirst int) *receiver {
	rc := &receiver{failFirst: failFirst, arrived: make(chan struct{}, 1)}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.bodies = append(rc.bodies, string(b))
		rc.headers = append(rc.headers, r.Header.Clone())
		fail, hang := len(rc.bodies) <= rc.failFirst, rc.hang
		rc.mu.Unlock()
		if hang {
			select {
			case rc.arrived <- struct{}{}:
			default:
			}
			<-r.Context().Done()
			return
		}
		if fail {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

var errClosed = errors.New("kit: closed")

func newDeliveries(url string, dups, batch int) *fakekit.Deliveries[event] {
	return fakekit.NewDeliveries(fakekit.DeliveryConfig[event]{
		URL: url, Duplicates: dups, Batch: batch,
		Payload: func(b []*event) []byte {
			ns := make([]int, len(b))
			for i, ev := range b {
				ns[i] = ev.n
			}
			p, _ := json.Marshal(ns)
			return p
		},
		Header:    func(p []byte) http.Header { return http.Header{"X-Sig": {string(p)}} },
		Counters:  func(ev *event) (*int, *int) { return &ev.delivered, &ev.failed },
		ErrClosed: errClosed,
	})
}

func TestDeliveriesInOrderWithDuplicatesAndRetries(t *testing.T) {
	rc := newReceiver(t, 2) // the first delivery is retried twice
	d := newDeliveries(rc.URL, 1, 2)
	defer d.Close()
	if !d.Delivering() {
		t.Fatal("Delivering() = false with a URL")
	}
	for i := range 3 {
		d.Emit(func(seq int64) *event {
			if seq != int64(i+1) {
				t.Errorf("seq %d for event %d", seq, i)
			}
			return &event{n: i}
		})
	}
	if err := d.Wait(testkit.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	bodies, headers := rc.bodies, rc.headers
	rc.mu.Unlock()
	for i, b := range bodies {
		if headers[i].Get("X-Sig") != b {
			t.Fatalf("delivery %d: header %q for body %q", i, headers[i].Get("X-Sig"), b)
		}
	}
	evs := d.Events(func(e *event) event { return *e })
	if len(evs) != 3 {
		t.Fatalf("%d events", len(evs))
	}
	for _, ev := range evs {
		if ev.delivered != 2 || ev.failed != 0 {
			t.Fatalf("event %d: delivered %d, failed %d; want 2 (one duplicate), 0", ev.n, ev.delivered, ev.failed)
		}
	}
	// The first batch carries the events queued when the goroutine woke: [0] or [0,1], failed
	// twice, then delivered twice.
	if first := bodies[0]; (first != "[0]" && first != "[0,1]") || bodies[1] != first || bodies[2] != first || bodies[3] != first {
		t.Fatalf("first delivery %s", first)
	}
	if last := bodies[len(bodies)-1]; !strings.HasSuffix(last, "2]") {
		t.Fatalf("last delivery %s, want the last event last", last)
	}
}

func TestDeliveriesAbandonAndClose(t *testing.T) {
	rc := newReceiver(t, 1<<30) // always fails
	d := newDeliveries(rc.URL, 0, 0)
	d.Emit(func(int64) *event { return &event{n: 1} })
	if err := d.Wait(testkit.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	n := len(rc.bodies)
	rc.mu.Unlock()
	if n != fakekit.WebhookAttempts {
		t.Fatalf("%d attempts, want %d", n, fakekit.WebhookAttempts)
	}
	if evs := d.Events(func(e *event) event { return *e }); evs[0].failed != 1 || evs[0].delivered != 0 {
		t.Fatalf("event after abandoning: %+v", evs[0])
	}

	// Close cuts a delivery in progress short; Wait then says so, whether it was waiting already
	// or is called afterwards.
	rc.mu.Lock()
	rc.hang = true
	rc.mu.Unlock()
	d.Emit(func(int64) *event { return &event{n: 2} })
	select {
	case <-rc.arrived:
	case <-time.After(testkit.Patience):
		t.Fatal("the delivery never arrived")
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- d.Wait(context.Background()) }()
	d.Close()
	if err := <-waitErr; !errors.Is(err, errClosed) {
		t.Fatalf("Wait during Close = %v", err)
	}
	if err := d.Wait(context.Background()); !errors.Is(err, errClosed) {
		t.Fatalf("Wait after Close = %v", err)
	}
	if evs := d.Events(func(e *event) event { return *e }); evs[1].failed != 1 || evs[1].delivered != 0 {
		t.Fatalf("the delivery Close cut short: %+v", evs[1])
	}
	d.Emit(func(int64) *event { return &event{n: 3} }) // recorded, not delivered
	if evs := d.Events(func(e *event) event { return *e }); len(evs) != 3 || evs[2].delivered+evs[2].failed != 0 {
		t.Fatalf("events after Close: %+v", evs)
	}
}

func TestDeliveriesWithoutURL(t *testing.T) {
	d := newDeliveries("", 0, 0)
	defer d.Close()
	d.Emit(func(int64) *event { return &event{n: 1} })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Wait(ctx); err != nil || d.Delivering() {
		t.Fatalf("Wait = %v, Delivering = %v", err, d.Delivering())
	}
	if evs := d.Events(func(e *event) event { return *e }); len(evs) != 1 {
		t.Fatalf("%d events recorded", len(evs))
	}
}
