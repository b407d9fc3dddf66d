package natsinbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/inbox"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest"
)

func TestMain(m *testing.M) {
	if role := os.Getenv("NATSINBOX_CHILD"); role != "" {
		if err := child(role); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const effectsDDL = `CREATE TABLE effects (msg TEXT NOT NULL, body TEXT NOT NULL)`

// broker starts an embedded JetStream server with a stream ORDERS on
// orders.> (duplicate window dup) and a durable pull consumer "workers"
// whose ack wait is 1s.
func broker(t *testing.T, dup time.Duration) (url string, js jetstream.JetStream) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats: not ready")
	}
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err = jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Duplicates: dup}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{Durable: "workers",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: 20}); err != nil {
		t.Fatal(err)
	}
	return s.ClientURL(), js
}

func newInbox(t testing.TB, pool *pgxpool.Pool) *inbox.Inbox[pgx.Tx] {
	t.Helper()
	store, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// apply is the handler: one effect row per message.
func apply(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
	_, err := tx.Exec(ctx, `INSERT INTO effects (msg, body) VALUES ($1, 'x')`, m.ID)
	return err
}

func publish(t *testing.T, js jetstream.JetStream, id, data string) *jetstream.PubAck {
	t.Helper()
	ack, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: "orders.created", Data: []byte(data),
		Header: nats.Header{jetstream.MsgIDHeader: []string{id}}})
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

// drain consumes until every message is acked or terminated, then stops.
func drain(t *testing.T, js jetstream.JetStream, in *inbox.Inbox[pgx.Tx], h inbox.TxHandler[pgx.Tx], workers int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range workers {
		cons, err := js.Consumer(ctx, "ORDERS", "workers")
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Consume(ctx, cons, in, Config{Source: "orders", FetchWait: 200 * time.Millisecond}, h); err != nil && !errors.Is(err, context.Canceled) {
				t.Error(err)
			}
		}()
	}
	settled(t, js)
	cancel()
	wg.Wait()
}

// settled waits until the consumer has no message pending, unacked or
// being redelivered: every message acked or terminated (JetStream applies
// acks asynchronously).
func settled(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cons, err := js.Consumer(context.Background(), "ORDERS", "workers")
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("messages still pending: %+v", info)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func effects(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT msg, count(*) FROM effects GROUP BY msg`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var m string
		var n int
		if err := rows.Scan(&m, &n); err != nil {
			t.Fatal(err)
		}
		out[m] = n
	}
	return out
}

// child is a consumer process that commits a message's effect and then
// hangs before its ack ("after-commit"), or hangs inside its handler
// before the commit ("before-commit"); it prints "hung" when it does.
func child(role string) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("NATSINBOX_DB"))
	if err != nil {
		return err
	}
	nc, err := nats.Connect(os.Getenv("NATSINBOX_NATS"))
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.Consumer(ctx, "ORDERS", "workers")
	if err != nil {
		return err
	}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		return err
	}
	in, err := inbox.New(store, nil)
	if err != nil {
		return err
	}
	hang := func() {
		fmt.Println("hung")
		time.Sleep(time.Hour)
	}
	cfg := Config{Source: "orders"}
	h := apply
	switch role {
	case "after-commit":
		cfg.beforeAck = func(jetstream.Msg, inbox.Outcome) { hang() }
	case "before-commit":
		h = func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
			if err := apply(ctx, tx, m); err != nil {
				return err
			}
			hang()
			return nil
		}
	}
	return Consume(ctx, cons, in, cfg, h)
}

// A consumer process SIGKILLed after its commit and before its ack, or
// in its handler before its commit: JetStream redelivers after the ack
// wait, and the effect happens once.
func TestKilledConsumer(t *testing.T) {
	t.Parallel()
	for _, role := range []string{"after-commit", "before-commit"} {
		t.Run(role, func(t *testing.T) {
			t.Parallel()
			url := pgtest.MigratedURL(t)
			pool := pgtest.PoolURL(t, url)
			if _, err := pool.Exec(context.Background(), effectsDDL); err != nil {
				t.Fatal(err)
			}
			natsURL, js := broker(t, time.Minute)
			publish(t, js, "ord-1", `{"sku":"book-42"}`)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "NATSINBOX_CHILD="+role, "NATSINBOX_DB="+url, "NATSINBOX_NATS="+natsURL)
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "hung\n" {
				t.Fatalf("consumer: %q %v", line, err)
			}
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
			drain(t, js, newInbox(t, pool), apply, 1)
			if got := effects(t, pool); len(got) != 1 || got[idempotency.DeriveIntent("ord-1")] != 1 {
				t.Fatalf("effects %v, want one", got)
			}
		})
	}
}

// JetStream drops a republish with the same Nats-Msg-Id within the
// stream's duplicate window; past it, both are delivered and the inbox
// makes them one effect.
func TestRepublish(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(context.Background(), effectsDDL); err != nil {
		t.Fatal(err)
	}
	// A window wide enough that two back-to-back publishes fall in it on
	// a loaded machine.
	_, js := broker(t, 2*time.Second)
	if ack := publish(t, js, "ord-2", `{"sku":"pen-7"}`); ack.Duplicate {
		t.Fatal("the first publish is a duplicate")
	}
	if ack := publish(t, js, "ord-2", `{"sku":"pen-7"}`); !ack.Duplicate {
		t.Fatal("JetStream kept a republish within its window")
	}
	time.Sleep(2200 * time.Millisecond) // past the window
	if ack := publish(t, js, "ord-2", `{"sku":"pen-7"}`); ack.Duplicate {
		t.Fatal("JetStream dropped a republish past its window")
	}
	stream, err := js.Stream(context.Background(), "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := stream.Info(context.Background()); err != nil || info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages (%v), want 2", info.State.Msgs, err)
	}
	drain(t, js, newInbox(t, pool), apply, 1)
	if got := effects(t, pool); got[idempotency.DeriveIntent("ord-2")] != 1 {
		t.Fatalf("effects %v, want one", got)
	}
}

// A permanent failure is recorded once and the message terminated: it is
// not redelivered, and the handler ran once.
func TestPoisonIsTerminated(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(context.Background(), effectsDDL); err != nil {
		t.Fatal(err)
	}
	_, js := broker(t, time.Minute)
	publish(t, js, "ord-3", `{"sku":"nope"}`)
	publish(t, js, "no-id-0", `{"sku":"x"}`)
	var runs int
	var mu sync.Mutex
	drain(t, js, newInbox(t, pool), func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		mu.Lock()
		runs++
		mu.Unlock()
		if err := apply(ctx, tx, m); err != nil {
			return err
		}
		return idempotency.Permanent(errors.New("unknown sku"), idempotency.Response{Code: 422})
	}, 1)
	time.Sleep(1500 * time.Millisecond) // past the ack wait: nothing comes back
	cons, _ := js.Consumer(context.Background(), "ORDERS", "workers")
	info, err := cons.Info(context.Background())
	if err != nil || info.NumAckPending != 0 || info.NumRedelivered != 0 || info.NumPending != 0 {
		t.Fatalf("after terminating: %+v %v", info, err)
	}
	if runs != 2 || len(effects(t, pool)) != 0 {
		t.Fatalf("handler ran %d times, effects %v; want 2 runs (one per message) and none", runs, effects(t, pool))
	}
	var failed int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_store WHERE user_id = 'orders' AND status = 'FAILED'`).Scan(&failed); err != nil || failed != 2 {
		t.Fatalf("%d failure records (%v), want 2", failed, err)
	}
}

