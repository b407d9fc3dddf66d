package idempotencytest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/idempotencytest"
	"github.com/payonce/payonce/idempotency/memstore"
)

// recorder captures what CheckHTTP reports, to test the checker itself.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Helper() {}

type shop struct {
	mu     sync.Mutex
	orders map[string]int
}

func (s *shop) handler(w http.ResponseWriter, r *http.Request) {
	time.Sleep(10 * time.Millisecond)
	s.mu.Lock()
	scope := r.Header.Get("X-User")
	s.orders[scope]++
	n := s.orders[scope]
	s.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"order":%d,"scope":%q}`, n, scope)
}

func (s *shop) effects(scope string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.orders[scope]
}

func newRequest(scope, key string, variant int) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(fmt.Sprintf(`{"sku":"s","qty":%d}`, variant+1)))
	r.Header.Set("X-User", scope)
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	return r
}

func TestCheckHTTPPassesAProtectedHandler(t *testing.T) {
	t.Parallel()
	s := &shop{orders: map[string]int{}}
	exec, err := idempotency.New(memstore.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idempotency.Middleware(exec, idempotency.MiddlewareConfig{
		Scope:  func(r *http.Request) string { return r.Header.Get("X-User") },
		Routes: []idempotency.Route{{Pattern: "POST /orders", Action: "createOrder", RequireKey: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	idempotencytest.CheckHTTP(t, idempotencytest.HTTPCase{
		Handler: mw(http.HandlerFunc(s.handler)), NewRequest: newRequest, Effects: s.effects, KeyRequired: true,
	})
}

// A handler whose side effect is not part of the outcome's transaction
// (here: any handler over the plain executor) is reported when an outcome
// cannot be recorded.
func TestCheckHTTPReportsAnEscapingSideEffect(t *testing.T) {
	t.Parallel()
	s := &shop{orders: map[string]int{}}
	exec, err := idempotency.New(memstore.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{TB: t}
	idempotencytest.CheckHTTP(rec, idempotencytest.HTTPCase{
		Build: func(d idempotency.Doer) http.Handler {
			mw, err := idempotency.Middleware(d, idempotency.MiddlewareConfig{
				Scope:  func(r *http.Request) string { return r.Header.Get("X-User") },
				Routes: []idempotency.Route{{Pattern: "POST /orders", Action: "createOrder"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			return mw(http.HandlerFunc(s.handler))
		},
		Doer: exec, NewRequest: newRequest, Effects: s.effects,
	})
	all := strings.Join(rec.errs, "\n")
	if !strings.Contains(all, "escapes the transaction") {
		t.Fatalf("CheckHTTP did not report the escaping side effect; it reported:\n%s", all)
	}
	if strings.Contains(all, "replay:") || strings.Contains(all, "concurrent") {
		t.Fatalf("CheckHTTP reported more than the escaping side effect:\n%s", all)
	}
}

func TestCheckHTTPReportsABrokenHandler(t *testing.T) {
	t.Parallel()
	s := &shop{orders: map[string]int{}}
	rec := &recorder{TB: t}
	// Not protected at all: every invariant breaks.
	idempotencytest.CheckHTTP(rec, idempotencytest.HTTPCase{
		Handler: http.HandlerFunc(s.handler), NewRequest: newRequest, Effects: s.effects, KeyRequired: true,
	})
	all := strings.Join(rec.errs, "\n")
	for _, want := range []string{"replay:", "key reused with other fields", "concurrent duplicates", "missing key"} {
		if !strings.Contains(all, want) {
			t.Errorf("CheckHTTP did not report %q; it reported:\n%s", want, all)
		}
	}
}
