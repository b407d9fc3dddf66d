package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/inbox"
	"github.com/payonce/payonce/internal/pgtest"
)

type bench struct {
	pool   *pgxpool.Pool
	inbox  *inbox.Inbox
	reader *sdkmetric.ManualReader
	dead   []string
	mu     sync.Mutex
}

func setup(t *testing.T, cfg inbox.Config) *bench {
	t.Helper()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE effects (msg TEXT NOT NULL, body TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{pool: pool, reader: sdkmetric.NewManualReader()}
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(b.reader))
	cfg.DeadLetter = func(_ context.Context, m inbox.Message, reason error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.dead = append(b.dead, m.ID+": "+reason.Error())
	}
	if b.inbox, err = inbox.New(store, &cfg); err != nil {
		t.Fatal(err)
	}
	return b
}

func message(t *testing.T, id, body string, attempt int) inbox.Message {
	t.Helper()
	fp, err := idempotency.NewFingerprint().String("body", body).Sum()
	if err != nil {
		t.Fatal(err)
	}
	return inbox.Message{Source: "orders", ID: id, Fingerprint: fp, Attempt: attempt}
}

// insert is a handler whose effect is one row, in the inbox's transaction.
func insert(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
	_, err := tx.Exec(ctx, `INSERT INTO effects (msg, body) VALUES ($1, 'x')`, m.ID)
	return err
}

func (b *bench) effects(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM effects WHERE msg = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *bench) counters(t *testing.T) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := b.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || !strings.HasPrefix(m.Name, "inbox.") {
				continue
			}
			for _, dp := range sum.DataPoints {
				name := m.Name
				if o, ok := dp.Attributes.Value("outcome"); ok {
					name += "{" + o.AsString() + "}"
				}
				out[name] += dp.Value
			}
		}
	}
	return out
}

// A redelivered message finds its effect committed and does not run
// again; the broker is told to ack every time.
func TestRedeliveryIsADuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t, inbox.Config{})
	ctx := context.Background()
	for attempt, want := range []inbox.Outcome{inbox.Processed, inbox.Duplicate, inbox.Duplicate} {
		out, err := b.inbox.HandleTx(ctx, message(t, "o-1", "a", attempt+1), insert)
		if err != nil || out != want || !out.Ack() {
			t.Fatalf("delivery %d: %v %v, want %v", attempt+1, out, err, want)
		}
	}
	if n := b.effects(t, "o-1"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	got := b.counters(t)
	want := map[string]int64{"inbox.messages{processed}": 1, "inbox.messages{duplicate}": 2,
		"inbox.messages_deduplicated": 2, "inbox.redeliveries": 2}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}

// A transient failure commits nothing, not even the handler's writes made
// before it failed, and asks for redelivery; the next delivery runs.
func TestTransientFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, inbox.Config{})
	ctx := context.Background()
	boom := errors.New("downstream unavailable")
	out, err := b.inbox.HandleTx(ctx, message(t, "o-2", "a", 1), func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		if err := insert(ctx, tx, m); err != nil {
			return err
		}
		return boom
	})
	if out != inbox.Retry || out.Ack() || !errors.Is(err, boom) {
		t.Fatalf("transient: %v %v", out, err)
	}
	if n := b.effects(t, "o-2"); n != 0 {
		t.Fatalf("%d effects after a transient failure, want 0", n)
	}
	if out, err := b.inbox.HandleTx(ctx, message(t, "o-2", "a", 2), insert); out != inbox.Processed || err != nil {
		t.Fatalf("redelivery: %v %v", out, err)
	}
	if n := b.effects(t, "o-2"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// A permanent failure is recorded and replayed: poison, dead-lettered, the
// handler's writes undone, and a redelivery does not run it again.
func TestPoisonIsRecordedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, inbox.Config{})
	ctx := context.Background()
	var runs atomic.Int64
	bad := func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		runs.Add(1)
		if err := insert(ctx, tx, m); err != nil {
			return err
		}
		return idempotency.Permanent(errors.New("unknown sku"), idempotency.Response{Code: 422})
	}
	for attempt := 1; attempt <= 3; attempt++ {
		out, err := b.inbox.HandleTx(ctx, message(t, "o-3", "a", attempt), bad)
		if out != inbox.Poison || !out.Ack() || !errors.Is(err, idempotency.ErrFailed) {
			t.Fatalf("delivery %d: %v %v", attempt, out, err)
		}
	}
	if runs.Load() != 1 || b.effects(t, "o-3") != 0 {
		t.Fatalf("handler ran %d times, %d effects; want 1 and 0", runs.Load(), b.effects(t, "o-3"))
	}
	if len(b.dead) != 3 || !strings.Contains(b.dead[0], "o-3") {
		t.Fatalf("dead letters: %q", b.dead)
	}
	if got := b.counters(t)["inbox.poison_messages"]; got != 3 {
		t.Fatalf("poison counter %d, want 3", got)
	}
}

