package pgstore_test

// Recovery after a crash: an instance that starts again under its name
// ends the leases its earlier incarnation held (Config.Instance). The
// holders, the restarted instances and the retries are separate OS
// processes (child_test.go's children), sharing nothing but the database.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
)

// recoveryLock is the lease of the tests' holders: long enough that a
// retry finishing a key on its first try cannot be the lease running out.
const recoveryLock = "2m"

// stallReport is what a "stall" child prints once its Do returned.
type stallReport struct {
	Err       string
	LeaseLost bool
}

// recoveryChild runs the roles of this file's children.
//   - hold: claims each intent of PGSTORE_INTENTS (comma-separated) at
//     once, prints "started <intent>" from each action, and hangs there,
//     before the action's effect, until it is killed.
//   - restart: the instance started again: New has run (and ended its
//     earlier incarnation's leases); prints "ready <n>", n the leases it
//     ended, and exits.
//   - stall: claims PGSTORE_INTENTS' one intent, prints "started" from
//     the action, waits for a line on stdin (the test pauses it with
//     SIGSTOP meanwhile), returns an outcome and prints a stallReport of
//     what Do said.
func recoveryChild(ctx context.Context, role string, exec *pgstore.Executor, store *pgstore.Store) error {
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	intents := strings.Split(os.Getenv("PGSTORE_INTENTS"), ",")
	switch role {
	case "restart":
		say("ready %d", store.ReleasedAtStart())
		return nil
	case "stall":
		_, err := exec.Do(ctx, childRequest(intents[0]), func(ctx context.Context) (idempotency.Response, error) {
			say("started")
			if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
				return idempotency.Response{}, err
			}
			return idempotency.Response{Code: 201, Body: []byte("stalled holder")}, nil
		})
		r := stallReport{LeaseLost: errors.Is(err, idempotency.ErrLeaseLost)}
		if err != nil {
			r.Err = err.Error()
		}
		b, _ := json.Marshal(r)
		say("%s", b)
		return nil
	}
	var wg sync.WaitGroup
	for _, intent := range intents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = exec.Do(ctx, childRequest(intent), func(ctx context.Context) (idempotency.Response, error) {
				say("started %s", intent)
				time.Sleep(time.Hour) // killed here, before its effect
				return idempotency.Response{}, nil
			})
		}()
	}
	wg.Wait()
	return nil
}

// proc is a started child whose stdout lines arrive on lines.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{} // closed once the child was waited for
}

// childTimeout bounds every wait for a child's line or exit.
const childTimeout = 2 * time.Minute

func startProc(t *testing.T, role, url string, env ...string) *proc {
	t.Helper()
	p := &proc{cmd: startChild(t, role, url, env...), lines: make(chan string, 64), done: make(chan struct{})}
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT) // a paused child cannot die
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// next returns the child's next line.
func (p *proc) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatal("the child ended without the line expected (see its stderr)")
		}
		return l
	case <-time.After(childTimeout):
		t.Fatalf("no line from the child within %s", childTimeout)
	}
	return ""
}

// kill SIGKILLs the child and waits for it to be gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(childTimeout):
		t.Fatalf("the child did not die within %s", childTimeout)
	}
}

// restart starts instance under its name again and returns how many leases
// its New ended.
func restart(t *testing.T, url, instance string) int {
	t.Helper()
	p := startProc(t, "restart", url, "PGSTORE_INSTANCE="+instance)
	l := p.next(t)
	n, err := strconv.Atoi(strings.TrimPrefix(l, "ready "))
	if err != nil {
		t.Fatalf("restarted instance said %q", l)
	}
	return n
}

// retry runs the test's retry of intent: an executor in this process,
// with no instance name, whose action records one effect.
func retry(t *testing.T, b bundle, e *pgstore.Executor, intent string) (idempotency.Result, error) {
	t.Helper()
	r := childRequest(intent)
	return e.Do(context.Background(), r, func(ctx context.Context) (idempotency.Response, error) {
		if _, err := b.pool.Exec(ctx, `INSERT INTO effects (key, pid) VALUES ($1, $2)`, r.Key, os.Getpid()); err != nil {
			return idempotency.Response{}, err
		}
		return idempotency.Response{Code: 201, Body: []byte("retried " + intent)}, nil
	})
}

