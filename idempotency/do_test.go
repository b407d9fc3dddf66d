package idempotency_test

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/memstore"
)

type shipment struct {
	Order string   `json:"order"`
	Items []string `json:"items"`
	Sent  time.Time
}

type label struct {
	Tracking string
	Cost     int64
	Parts    []string
}

func newDoExec(t *testing.T) (*idempotency.Executor, *memstore.Store) {
	t.Helper()
	store := memstore.New(nil)
	exec, err := idempotency.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	return exec, store
}

// A retry gets the first value, decoded, and fn runs once; another input
// under the same key is refused and runs nothing.
func TestDoReplaysTheValueAndRefusesAnotherInput(t *testing.T) {
	exec, _ := newDoExec(t)
	ctx := context.Background()
	runs := 0
	fn := func(context.Context) (label, error) {
		runs++
		return label{Tracking: "trk_1", Cost: 499, Parts: []string{"a", "b"}}, nil
	}
	in := shipment{Order: "ord_1", Items: []string{"sku-1"}}
	var res idempotency.Result
	first, err := idempotency.Do(ctx, exec, "shop_1", "ship_ord_1", in, fn, idempotency.ReportResult(&res))
	if err != nil || res.Replayed {
		t.Fatalf("first call: %v, replayed=%v", err, res.Replayed)
	}
	again, err := idempotency.Do(ctx, exec, "shop_1", "ship_ord_1", in, fn, idempotency.ReportResult(&res))
	if err != nil || !res.Replayed {
		t.Fatalf("retry: %v, replayed=%v", err, res.Replayed)
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times, want 1", runs)
	}
	if again.Tracking != "trk_1" || again.Cost != 499 || strings.Join(again.Parts, ",") != "a,b" ||
		first.Tracking != again.Tracking || strings.Join(first.Parts, ",") != "a,b" {
		t.Fatalf("values differ: first %+v, replay %+v", first, again)
	}
	other := shipment{Order: "ord_1", Items: []string{"sku-2"}}
	v, err := idempotency.Do(ctx, exec, "shop_1", "ship_ord_1", other, fn)
	if !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("another input under the key: %v, want ErrFingerprintMismatch", err)
	}
	if runs != 1 || v.Tracking != "" {
		t.Fatalf("a mismatch ran fn (runs=%d) or returned a value (%+v)", runs, v)
	}
}

// The default fingerprint is the canonical JSON of the input: the order
// of a map's keys and the Go type do not matter, the values do.
func TestDoDefaultFingerprintIsCanonical(t *testing.T) {
	exec, _ := newDoExec(t)
	ctx := context.Background()
	runs := 0
	fn := func(context.Context) (int, error) { runs++; return 7, nil }
	type in struct {
		B int    `json:"b"`
		A string `json:"a"`
	}
	if _, err := idempotency.Do(ctx, exec, "s", "k1", in{B: 1, A: "x"}, fn); err != nil {
		t.Fatal(err)
	}
	for _, same := range []any{map[string]any{"a": "x", "b": 1}, struct {
		A string `json:"a"`
		B int    `json:"b"`
	}{"x", 1}, in{B: 1, A: "x"}} {
		if v, err := idempotency.Do(ctx, exec, "s", "k1", same, fn); err != nil || v != 7 {
			t.Fatalf("equal input %#v: %v, %v", same, v, err)
		}
	}
	if _, err := idempotency.Do(ctx, exec, "s", "k1", in{B: 2, A: "x"}, fn); !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("other input: %v, want ErrFingerprintMismatch", err)
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times, want 1", runs)
	}
}

// With SignificantFields, a volatile field of the input does not refuse
// a retry; a significant one does.
func TestDoSignificantFields(t *testing.T) {
	exec, _ := newDoExec(t)
	ctx := context.Background()
	runs := 0
	fn := func(context.Context) (string, error) { runs++; return "ok", nil }
	call := func(in shipment) (string, error) {
		return idempotency.Do(ctx, exec, "s", "k", in, fn, idempotency.SignificantFields(
			idempotency.NewFingerprint().String("order", in.Order).String("items", strings.Join(in.Items, ","))))
	}
	if _, err := call(shipment{Order: "o", Items: []string{"x"}, Sent: time.Unix(1, 0)}); err != nil {
		t.Fatal(err)
	}
	if v, err := call(shipment{Order: "o", Items: []string{"x"}, Sent: time.Unix(2, 0)}); err != nil || v != "ok" {
		t.Fatalf("retry with another timestamp: %q, %v; want the replay", v, err)
	}
	if _, err := call(shipment{Order: "o", Items: []string{"y"}}); !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("other items: %v, want ErrFingerprintMismatch", err)
	}
	// Without SignificantFields, the timestamp counts: the retry is refused.
	if _, err := idempotency.Do(ctx, exec, "s", "k2", shipment{Order: "o", Sent: time.Unix(1, 0)}, fn); err != nil {
		t.Fatal(err)
	}
	if _, err := idempotency.Do(ctx, exec, "s", "k2", shipment{Order: "o", Sent: time.Unix(2, 0)}, fn); !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("whole-input fingerprint with another timestamp: %v, want ErrFingerprintMismatch", err)
	}
	if runs != 2 {
		t.Fatalf("fn ran %d times, want 2", runs)
	}
}

