package inbox_test

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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/inbox"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest"
)

type bench struct {
	pool   *pgxpool.Pool
	inbox  *inbox.Inbox[pgx.Tx]
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

// insertThen is a handler that inserts the message's effect and then
// fails with fail.
func insertThen(fail error) func(context.Context, pgx.Tx, inbox.Message) error {
	return func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		if err := insert(ctx, tx, m); err != nil {
			return err
		}
		return fail
	}
}

func (b *bench) effects(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM effects WHERE msg = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// wantProcessed handles m by insert and stops the test unless it was
// processed.
func (b *bench) wantProcessed(t *testing.T, m inbox.Message) {
	t.Helper()
	if out, err := b.inbox.HandleTx(context.Background(), m, insert); out != inbox.Processed || err != nil {
		t.Fatalf("message %s, delivery %d: %v %v, want processed", m.ID, m.Attempt, out, err)
	}
}

// wantEffects stops the test unless message id had n effects.
func (b *bench) wantEffects(t *testing.T, id string, n int) {
	t.Helper()
	if got := b.effects(t, id); got != n {
		t.Fatalf("message %s: %d effects, want %d", id, got, n)
	}
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
	b.wantEffects(t, "o-1", 1)
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
	out, err := b.inbox.HandleTx(ctx, message(t, "o-2", "a", 1), insertThen(boom))
	if out != inbox.Retry || out.Ack() || !errors.Is(err, boom) {
		t.Fatalf("transient: %v %v", out, err)
	}
	b.wantEffects(t, "o-2", 0)
	b.wantProcessed(t, message(t, "o-2", "a", 2))
	b.wantEffects(t, "o-2", 1)
}

// A permanent failure is recorded and replayed: poison, dead-lettered, the
// handler's writes undone, and a redelivery does not run it again.
func TestPoisonIsRecordedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, inbox.Config{})
	ctx := context.Background()
	var runs atomic.Int64
	permanent := insertThen(idempotency.Permanent(errors.New("unknown sku"), idempotency.Response{Code: 422}))
	bad := func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		runs.Add(1)
		return permanent(ctx, tx, m)
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
	b.wantProcessed(t, message(t, "o-4", "a", 1))
	out, err := b.inbox.HandleTx(ctx, message(t, "o-4", "b", 1), insert)
	if out != inbox.Poison || !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("other content: %v %v", out, err)
	}
	b.wantEffects(t, "o-4", 1)
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