// requireFinishedOnce checks that intent's key has exactly one effect and
// that its record holds the retry's outcome.
func requireFinishedOnce(t *testing.T, b bundle, intent string) {
	t.Helper()
	r := childRequest(intent)
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM effects WHERE key = $1`, r.Key).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%s: %d effects (%v), want exactly 1", intent, n, err)
	}
	rec, err := b.store.Get(context.Background(), r.Scope, r.Key)
	if err != nil || rec.Status != idempotency.StatusCompleted || rec.Response == nil || string(rec.Response.Body) != "retried "+intent {
		t.Fatalf("%s: record %+v %v, want COMPLETED with the retry's outcome", intent, rec, err)
	}
}

func recoverySetup(t *testing.T) (bundle, *pgstore.Executor) {
	t.Helper()
	b := setup(t)
	if _, err := b.pool.Exec(context.Background(), effectsDDL); err != nil {
		t.Fatal(err)
	}
	lock, _ := time.ParseDuration(recoveryLock)
	return b, mustExecutor(t, b.store, &idempotency.Config{LockTimeout: lock})
}

// A holder process is SIGKILLed mid-action with three keys claimed (by
// one group statement); while nothing restarts it, a retry is "in
// progress" for the whole lease. The instance starts again under the same
// name: its New ends the three leases, and the very first retry of each
// key reclaims it and finishes it, long before the lease would have run
// out; each key has exactly one effect and the retry's outcome.
func TestRestartedInstanceReleasesAtOnce(t *testing.T) {
	t.Parallel()
	b, e := recoverySetup(t)
	intents := []string{"restart-1", "restart-2", "restart-3"}
	holder := startProc(t, "hold", b.url, "PGSTORE_INSTANCE=worker-1", "PGSTORE_LOCK="+recoveryLock,
		"PGSTORE_GROUP=1", "PGSTORE_INTENTS="+strings.Join(intents, ","))
	for range intents {
		if l := holder.next(t); !strings.HasPrefix(l, "started ") {
			t.Fatalf("holder said %q", l)
		}
	}
	holder.kill(t)

	if _, err := retry(t, b, e, intents[0]); !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("retry before the restart: %v, want ErrInProgress (the dead holder's lease)", err)
	}
	released := restart(t, b.url, "worker-1")
	for _, intent := range intents {
		res, err := retry(t, b, e, intent)
		if err != nil || res.Replayed || !res.Reclaimed {
			t.Fatalf("%s: first retry after the restart: %+v %v, want it reclaimed and finished at once", intent, res, err)
		}
		requireFinishedOnce(t, b, intent)
		if res, err := retry(t, b, e, intent); err != nil || !res.Replayed {
			t.Fatalf("%s: later retry: %+v %v, want a replay", intent, res, err)
		}
	}
	if released != len(intents) {
		t.Fatalf("the restarted instance reports %d leases ended, want %d", released, len(intents))
	}
}

// A holder that is paused mid-action (SIGSTOP: alive, not killed) while
// its instance starts again under its name is fenced off: the restart
// ends its lease under a new lock version, a retry takes the key over and
// records its outcome, and when the stalled holder resumes and returns
// its own outcome, Do refuses to record it (ErrLeaseLost). The record
// keeps the retry's outcome.
func TestStalledHolderFencedAfterRestart(t *testing.T) {
	t.Parallel()
	b, e := recoverySetup(t)
	const intent = "stalled"
	holder := startProc(t, "stall", b.url, "PGSTORE_INSTANCE=worker-2", "PGSTORE_LOCK="+recoveryLock,
		"PGSTORE_STRATEGY=1", "PGSTORE_INTENTS="+intent)
	if l := holder.next(t); l != "started" {
		t.Fatalf("holder said %q", l)
	}
	if err := holder.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if n := restart(t, b.url, "worker-2"); n != 1 {
		t.Fatalf("the restarted instance ended %d leases, want 1", n)
	}
	res, err := retry(t, b, e, intent)
	if err != nil || !res.Reclaimed {
		t.Fatalf("retry after the restart: %+v %v, want it reclaimed and finished", res, err)
	}

	if err := holder.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(holder.stdin, "go on\n"); err != nil {
		t.Fatal(err)
	}
	var rep stallReport
	if l := holder.next(t); json.Unmarshal([]byte(l), &rep) != nil || !rep.LeaseLost {
		t.Fatalf("the stalled holder's Do said %q, want ErrLeaseLost", l)
	}
	requireFinishedOnce(t, b, intent)
}

// Only the instance's own name ends leases. A holder of instance worker-a
// is killed; worker-b starts and ends nothing (a retry is still "in
// progress"); a second store of this process under the name of a live
// lease's holder ends nothing either (one process, one incarnation). Then
// worker-a starts again and its key is finished at once.
func TestOtherInstanceReleasesNothing(t *testing.T) {
	t.Parallel()
	b, e := recoverySetup(t)
	const intent = "other-instance"
	holder := startProc(t, "hold", b.url, "PGSTORE_INSTANCE=worker-a", "PGSTORE_LOCK="+recoveryLock, "PGSTORE_INTENTS="+intent)
	if l := holder.next(t); l != "started "+intent {
		t.Fatalf("holder said %q", l)
	}
	holder.kill(t)

	if n := restart(t, b.url, "worker-b"); n != 0 {
		t.Fatalf("another instance ended %d leases, want 0", n)
	}
	if _, err := retry(t, b, e, intent); !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("retry after another instance started: %v, want ErrInProgress", err)
	}

	// This process under one name, twice.
	ctx := context.Background()
	first := mustStore(t, b.pool, &pgstore.Config{Instance: "worker-c"})
	p := params(t, "same-process")
	c, err := first.Claim(ctx, p)
	if err != nil || c.State != idempotency.ClaimAcquired {
		t.Fatalf("claim: %v %v", c.State, err)
	}
	second := mustStore(t, b.pool, &pgstore.Config{Instance: "worker-c"})
	if n := second.ReleasedAtStart(); n != 0 {
		t.Fatalf("a second store of the same process ended %d leases, want 0", n)
	}
	if c2, err := b.store.Claim(ctx, p); err != nil || c2.State != idempotency.ClaimInProgress {
		t.Fatalf("claim after the second store started: %v %v, want in progress", c2.State, err)
	}
	if err := first.Complete(ctx, c.Lease, outcomeOf(p.Key)); err != nil {
		t.Fatalf("the live holder's completion: %v", err)
	}

	if n := restart(t, b.url, "worker-a"); n != 1 {
		t.Fatalf("worker-a ended %d leases, want 1", n)
	}
	if res, err := retry(t, b, e, intent); err != nil || !res.Reclaimed {
		t.Fatalf("retry after worker-a restarted: %+v %v, want it reclaimed and finished", res, err)
	}
	requireFinishedOnce(t, b, intent)
}

// A lease taken over records its new holder: a key released by its holder
// of instance worker-x (a transient error) and reclaimed by a store
// without an instance name is no longer worker-x's, and worker-x starting
// again leaves the new holder's lease alone. So does a renewal of an
// expired record.
func TestTakeoverRecordsNewHolder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	x := mustStore(t, b.pool, &pgstore.Config{Instance: "worker-x"})
	renewed := params(t, "renewed")
	r, err := x.Claim(ctx, renewed)
	if err != nil || r.State != idempotency.ClaimAcquired {
		t.Fatalf("claim: %v %v", r.State, err)
	}
	if err := x.Complete(ctx, r.Lease, outcomeOf(renewed.Key)); err != nil {
		t.Fatal(err)
	}
	advance(b.pool)(t, 48*time.Hour)
	if r, err = b.store.Claim(ctx, renewed); err != nil || r.State != idempotency.ClaimAcquired {
		t.Fatalf("renewal: %v %v", r.State, err)
	}
	p := params(t, "taken-over")
	c, err := x.Claim(ctx, p)
	if err != nil || c.State != idempotency.ClaimAcquired {
		t.Fatalf("claim: %v %v", c.State, err)
	}
	if err := x.Release(ctx, c.Lease); err != nil {
		t.Fatal(err)
	}
	if c, err = b.store.Claim(ctx, p); err != nil || c.State != idempotency.ClaimReclaimed {
		t.Fatalf("reclaim: %v %v", c.State, err)
	}

	if n := restart(t, b.url, "worker-x"); n != 0 {
		t.Fatalf("worker-x ended %d leases it no longer holds, want 0", n)
	}
	for _, k := range []idempotency.ClaimParams{p, renewed} {
		if got, err := b.store.Claim(ctx, k); err != nil || got.State != idempotency.ClaimInProgress {
			t.Fatalf("%s after worker-x restarted: %v %v, want in progress (the new holder's lease)", k.Key, got.State, err)
		}
	}
}

// A bad instance name is refused, naming the field and what to use.
func TestInstanceNameValidated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, name := range []string{"worker 1", strings.Repeat("w", 129), "pod\n"} {
		_, err := pgstore.New(b.pool, &pgstore.Config{Instance: name})
		var inv *idempotency.InvalidError
		if !errors.As(err, &inv) || inv.Field != "Config.Instance" {
			t.Fatalf("Instance %q: %v, want an *InvalidError on Config.Instance", name, err)
		}
	}
}

// Heartbeats of many actions at once go in groups, fenced per row: the
// leases still held are extended, a heartbeat under a lease lost to a
// takeover gets ErrLeaseLost and leaves the new holder's lease as it was.
func TestGroupCommitHeartbeats(t *testing.T) {
	t.Parallel()
	b := groupStore(t)
	ctx := context.Background()
	const n = 32
	leases := make([]idempotency.Lease, n)
	stale := map[int]bool{}
	for i := range leases {
		p := params(t, fmt.Sprintf("beat-%d", i))
		leases[i] = mustClaim(t, b.store, p.Key)
		if i%4 == 3 { // taken over: leases[i] is lost
			stale[i] = true
			if err := b.store.Release(ctx, leases[i]); err != nil {
				t.Fatal(err)
			}
			if c, err := b.store.Claim(ctx, p); err != nil || c.State != idempotency.ClaimReclaimed {
				t.Fatalf("takeover: %v %v", c.State, err)
			}
		}
	}
	before := b.store.GroupedRows()
	errs := make([]error, n)
	var wg sync.WaitGroup
	beat := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.store.Heartbeat(ctx, leases[i], time.Hour)
		}()
	}
	// The first heartbeat takes the one flight and waits for a row lock
	// held here, so that the others queue behind it whatever the
	// scheduler does, and go as a group once it lands.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM idempotency_store WHERE idempotency_key = $1 AND user_id = $2 FOR UPDATE`,
		leases[0].Key, leases[0].Scope); err != nil {
		t.Fatal(err)
	}
	beat(0)
	waitForLockWait(t, b.pool, tx)
	b.store.SetGroupStall(answerWait) // no queued caller starts a flight of its own
	for i := 1; i < n; i++ {
		beat(i)
	}
	waitQueued(t, b.store, "heartbeat", n-1)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, l := range leases {
		var left time.Duration
		if err := b.pool.QueryRow(ctx, `SELECT extract(epoch FROM locked_until - now())::float8 * 1e9 FROM idempotency_store
			WHERE idempotency_key = $1 AND user_id = $2`, l.Key, l.Scope).Scan(&left); err != nil {
			t.Fatal(err)
		}
		switch {
		case stale[i] && (!errors.Is(errs[i], idempotency.ErrLeaseLost) || left > 30*time.Minute):
			t.Errorf("lost lease %d: %v, lease left %s; want ErrLeaseLost and the new holder's minute", i, errs[i], left)
		case !stale[i] && (errs[i] != nil || left < 30*time.Minute):
			t.Errorf("lease %d: %v, lease left %s; want it extended to an hour", i, errs[i], left)
		}
	}
	if b.store.GroupedRows() == before {
		t.Error("no heartbeat went in a group: the test proves nothing")
	}
}