// Bad input gets an *InvalidError naming what is wrong, and runs nothing.
func TestDoRefusesBadInput(t *testing.T) {
	exec, _ := newDoExec(t)
	ctx := context.Background()
	runs := 0
	fn := func(context.Context) (int, error) { runs++; return 1, nil }
	var nilShipment *shipment
	for _, c := range []struct {
		name string
		call func() error
		want string
	}{
		{"nil input", func() error { _, err := idempotency.Do(ctx, exec, "s", "k", nil, fn); return err }, "Do: input"},
		{"nil pointer input", func() error { _, err := idempotency.Do(ctx, exec, "s", "k", nilShipment, fn); return err }, "Do: input"},
		{"input without JSON", func() error {
			_, err := idempotency.Do(ctx, exec, "s", "k", make(chan int), fn)
			return err
		}, "SignificantFields"},
		{"bad field", func() error {
			_, err := idempotency.Do(ctx, exec, "s", "k", nil, fn, idempotency.SignificantFields(idempotency.NewFingerprint().Decimal("amount", "4x")))
			return err
		}, "amount"},
		{"nil exec", func() error { _, err := idempotency.Do(ctx, nil, "s", "k", 1, fn); return err }, "Do: exec"},
		{"nil fn", func() error { _, err := idempotency.Do[int](ctx, exec, "s", "k", 1, nil); return err }, "Do: fn"},
		{"nil codec", func() error {
			_, err := idempotency.Do(ctx, exec, "s", "k", 1, fn, idempotency.WithCodec(nil))
			return err
		}, "WithCodec"},
		{"negative wait", func() error {
			_, err := idempotency.Do(ctx, exec, "s", "k", 1, fn, idempotency.WaitInFlight(-time.Second))
			return err
		}, "WaitInFlight"},
		{"bad key", func() error { _, err := idempotency.Do(ctx, exec, "s", "a key", 1, fn); return err }, "key"},
	} {
		err := c.call()
		if !errors.Is(err, idempotency.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an *InvalidError naming %q", c.name, err, c.want)
		}
	}
	if runs != 0 {
		t.Fatalf("fn ran %d times on bad input", runs)
	}
}

// gobCodec is a codec other than JSON.
type gobCodec struct{ used *atomic.Int64 }

func (c gobCodec) Marshal(v any) ([]byte, error) {
	c.used.Add(1)
	var b bytes.Buffer
	err := gob.NewEncoder(&b).Encode(v)
	return b.Bytes(), err
}

func (c gobCodec) Unmarshal(data []byte, v any) error {
	c.used.Add(1)
	return gob.NewDecoder(bytes.NewReader(data)).Decode(v)
}

func TestDoWithCodec(t *testing.T) {
	exec, store := newDoExec(t)
	ctx := context.Background()
	used := &atomic.Int64{}
	codec := idempotency.WithCodec(gobCodec{used})
	want := label{Tracking: "trk_9", Cost: 1, Parts: []string{"p"}}
	fn := func(context.Context) (label, error) { return want, nil }
	if _, err := idempotency.Do(ctx, exec, "s", "k", "in", fn, codec); err != nil {
		t.Fatal(err)
	}
	got, err := idempotency.Do(ctx, exec, "s", "k", "in", fn, codec)
	if err != nil || got.Tracking != want.Tracking || got.Parts[0] != "p" {
		t.Fatalf("replay: %+v, %v", got, err)
	}
	if used.Load() != 3 { // encode, decode for the first caller, decode for the replay
		t.Fatalf("codec used %d times, want 3", used.Load())
	}
	rec, err := store.Get(ctx, "s", "k")
	if err != nil {
		t.Fatal(err)
	}
	var stored label
	if err := gob.NewDecoder(bytes.NewReader(rec.Response.Body)).Decode(&stored); err != nil || stored.Tracking != "trk_9" {
		t.Fatalf("stored body is not the codec's: %v", err)
	}
	// The JSON codec cannot read it: an error naming the key's hash, not the key.
	_, err = idempotency.Do(ctx, exec, "s", "k", "in", fn)
	if err == nil || !strings.Contains(err.Error(), idempotency.ShortHash("k")) || strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("decode with another codec: %v", err)
	}
}