// A malformed message is poison, never Retry (a redelivery cannot fix
// it): acked, dead-lettered, an *idempotency.InvalidError naming the
// field and the fix; the handler does not run and nothing is recorded.
func TestBadInputIsPoisonNamingTheFix(t *testing.T) {
	t.Parallel()
	b := setup(t, inbox.Config{})
	ctx := context.Background()
	fp := message(t, "o-7", "a", 1).Fingerprint
	cases := []struct {
		name       string
		m          inbox.Message
		field, fix string
	}{
		{"no fingerprint", inbox.Message{Source: "orders", ID: "o-7"}, "Message.Fingerprint", "idempotency.NewFingerprint"},
		{"malformed fingerprint", inbox.Message{Source: "orders", ID: "o-7", Fingerprint: "ABC"}, "Message.Fingerprint", "idempotency.NewFingerprint"},
		{"id with a slash", inbox.Message{Source: "orders", ID: "orders/3/1042", Fingerprint: fp}, "Message.ID", "inbox.MessageID"},
		{"id with a space", inbox.Message{Source: "orders", ID: "ord 7", Fingerprint: fp}, "Message.ID", "idempotency.DeriveIntent"},
		{"id too long", inbox.Message{Source: "orders", ID: strings.Repeat("x", 250), Fingerprint: fp}, "Message.ID", "inbox.MessageID"},
		{"empty id", inbox.Message{Source: "orders", Fingerprint: fp}, "Message.ID", "inbox.MessageID"},
		{"MessageID of nothing", inbox.Message{Source: "orders", ID: inbox.MessageID(""), Fingerprint: fp}, "Message.ID", "inbox.MessageID"},
		{"source with a space", inbox.Message{Source: "my orders", ID: "o-7", Fingerprint: fp}, "Message.Source", "constant"},
		{"empty source", inbox.Message{ID: "o-7", Fingerprint: fp}, "Message.Source", "constant"},
		{"negative attempt", inbox.Message{Source: "orders", ID: "o-7", Fingerprint: fp, Attempt: -1}, "Message.Attempt", "delivery count"},
	}
	var ran atomic.Int64
	handlers := map[string]func(inbox.Message) (inbox.Outcome, error){
		"HandleTx": func(m inbox.Message) (inbox.Outcome, error) {
			return b.inbox.HandleTx(ctx, m, func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
				ran.Add(1)
				return insert(ctx, tx, m)
			})
		},
		"Handle": func(m inbox.Message) (inbox.Outcome, error) {
			return b.inbox.Handle(ctx, m, func(context.Context, inbox.Message) error { ran.Add(1); return nil })
		},
	}
	for hname, handle := range handlers {
		for _, tc := range cases {
			out, err := handle(tc.m)
			var ie *idempotency.InvalidError
			if out != inbox.Poison || !out.Ack() || !errors.As(err, &ie) || ie.Field != tc.field || !strings.Contains(err.Error(), tc.fix) {
				t.Errorf("%s, %s: %v %v; want Poison with an InvalidError naming %s and %q", hname, tc.name, out, err, tc.field, tc.fix)
			}
		}
	}
	if ran.Load() != 0 {
		t.Fatalf("the handler ran %d times for malformed messages", ran.Load())
	}
	var n int
	if err := b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM effects) + (SELECT count(*) FROM idempotency_store)`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows after bad input (%v)", n, err)
	}
	if len(b.dead) != 2*len(cases) || !strings.Contains(b.dead[0], "invalid") {
		t.Fatalf("%d dead letters, want %d with the reason: %q", len(b.dead), 2*len(cases), b.dead)
	}
	if got := b.counters(t); got["inbox.poison_messages"] != int64(2*len(cases)) || got["inbox.messages{retry}"] != 0 {
		t.Fatalf("counters %v: want every malformed delivery counted poison, none retry", got)
	}
}

// Bad configurations are refused with the field named.
func TestBadConfig(t *testing.T) {
	t.Parallel()
	b := setup(t, inbox.Config{})
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
	if _, err := inbox.New[pgx.Tx](nil, nil); !errors.Is(err, idempotency.ErrInvalid) {
		t.Errorf("nil store: %v", err)
	}
}

// deliverTwice hands m to HandleTx twice, as a broker redelivering it,
// and wants Processed then Duplicate.
func (b *bench) deliverTwice(t *testing.T, m inbox.Message) {
	t.Helper()
	for attempt, want := range []inbox.Outcome{inbox.Processed, inbox.Duplicate} {
		m.Attempt = attempt + 1
		if out, err := b.inbox.HandleTx(context.Background(), m, insert); out != want || err != nil {
			t.Fatalf("id %q, delivery %d: %v %v, want %v", m.ID, attempt+1, out, err, want)
		}
	}
}

// Kafka records identified by topic, partition and offset: MessageID
// makes them IDs; a redelivered record (a rebalance before the offset
// commit) is a duplicate, and records that share an offset on other
// partitions or topics, or whose parts only concatenate alike, are
// different messages.
func TestKafkaRecordIDs(t *testing.T) {
	t.Parallel()
	b := setup(t, inbox.Config{})
	type record struct {
		topic     string
		partition int32
		offset    int64
	}
	records := []record{
		{"orders.v1", 0, 1042}, {"orders.v1", 1, 1042}, {"orders.v1", 10, 42}, {"orders.v1", 1, 1042 + 1<<40},
		{"orders.v2", 0, 1042}, {"orders/eu", 0, 1042}, {"orders", 0, 0},
	}
	ids := map[string]bool{}
	for _, r := range records {
		id := inbox.MessageID(r.topic, strconv.Itoa(int(r.partition)), strconv.FormatInt(r.offset, 10))
		ids[id] = true
		b.deliverTwice(t, message(t, id, fmt.Sprint(r), 0))
	}
	// ("orders.v1", "10", "42") and ("orders.v1", "1", "042") read alike
	// joined with "/"; their IDs differ.
	if inbox.MessageID("orders.v1", "10", "42") == inbox.MessageID("orders.v1", "1", "042") ||
		inbox.MessageID("a/b", "c") == inbox.MessageID("a", "b/c") {
		t.Fatal("MessageID is ambiguous across parts")
	}
	if len(ids) != len(records) {
		t.Fatalf("%d distinct IDs for %d records", len(ids), len(records))
	}
	for id := range ids {
		b.wantEffects(t, id, 1)
	}
	// The raw "topic/partition/offset" string is refused, naming the fix.
	out, err := b.inbox.HandleTx(context.Background(), message(t, "orders.v1/0/1042", "x", 1), insert)
	if out != inbox.Poison || !errors.Is(err, idempotency.ErrInvalid) || !strings.Contains(err.Error(), "MessageID(topic, partition, offset)") {
		t.Fatalf("raw Kafka id: %v %v", out, err)
	}
}

// NATS message ids are whatever the publisher set: slashes, spaces,
// wildcards, non-ASCII, any length. Through MessageID each is one message:
// processed once, a duplicate when redelivered, never confused with
// another.
func TestNATSMessageIDs(t *testing.T) {
	t.Parallel()
	b := setup(t, inbox.Config{})
	raw := []string{"ord/1001", "ord 1001", "ord-1001", "orders.*.>", "заказ-1001", "a\tb\nc", `"quoted"`,
		strings.Repeat("x", 300), strings.Repeat("x", 301), "3f0c8a9e-5d2b-4c1a-9e7f-0123456789ab"}
	for _, id := range raw {
		b.deliverTwice(t, message(t, inbox.MessageID(id), id, 0))
	}
	for _, id := range raw {
		if n := b.effects(t, inbox.MessageID(id)); n != 1 {
			t.Fatalf("NATS id %q: %d effects, want 1", id, n)
		}
	}
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_store WHERE user_id = 'orders'`).Scan(&n); err != nil || n != len(raw) {
		t.Fatalf("%d records (%v), want %d", n, err, len(raw))
	}
	// The ID is stable (natsinbox's default, and records written before
	// MessageID existed, used the same hash) and fits any key.
	if got := inbox.MessageID("ord/1001"); got != idempotency.DeriveIntent("ord/1001") || len(got) != 64 {
		t.Fatalf("MessageID(%q) = %q, want DeriveIntent's 64 hex characters", "ord/1001", got)
	}
}