// Three consumers on one durable consumer, handlers that sometimes run
// past the ack wait (so JetStream redelivers while the first delivery is
// still running): every message's effect happens exactly once.
func TestConcurrentConsumersWithRedelivery(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(context.Background(), effectsDDL); err != nil {
		t.Fatal(err)
	}
	_, js := broker(t, time.Minute)
	const n = 30
	for i := range n {
		publish(t, js, fmt.Sprintf("ord-%d", 100+i), fmt.Sprintf(`{"i":%d}`, i))
	}
	var slow sync.Map
	drain(t, js, newInbox(t, pool), func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		if err := apply(ctx, tx, m); err != nil {
			return err
		}
		// One message in four: the first delivery outlasts the ack wait.
		if m.ID[0] < '4' {
			if _, seen := slow.LoadOrStore(m.ID, true); !seen {
				time.Sleep(1300 * time.Millisecond)
			}
		}
		return nil
	}, 3)
	got := effects(t, pool)
	if len(got) != n {
		t.Fatalf("%d messages with an effect, want %d", len(got), n)
	}
	for id, c := range got {
		if c != 1 {
			t.Errorf("message %s: %d effects", id, c)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{}, {Source: "bad source"}} {
		if _, err := c.withDefaults(); !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// Nats-Msg-Ids are whatever publishers set: with slashes, spaces,
// non-ASCII, beyond a key's length. The default identity,
// inbox.MessageID(Nats-Msg-Id), handles each once. A Config.ID that hands
// the raw id to the inbox gets every such message refused as poison
// (terminated, dead-lettered, nothing run), never redelivered forever.
func TestArbitraryMessageIDs(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(context.Background(), effectsDDL); err != nil {
		t.Fatal(err)
	}
	_, js := broker(t, time.Minute)
	ids := []string{"shop/eu/ord 1001", "заказ 1002", "orders.*.>", strings.Repeat("id/", 100)}
	for i, id := range ids {
		publish(t, js, id, fmt.Sprintf(`{"i":%d}`, i))
	}
	drain(t, js, newInbox(t, pool), apply, 2)
	got := effects(t, pool)
	for _, id := range ids {
		if got[inbox.MessageID(id)] != 1 {
			t.Fatalf("effects %v: want one for %q under inbox.MessageID", got, id)
		}
	}

	// The raw id as the identity: poison, terminated.
	for i, id := range ids {
		publish(t, js, "raw:"+id, fmt.Sprintf(`{"raw":%d}`, i))
	}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var dead []error
	in, err := inbox.New(store, &inbox.Config{DeadLetter: func(_ context.Context, _ inbox.Message, reason error) {
		mu.Lock()
		defer mu.Unlock()
		dead = append(dead, reason)
	}})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cons, err := js.Consumer(ctx, "ORDERS", "workers")
	if err != nil {
		t.Fatal(err)
	}
	raw := Config{Source: "orders", FetchWait: 200 * time.Millisecond,
		ID: func(msg jetstream.Msg) (string, error) { return msg.Headers().Get(jetstream.MsgIDHeader), nil }}
	for range ids {
		msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := Handle(ctx, msg, in, raw, func(context.Context, pgx.Tx, inbox.Message) error { runs.Add(1); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	settled(t, js) // every raw-id message terminated, none redelivered
	mu.Lock()
	defer mu.Unlock()
	if runs.Load() != 0 || len(dead) != len(ids) || !errors.Is(dead[0], idempotency.ErrInvalid) || !strings.Contains(dead[0].Error(), "inbox.MessageID") {
		t.Fatalf("handler ran %d times; dead letters %v; want none run and %d naming inbox.MessageID", runs.Load(), dead, len(ids))
	}
}