// The identity of a processed message coming back with other content is
// poison: never applied, the first effect stands.
func TestSameIdentityOtherContentIsPoison(t *testing.T) {
	t.Parallel()
	b := setup(t, inbox.Config{})
	ctx := context.Background()
	if out, err := b.inbox.HandleTx(ctx, message(t, "o-4", "a", 1), insert); out != inbox.Processed || err != nil {
		t.Fatalf("first: %v %v", out, err)
	}
	out, err := b.inbox.HandleTx(ctx, message(t, "o-4", "b", 1), insert)
	if out != inbox.Poison || !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("other content: %v %v", out, err)
	}
	if n := b.effects(t, "o-4"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// Many consumers get the same message at once (a redelivery racing the
// first delivery): one effect; every consumer acks (a concurrent
// duplicate waits for the first transaction's commit and replays) or is
// told to retry, and its retry is a duplicate.
func TestConcurrentDeliveriesOneEffect(t *testing.T) {
	t.Parallel()
	b := setup(t, inbox.Config{})
	ctx := context.Background()
	var wg sync.WaitGroup
	var processed atomic.Int64
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for attempt := 1; ; attempt++ {
				out, err := b.inbox.HandleTx(ctx, message(t, "o-5", "a", attempt), func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
					time.Sleep(5 * time.Millisecond)
					return insert(ctx, tx, m)
				})
				switch out {
				case inbox.Processed:
					processed.Add(1)
				case inbox.Duplicate:
				case inbox.Retry:
					time.Sleep(time.Millisecond)
					continue
				default:
					errs <- fmt.Errorf("consumer %d: %v %v", i, out, err)
				}
				return
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := b.effects(t, "o-5"); n != 1 || processed.Load() != 1 {
		t.Fatalf("%d effects, %d processed; want 1 and 1", n, processed.Load())
	}
}

// Handle: effects outside the database, under a lease. A second consumer
// while the first runs is told to retry; after the first records, a
// duplicate.
func TestHandleOutsideTheDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t, inbox.Config{LockTimeout: 5 * time.Second, Retention: time.Hour})
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	var sent atomic.Int64
	done := make(chan inbox.Outcome)
	go func() {
		out, _ := b.inbox.Handle(ctx, message(t, "o-6", "a", 1), func(ctx context.Context, m inbox.Message) error {
			close(started)
			<-release
			sent.Add(1)
			return nil
		})
		done <- out
	}()
	<-started
	out, err := b.inbox.Handle(ctx, message(t, "o-6", "a", 2), func(context.Context, inbox.Message) error {
		sent.Add(1)
		return nil
	})
	if out != inbox.Retry || !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("while the first runs: %v %v", out, err)
	}
	close(release)
	if out := <-done; out != inbox.Processed {
		t.Fatalf("first: %v", out)
	}
	if out, err := b.inbox.Handle(ctx, message(t, "o-6", "a", 3), func(context.Context, inbox.Message) error {
		sent.Add(1)
		return nil
	}); out != inbox.Duplicate || err != nil || sent.Load() != 1 {
		t.Fatalf("after: %v %v, sent %d", out, err, sent.Load())
	}
}

// Bad messages and configurations are refused with the field named;
// nothing is recorded.
func TestBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, inbox.Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		m     inbox.Message
		field string
	}{
		{message(t, "", "a", 1), "Message.ID"},
		{inbox.Message{Source: "orders", ID: "o-7", Fingerprint: message(t, "o-7", "a", 1).Fingerprint, Attempt: -1}, "Message.Attempt"},
		{inbox.Message{Source: "", ID: "o-7", Fingerprint: message(t, "o-7", "a", 1).Fingerprint}, "scope"},
		{inbox.Message{Source: "orders", ID: "o/7", Fingerprint: message(t, "o-7", "a", 1).Fingerprint}, "intent"},
		{inbox.Message{Source: "orders", ID: "o-7"}, "fingerprint"},
	} {
		out, err := b.inbox.HandleTx(ctx, tc.m, insert)
		var ie *idempotency.InvalidError
		if out != inbox.Retry || !errors.As(err, &ie) || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.field)) {
			t.Errorf("%+v: %v %v, want an InvalidError naming %s", tc.m, out, err, tc.field)
		}
	}
	var n int
	if err := b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM effects) + (SELECT count(*) FROM idempotency_store)`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows after bad input (%v)", n, err)
	}
	store, err := pgstore.New(b.pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg   *inbox.Config
		field string
	}{
		{&inbox.Config{Retention: -time.Second}, "Config.Retention"},
		{&inbox.Config{LockTimeout: -time.Second}, "Config.LockTimeout"},
		{&inbox.Config{LockTimeout: time.Hour, Retention: time.Minute}, "Config.Retention"},
	} {
		if _, err := inbox.New(store, tc.cfg); !errors.Is(err, idempotency.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := inbox.New(nil, nil); !errors.Is(err, idempotency.ErrInvalid) {
		t.Errorf("nil store: %v", err)
	}
}