// A value the codec cannot encode is stored FAILED: fn ran, so a retry
// must not run it again.
func TestDoUnencodableValueIsNotRunAgain(t *testing.T) {
	exec, _ := newDoExec(t)
	ctx := context.Background()
	runs := 0
	fn := func(context.Context) (func(), error) { runs++; return func() {}, nil }
	for i := 0; i < 2; i++ {
		_, err := idempotency.Do(ctx, exec, "s", "k", 1, fn)
		if !errors.Is(err, idempotency.ErrFailed) {
			t.Fatalf("call %d: %v, want ErrFailed", i, err)
		}
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times, want 1", runs)
	}
}

// A transient error releases the key: the retry runs fn again; a
// permanent one is replayed.
func TestDoErrors(t *testing.T) {
	exec, _ := newDoExec(t)
	ctx := context.Background()
	boom := errors.New("broker down")
	runs := 0
	_, err := idempotency.Do(ctx, exec, "s", "k", 1, func(context.Context) (int, error) { runs++; return 0, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("transient: %v", err)
	}
	v, err := idempotency.Do(ctx, exec, "s", "k", 1, func(context.Context) (int, error) { runs++; return 5, nil })
	if err != nil || v != 5 || runs != 2 {
		t.Fatalf("retry after a transient error: %v, %v, runs=%d", v, err, runs)
	}
	perm := func(context.Context) (int, error) {
		runs++
		return 0, idempotency.Permanent(errors.New("no such order"), idempotency.Response{Code: 404})
	}
	for i := 0; i < 2; i++ {
		var fe *idempotency.FailedError
		if _, err := idempotency.Do(ctx, exec, "s", "k2", 1, perm); !errors.As(err, &fe) || fe.Response.Code != 404 {
			t.Fatalf("permanent, call %d: %v", i, err)
		}
	}
	if runs != 3 {
		t.Fatalf("fn ran %d times, want 3", runs)
	}
}

// inProgressCounter is a store that reports each claim answered "in
// progress", so that a test can hold the first caller until the others
// have met it.
type inProgressCounter struct {
	idempotency.Store
	seen chan struct{}
}

func (s inProgressCounter) Claim(ctx context.Context, p idempotency.ClaimParams) (idempotency.Claim, error) {
	c, err := s.Store.Claim(ctx, p)
	if err == nil && c.State == idempotency.ClaimInProgress {
		select {
		case s.seen <- struct{}{}:
		default:
		}
	}
	return c, err
}

// Concurrent callers on one key: fn runs once, and every caller gets the
// same decoded value (the others wait for it with WaitInFlight).
func TestDoConcurrentCallersGetOneValue(t *testing.T) {
	store := inProgressCounter{Store: memstore.New(nil), seen: make(chan struct{}, 64)}
	exec, err := idempotency.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkConcurrentDo(t, exec, store.seen)
}

func checkConcurrentDo(t *testing.T, exec idempotency.Doer, seen <-chan struct{}) {
	t.Helper()
	const callers = 8
	ctx := context.Background()
	var runs atomic.Int64
	fn := func(context.Context) (label, error) {
		n := runs.Add(1)
		// Hold the key until it has been found in progress callers-1 times
		// (by the other callers, waiting for the outcome).
		for i := 0; i < callers-1; i++ {
			select {
			case <-seen:
			case <-time.After(20 * time.Second):
				return label{}, errors.New("the other callers never met the held key")
			}
		}
		return label{Tracking: "trk_once", Cost: n, Parts: []string{"x"}}, nil
	}
	var wg sync.WaitGroup
	got := make([]label, callers)
	errs := make([]error, callers)
	start := make(chan struct{})
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i], errs[i] = idempotency.Do(ctx, exec, "s", "concurrent", map[string]int{"n": 1}, fn,
				idempotency.WaitInFlight(30*time.Second))
		}()
	}
	close(start)
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times, want 1", n)
	}
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if got[i].Tracking != "trk_once" || got[i].Cost != 1 || len(got[i].Parts) != 1 {
			t.Fatalf("caller %d got %+v", i, got[i])
		}
	}
}