// A handler that runs past its lease keeps the message: the executor's
// heartbeats renew the lease while it runs, so a redelivery after the
// first lease would have ended (by the database's clock) is in progress,
// not a second run, and the handler is not cancelled.
func TestHandlerOutlivesItsLease(t *testing.T) {
	t.Parallel()
	const lease = 3 * time.Second // heartbeats every second
	b := setup(t, inbox.Config{LockTimeout: lease, Retention: time.Hour})
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int64
	type result struct {
		out inbox.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := b.inbox.Handle(ctx, message(t, "o-7", "a", 1), func(ctx context.Context, m inbox.Message) error {
			runs.Add(1)
			close(started)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return fmt.Errorf("the handler was cancelled: %w", context.Cause(ctx))
			}
		})
		done <- result{out, err}
	}()
	<-started
	var firstEnd time.Time
	if err := b.pool.QueryRow(ctx, `SELECT locked_until FROM idempotency_store WHERE status = 'PROCESSING'`).Scan(&firstEnd); err != nil {
		t.Fatal(err)
	}
	// The server waits until its own clock passes the first lease's end
	// (pg_sleep sleeps at least as long as asked), in one statement.
	var past bool
	if err := b.pool.QueryRow(ctx, `SELECT pg_sleep(greatest(0, extract(epoch FROM $1::timestamptz - clock_timestamp()))),
		clock_timestamp() > $1`, firstEnd).Scan(nil, &past); err != nil || !past {
		t.Fatalf("waiting for the first lease to run out by the database's clock: past %v, %v", past, err)
	}
	out, err := b.inbox.Handle(ctx, message(t, "o-7", "a", 2), func(context.Context, inbox.Message) error {
		runs.Add(1)
		return nil
	})
	if out != inbox.Retry || !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("a redelivery after the first lease's end: %v %v; want Retry, in progress (the heartbeats kept the lease)", out, err)
	}
	close(release)
	if r := <-done; r.out != inbox.Processed || r.err != nil {
		t.Fatalf("the long handler: %v %v", r.out, r.err)
	}
	if out, err := b.inbox.Handle(ctx, message(t, "o-7", "a", 3), func(context.Context, inbox.Message) error {
		runs.Add(1)
		return nil
	}); out != inbox.Duplicate || err != nil || runs.Load() != 1 {
		t.Fatalf("after: %v %v, runs %d", out, err, runs.Load())
	}
}
