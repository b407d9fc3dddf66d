// Package testkit holds the small helpers the provider adapters' tests and their fakes' tests
// share. Only _test.go files import it.
package testkit

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

// Must(call())(t) fails t if call returned an error, and returns call's value otherwise.
func Must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

// ErrAs returns err as an E, failing t if it is none.
func ErrAs[E error](t *testing.T, err error) E {
	t.Helper()
	var target E
	if !errors.As(err, &target) {
		t.Fatalf("error %v (%T) is not a %T", err, err, target)
	}
	return target
}

// UnknownOutcome returns a check, for a table of answers, that err is a
// *provider.UnknownOutcomeError, safe to retry, on an answer with the HTTP status (0: any).
func UnknownOutcome(status int) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		t.Helper()
		ue := ErrAs[*provider.UnknownOutcomeError](t, err)
		if (status != 0 && ue.Status != status) || !ue.SafeToRetry() {
			t.Fatalf("%+v, want an unknown outcome, safe to retry, with status %d", ue, status)
		}
	}
}

// EUR parses s as an amount in euros; it panics if s is not one.
func EUR(s string) money.Money { return money.MustParse(s, money.EUR) }

// WantTotals fails t unless got is exactly want: a map (never nil), every currency, both sums,
// each as Money of its currency.
func WantTotals(t *testing.T, got, want map[money.Currency]provider.Totals) {
	t.Helper()
	ok := got != nil && len(got) == len(want)
	for cur, w := range want {
		g, found := got[cur]
		ok = ok && found && g.Charged.Equal(w.Charged) && g.Refunded.Equal(w.Refunded)
	}
	if !ok {
		t.Fatalf("totals %v, want %v", got, want)
	}
}

// RefusesBadWindows fails t unless totals, a Provider's Totals, refuses each bad window [from,
// to) around t0 (a zero bound, an empty window, a reversed one) with a final
// *provider.InvalidRequestError that names the bound at fault.
func RefusesBadWindows(t *testing.T, t0 time.Time, totals func(from, to time.Time) error) {
	t.Helper()
	for _, tc := range []struct {
		name     string
		from, to time.Time
		param    string
	}{
		{"zero from", time.Time{}, t0, "from"},
		{"zero to", t0, time.Time{}, "to"},
		{"empty", t0, t0, "to"},
		{"reversed", t0, t0.Add(-time.Hour), "to"},
	} {
		err := totals(tc.from, tc.to)
		inv := ErrAs[*provider.InvalidRequestError](t, err)
		var retrier interface{ SafeToRetry() bool }
		if inv.Param != tc.param || !strings.Contains(inv.Message, tc.param) || (errors.As(err, &retrier) && retrier.SafeToRetry()) {
			t.Fatalf("%s: %+v, want a final InvalidRequestError on %s", tc.name, inv, tc.param)
		}
	}
}

// RefundRequest is the first attempt (attempt 0) to refund amount of the charge chargeID under
// the local key: its ProviderKey derived as payments derives it, at most maxLen long.
func RefundRequest(key, chargeID string, amount money.Money, maxLen int) provider.RefundRequest {
	return provider.RefundRequest{Key: key, ProviderKey: provider.DeriveKey(key, "refund", 0, maxLen),
		ChargeID: chargeID, Amount: amount}
}

// LookupOf is the RefundLookupRequest the reconciler sends for r, without a refund id.
func LookupOf(r provider.RefundRequest) provider.RefundLookupRequest {
	return provider.RefundLookupRequest{Key: r.Key, ProviderKey: r.ProviderKey, ChargeID: r.ChargeID}
}

// OnlyRefund fails t unless got is consistent and holds exactly one refund, id, in status st
// for amount.
func OnlyRefund(t *testing.T, got provider.RefundLookupResult, id string, st provider.RefundStatus, amount money.Money) {
	t.Helper()
	if !got.Consistent || len(got.Refunds) != 1 {
		t.Fatalf("found %+v, want only %s, consistent", got, id)
	}
	if r := got.Refunds[0]; r.ProviderID != id || r.Status != st || !r.Amount.Equal(amount) || r.Replayed {
		t.Fatalf("found %+v, want %s %s for %s", r, id, st, amount)
	}
}

// Get sends GET url with the Authorization header auth ("" for none) and returns the response,
// failing t if it cannot be sent. The caller closes its body.
func Get(t *testing.T, url, auth string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Patience bounds a test's wait for an event (a delivery, a held request, a freed key): long,
// because a loaded machine stretches every step, and reached only when the event never comes.
const Patience = time.Minute

// Ctx returns a context that ends after [Patience] or with t.
func Ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Patience)
	t.Cleanup(cancel)
	return ctx
}

// DeadlineWhenHeld returns a context whose deadline passes (Err is context.DeadlineExceeded, as
// after a timeout) once the fake holds a request: waitHeld is the fake's Server.WaitHeld, with
// a Hang or Latency fault injected. A client that gives up with it is sure its request arrived,
// where a timeout of a guessed length may expire, on a loaded machine, before the request was
// even written. If no request is held within [Patience] the deadline passes anyway, and the
// test fails on its outcome.
func DeadlineWhenHeld(t *testing.T, waitHeld func(ctx context.Context, n int) error) context.Context {
	c := &expiring{done: make(chan struct{})}
	ctx := Ctx(t)
	go func() {
		_ = waitHeld(ctx, 1)
		c.once.Do(func() { close(c.done) })
	}()
	return c
}

// expiring is a context without values whose deadline passes when done is closed.
type expiring struct {
	once sync.Once
	done chan struct{}
}

func (*expiring) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *expiring) Done() <-chan struct{}     { return c.done }
func (*expiring) Value(any) any               { return nil }

func (c *expiring) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// VerifyTestMain runs m's tests and then fails the run if goroutines outlive them, as
// goleak.VerifyTestMain does, but first gives them up to [Patience] to end: goleak alone
// retries for about half a second, which the goroutines of connections closing at the end of
// the last tests can outlast on a loaded machine. A real leak still fails, a minute later.
func VerifyTestMain(m *testing.M) { goleak.VerifyTestMain(settling{m}) }

type settling struct{ m *testing.M }

func (s settling) Run() int {
	code := s.m.Run()
	for deadline := time.Now().Add(Patience); code == 0 && goleak.Find() != nil && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	return code
}
