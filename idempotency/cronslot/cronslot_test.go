package cronslot_test

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
	"github.com/robfig/cron/v3"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/cronslot"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/pgtest"
)

func TestMain(m *testing.M) {
	if role := os.Getenv("CRONSLOT_CHILD"); role != "" {
		if err := child(role); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const runsDDL = `CREATE TABLE runs (job TEXT NOT NULL, slot TIMESTAMPTZ NOT NULL, pid INT NOT NULL)`

func guard(t testing.TB, pool *pgxpool.Pool, cfg *cronslot.Config) *cronslot.Guard[pgx.Tx] {
	t.Helper()
	store, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cronslot.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// Slots come from the schedule, not from the firing's time.
func TestSlots(t *testing.T) {
	for _, tc := range []struct {
		spec, now, slot, next string
	}{
		{"*/5 * * * *", "2026-12-03T12:07:30Z", "2026-12-03T12:05:00Z", "2026-12-03T12:10:00Z"},
		{"*/5 * * * *", "2026-12-03T12:10:00Z", "2026-12-03T12:10:00Z", "2026-12-03T12:15:00Z"},
		{"@hourly", "2026-12-03T12:59:59.9Z", "2026-12-03T12:00:00Z", "2026-12-03T13:00:00Z"},
		{"0 2 * * *", "2026-12-03T01:00:00Z", "2026-12-02T02:00:00Z", "2026-12-03T02:00:00Z"},
		{"30 0 0 1 * *", "2026-12-03T01:00:00Z", "2026-12-01T00:00:30Z", "2027-01-01T00:00:30Z"},
		{"@every 90s", "1970-01-01T00:16:40Z", "1970-01-01T00:16:30Z", "1970-01-01T00:18:00Z"},
		{"@every 1s", "2026-12-03T12:00:00.999Z", "2026-12-03T12:00:00Z", "2026-12-03T12:00:01Z"},
	} {
		s, err := cronslot.Parse(tc.spec)
		if err != nil {
			t.Fatalf("%s: %v", tc.spec, err)
		}
		if got := s.Slot(at(tc.now)); !got.Equal(at(tc.slot)) {
			t.Errorf("%s at %s: slot %s, want %s", tc.spec, tc.now, got, tc.slot)
		}
		if got := s.Next(at(tc.now)); !got.Equal(at(tc.next)) {
			t.Errorf("%s after %s: next %s, want %s", tc.spec, tc.now, got, tc.next)
		}
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	g := guard(t, pool, &cronslot.Config{Retention: 48 * time.Hour})
	noop := func(context.Context, cronslot.Slot) error { return nil }
	for _, tc := range []struct{ name, spec, field string }{
		{"payouts", "not a spec", "spec"},
		{"payouts", "@every -1s", "spec"},
		{"payouts", "@every 0s", "spec"},
		{"pay_outs", "@hourly", "name"},
		{"", "@hourly", "name"},
		{"payouts", "@monthly", "Config.Retention"},
	} {
		_, err := g.Job(tc.name, tc.spec, noop)
		var ie *idempotency.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("Job(%q, %q): %v, want an InvalidError on %s", tc.name, tc.spec, err, tc.field)
		}
	}
	if _, err := g.Job("payouts", "@hourly", nil); !errors.Is(err, idempotency.ErrInvalid) {
		t.Errorf("nil fn: %v", err)
	}
	store, _ := pgstore.New(pool, nil)
	for _, cfg := range []*cronslot.Config{{CatchUp: -1}, {LockTimeout: -time.Second}, {LockTimeout: time.Hour, Retention: time.Minute}} {
		if _, err := cronslot.New(store, cfg); !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	if _, err := cronslot.New[pgx.Tx](nil, nil); !errors.Is(err, idempotency.ErrInvalid) {
		t.Errorf("nil store: %v", err)
	}
}

type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *manualClock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// Sixteen schedulers fire the same slot at once, their clocks up to the
// tolerance apart: the job runs once; the next slot runs once more.
func TestOneRunPerSlot(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s, err := cronslot.Parse("*/5 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	var slots sync.Map
	job := func(_ context.Context, sl cronslot.Slot) error {
		runs.Add(1)
		slots.Store(sl.At, true)
		time.Sleep(20 * time.Millisecond)
		return nil
	}
	for _, slot := range []string{"2026-12-03T12:05:00Z", "2026-12-03T12:10:00Z"} {
		var wg sync.WaitGroup
		for i := range 16 {
			clock := &manualClock{}
			// Fired between 0.8s early (a clock ahead, within the 1s
			// tolerance) and 3s late.
			clock.Set(at(slot).Add(time.Duration(i)*250*time.Millisecond - 800*time.Millisecond))
			g := guard(t, pool, &cronslot.Config{Clock: clock.Now})
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := g.Fire(context.Background(), "report", s, job, nil); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	if runs.Load() != 2 {
		t.Fatalf("%d runs for 2 slots", runs.Load())
	}
	for _, slot := range []string{"2026-12-03T12:05:00Z", "2026-12-03T12:10:00Z"} {
		if _, ok := slots.Load(at(slot)); !ok {
			t.Errorf("slot %s never ran", slot)
		}
	}
}

// A transient failure leaves the slot to a later firing; a permanent one
// is final; catch-up runs the slots a firing missed, oldest first.
func TestOutcomesAndCatchUp(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	clock := &manualClock{}
	g := guard(t, pool, &cronslot.Config{Clock: clock.Now, CatchUp: 3})
	ctx := context.Background()
	s, _ := cronslot.Parse("@hourly")
	var ran []string
	fail := map[string]error{"2026-12-03T09:00:00Z": errors.New("dependency down"),
		"2026-12-03T10:00:00Z": idempotency.Permanent(errors.New("bad month"), idempotency.Response{})}
	job := func(_ context.Context, sl cronslot.Slot) error {
		k := sl.At.Format(time.RFC3339)
		ran = append(ran, k)
		if err := fail[k]; err != nil {
			return err
		}
		return nil
	}
	clock.Set(at("2026-12-03T11:00:01Z"))
	err := g.Fire(ctx, "hourly-sum", s, job, nil)
	if err == nil {
		t.Fatal("the failures were not reported")
	}
	want := "2026-12-03T08:00:00Z 2026-12-03T09:00:00Z 2026-12-03T10:00:00Z 2026-12-03T11:00:00Z"
	if strings.Join(ran, " ") != want {
		t.Fatalf("ran %v, want %s", ran, want)
	}
	// An hour later: 09:00 (released) runs again, 10:00 (failed for good)
	// does not, 08:00 and 11:00 are done.
	ran = nil
	delete(fail, "2026-12-03T09:00:00Z")
	clock.Set(at("2026-12-03T12:00:00Z"))
	if err := g.Fire(ctx, "hourly-sum", s, job, nil); err == nil || !errors.Is(err, idempotency.ErrFailed) {
		t.Fatalf("second firing: %v, want the recorded failure", err)
	}
	if strings.Join(ran, " ") != "2026-12-03T09:00:00Z 2026-12-03T12:00:00Z" {
		t.Fatalf("second firing ran %v", ran)
	}
	if out, err := g.RunSlot(ctx, "hourly-sum", at("2026-12-03T10:00:00Z"), job, nil); out != cronslot.Failed || !errors.Is(err, idempotency.ErrFailed) {
		t.Fatalf("the failed slot: %v %v", out, err)
	}
}

// child is a scheduler process: "fire" fires an "@every 1s" job every
// 50ms for CRONSLOT_FOR, its clock skewed by CRONSLOT_SKEW, writing one
// row per run in the slot's transaction; "hang" starts the slot given in
// CRONSLOT_SLOT, writes its row, prints "started" and hangs before the
// commit.
func child(role string) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("CRONSLOT_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	skew, _ := time.ParseDuration(os.Getenv("CRONSLOT_SKEW"))
	lease := time.Second
	if d, err := time.ParseDuration(os.Getenv("CRONSLOT_LEASE")); err == nil {
		lease = d
	}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		return err
	}
	// No catch-up: each firing runs its own slot only, so that the slots
	// the processes agree on are the schedule's.
	g, err := cronslot.New(store, &cronslot.Config{LockTimeout: lease, Retention: time.Hour,
		Clock: func() time.Time { return time.Now().Add(skew) }})
	if err != nil {
		return err
	}
	pid := os.Getpid()
	write := func(ctx context.Context, tx pgx.Tx, s cronslot.Slot) error {
		_, err := tx.Exec(ctx, `INSERT INTO runs (job, slot, pid) VALUES ($1, $2, $3)`, s.Job, s.At, pid)
		return err
	}
	switch role {
	case "fire":
		d, _ := time.ParseDuration(os.Getenv("CRONSLOT_FOR"))
		s, err := cronslot.Parse("@every 1s")
		if err != nil {
			return err
		}
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if err := g.Fire(ctx, "tick", s, nil, write); err != nil {
				return err
			}
		}
		return nil
	case "hang-func":
		slot, err := time.Parse(time.RFC3339, os.Getenv("CRONSLOT_SLOT"))
		if err != nil {
			return err
		}
		_, err = g.RunSlot(ctx, "nightly", slot, func(context.Context, cronslot.Slot) error {
			fmt.Println("started")
			time.Sleep(time.Hour)
			return nil
		}, nil)
		return err
	case "hang":
		slot, err := time.Parse(time.RFC3339, os.Getenv("CRONSLOT_SLOT"))
		if err != nil {
			return err
		}
		_, err = g.RunSlot(ctx, "nightly", slot, nil, func(ctx context.Context, tx pgx.Tx, s cronslot.Slot) error {
			if err := write(ctx, tx, s); err != nil {
				return err
			}
			fmt.Println("started")
			time.Sleep(time.Hour)
			return nil
		})
		return err
	}
	return fmt.Errorf("unknown role %q", role)
}

func startChild(t *testing.T, url, role string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "CRONSLOT_CHILD="+role, "CRONSLOT_URL="+url), env...)
	cmd.Stderr = os.Stderr
	return cmd
}

// Three scheduler processes, clocks 0, +400ms and -400ms off, fire an
// "@every 1s" job twenty times a second for four seconds: every slot in
// the run ran exactly once, whichever process ran it.
func TestProcessesRunEachSlotOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.MigratedURL(t)
	pool := pgtest.PoolURL(t, url)
	if _, err := pool.Exec(context.Background(), runsDDL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var cmds []*exec.Cmd
	for _, skew := range []string{"0s", "400ms", "-400ms"} {
		cmd := startChild(t, url, "fire", "CRONSLOT_SKEW="+skew, "CRONSLOT_FOR=4s")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("scheduler: %v", err)
		}
	}
	rows, err := pool.Query(context.Background(), `SELECT slot, count(*), count(DISTINCT pid) FROM runs GROUP BY slot ORDER BY slot`)
	if err != nil {
		t.Fatal(err)
	}
	slots := 0
	var prev time.Time
	for rows.Next() {
		var slot time.Time
		var n, pids int
		if err := rows.Scan(&slot, &n, &pids); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("slot %s ran %d times", slot, n)
		}
		if !prev.IsZero() && slot.Sub(prev) != time.Second {
			t.Errorf("no run between %s and %s", prev, slot)
		}
		prev = slot
		slots++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var pids int
	if err := pool.QueryRow(context.Background(), `SELECT count(DISTINCT pid) FROM runs`).Scan(&pids); err != nil {
		t.Fatal(err)
	}
	// A clock 400ms ahead plus the 1s tolerance reaches up to 2 slots
	// ahead of the real time.
	if elapsed := time.Since(start); slots < 4 || float64(slots) > elapsed.Seconds()+4 {
		t.Fatalf("%d slots ran in %s", slots, elapsed)
	}
	t.Logf("%d slots, each run once, by %d processes", slots, pids)
}

// A scheduler killed in the middle of a slot's run, after its write,
// before its commit: nothing of it stays; the slot is taken over after the
// lease and its effect happens once.
func TestKilledRunIsTakenOver(t *testing.T) {
	t.Parallel()
	url := pgtest.MigratedURL(t)
	pool := pgtest.PoolURL(t, url)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, runsDDL); err != nil {
		t.Fatal(err)
	}
	slot := "2026-12-03T02:00:00Z"
	cmd := startChild(t, url, "hang", "CRONSLOT_SLOT="+slot)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("hang: %q %v", line, err)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()

	g := guard(t, pool, &cronslot.Config{LockTimeout: time.Second, Retention: time.Hour})
	write := func(ctx context.Context, tx pgx.Tx, s cronslot.Slot) error {
		_, err := tx.Exec(ctx, `INSERT INTO runs (job, slot, pid) VALUES ($1, $2, 0)`, s.Job, s.At)
		return err
	}
	// DoTx's row lock died with the killed session: nothing was
	// committed, so the slot runs now, once.
	o, err := g.RunSlot(ctx, "nightly", at(slot), nil, write)
	if err != nil || o != cronslot.Ran {
		t.Fatalf("after the kill: %v %v", o, err)
	}
	if o, err := g.RunSlot(ctx, "nightly", at(slot), nil, write); err != nil || o != cronslot.Skipped {
		t.Fatalf("again: %v %v", o, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM runs WHERE slot = $1`, at(slot)).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d runs of the slot (%v), want 1", n, err)
	}
}

// A job outside the database (Func) whose scheduler is killed mid-run:
// the slot is running elsewhere until the lease ends, then taken over.
func TestDeadSchedulerLeaseTakenOver(t *testing.T) {
	t.Parallel()
	url := pgtest.MigratedURL(t)
	pool := pgtest.PoolURL(t, url)
	ctx := context.Background()
	slot := "2026-12-03T03:00:00Z"
	cmd := startChild(t, url, "hang-func", "CRONSLOT_SLOT="+slot, "CRONSLOT_LEASE=6s")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("hang-func: %q %v", line, err)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	g := guard(t, pool, &cronslot.Config{LockTimeout: time.Second, Retention: time.Hour})
	var ran atomic.Int64
	job := func(context.Context, cronslot.Slot) error { ran.Add(1); return nil }
	if o, err := g.RunSlot(ctx, "nightly", at(slot), job, nil); o != cronslot.Skipped || err != nil || ran.Load() != 0 {
		t.Fatalf("while its lease lasts: %v %v", o, err)
	}
	// The dead scheduler's lease ends on the database's clock: until then
	// every firing skips the slot, then one takes it over.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		o, err := g.RunSlot(ctx, "nightly", at(slot), job, nil)
		if err != nil || (o != cronslot.Skipped && o != cronslot.Ran) {
			t.Fatalf("after the kill: %v %v", o, err)
		}
		if o == cronslot.Ran {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead scheduler's slot was never taken over")
		}
	}
	if ran.Load() != 1 {
		t.Fatalf("after the lease: %d runs", ran.Load())
	}
	if o, _ := g.RunSlot(ctx, "nightly", at(slot), job, nil); o != cronslot.Skipped || ran.Load() != 1 {
		t.Fatalf("once done: %v, %d runs", o, ran.Load())
	}
}

// The guard plugs into robfig/cron as a cron.Job.
func TestAddToCron(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	g := guard(t, pool, &cronslot.Config{Retention: time.Hour})
	c := cron.New(cron.WithSeconds())
	var ran atomic.Int64
	if _, err := g.Add(c, "tick", "* * * * * *", func(context.Context, cronslot.Slot) error { ran.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.Start()
	for deadline := start.Add(time.Minute); ran.Load() < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d runs in a minute of a per-second schedule", ran.Load())
		}
	}
	<-c.Stop().Done()
	// One run a slot: never more runs than seconds began.
	if n, most := ran.Load(), int64(time.Since(start)/time.Second)+1; n > most {
		t.Fatalf("%d runs in %s of a per-second schedule", n, time.Since(start))
	}
}
