package main

// (k) recovery: how long a key whose holder was killed mid-action stays
// blocked when its supervisor restarts the holder at once under the same
// instance name (pgstore's Config.Instance).
//
// Each round starts recoveryHolders holder processes (this program again,
// BENCH_RECOVERY_ROLE=hold), each with its own instance name; each claims
// recoveryKeysPerHolder new keys and hangs in every action. Once every
// action has started, the bench SIGKILLs them all and at once starts each
// again under its name (BENCH_RECOVERY_ROLE=restart: pgstore.New, which
// ends the dead incarnation's leases, then exit), while a client retries
// every key with Do every recoveryRetryEvery until it finishes. A sample
// is the time from the kill until the retry that finished a key returned.
// Without an instance name, that time is the lease in force (printed
// beside the figures).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/pgstore"
)

const (
	recoveryHolders       = 5
	recoveryKeysPerHolder = 10
	// recoveryRetryEvery is the client's pause after an "in progress"
	// answer: the resolution of the figures.
	recoveryRetryEvery = 20 * time.Millisecond
	// recoveryTimeout bounds each round: a key the restart did not free
	// waits for the lease, and the round fails rather than report it.
	recoveryTimeout = 2 * time.Minute
)

// runRecoveryChild runs the role named by BENCH_RECOVERY_ROLE, if any, and
// reports whether this process was such a child.
func runRecoveryChild() bool {
	role := os.Getenv("BENCH_RECOVERY_ROLE")
	if role == "" {
		return false
	}
	if err := recoveryChild(role); err != nil {
		fmt.Fprintln(os.Stderr, "bench: recovery child:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

func recoveryChild(role string) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("BENCH_RECOVERY_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := pgstore.New(pool, &pgstore.Config{Instance: os.Getenv(pgstore.InstanceEnv)})
	if err != nil {
		return err
	}
	switch role {
	case "restart":
		fmt.Printf("ready %d\n", store.ReleasedAtStart())
		return nil
	case "hold":
		exec, err := pgstore.NewExecutor(store, nil)
		if err != nil {
			return err
		}
		fp, err := benchFingerprint()
		if err != nil {
			return err
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, key := range strings.Split(os.Getenv("BENCH_RECOVERY_KEYS"), ",") {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := exec.Do(ctx, idempotency.Request{Scope: scope, Key: key, Fingerprint: fp},
					func(ctx context.Context) (idempotency.Response, error) {
						mu.Lock()
						fmt.Println("started")
						mu.Unlock()
						time.Sleep(time.Hour) // killed here
						return response(), nil
					})
				if err != nil {
					fmt.Fprintln(os.Stderr, "bench: recovery holder:", err)
				}
			}()
		}
		wg.Wait()
		return nil
	}
	return fmt.Errorf("unknown role %q", role)
}

// recoveryProc starts this program in a recovery role and returns it with
// its stdout.
func recoveryProc(role, url, instance string, keys []string) (*exec.Cmd, *bufio.Scanner, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), "BENCH_RECOVERY_ROLE="+role, "BENCH_RECOVERY_URL="+url,
		pgstore.InstanceEnv+"="+instance, "BENCH_RECOVERY_KEYS="+strings.Join(keys, ","))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return cmd, bufio.NewScanner(out), nil
}

// benchRecovery runs rounds of (k) and prints
// `recovery p50=<d> p99=<d> lease=<d>`.
func benchRecovery(ctx context.Context, url string, rounds int) error {
	pool, err := newPool(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := pgstore.New(pool, nil)
	if err != nil {
		return err
	}
	client, err := pgstore.NewExecutor(store, nil) // the default lease, as the holders'
	if err != nil {
		return err
	}
	fp, err := benchFingerprint()
	if err != nil {
		return err
	}
	var all, ready []time.Duration
	for r := 0; r < rounds; r++ {
		fmt.Fprintf(os.Stderr, "recovery round %d/%d\n", r+1, rounds)
		took, up, err := recoveryRound(ctx, url, client, fp, r)
		if err != nil {
			return fmt.Errorf("recovery round %d: %w", r+1, err)
		}
		all, ready = append(all, took...), append(ready, up...)
	}
	slices.Sort(all)
	slices.Sort(ready)
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	fmt.Printf("\n(k) recovery: %d holders x %d keys SIGKILLed mid-action and restarted at once under their instance names, %d rounds; kill -> retry finished (retry every %s)\n",
		recoveryHolders, recoveryKeysPerHolder, rounds, recoveryRetryEvery)
	fmt.Printf("(k) of which the restart, kill -> restarted instance's leases ended: p50 %s, max %s\n", ms(ready[len(ready)/2]), ms(ready[len(ready)-1]))
	fmt.Printf("recovery p50=%s p99=%s lease=%s\n", ms(all[len(all)/2]), ms(all[len(all)*99/100]), client.Config().LockTimeout)
	return nil
}

// recoveryRound returns, per key, the time from the kill until a retry
// finished it, and per holder, until its restarted instance had ended the
// dead incarnation's leases.
func recoveryRound(ctx context.Context, url string, client *pgstore.Executor, fp idempotency.Fingerprint, round int) (took, ready []time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, recoveryTimeout)
	defer cancel()
	holders := make([]*exec.Cmd, recoveryHolders)
	keys := make([][]string, recoveryHolders)
	defer func() { // a round that failed leaves no process behind
		for _, h := range holders {
			if h != nil && h.ProcessState == nil {
				_ = h.Process.Kill()
				_ = h.Wait()
			}
		}
	}()
	started := make(chan error, recoveryHolders*recoveryKeysPerHolder)
	for h := range holders {
		for k := 0; k < recoveryKeysPerHolder; k++ {
			keys[h] = append(keys[h], fmt.Sprintf("rec%d_%d_%d_%d", round, h, k, time.Now().UnixNano()))
		}
		cmd, out, err := recoveryProc("hold", url, instanceName(h), keys[h])
		if err != nil {
			return nil, nil, err
		}
		holders[h] = cmd
		go func() {
			n := 0
			for n < recoveryKeysPerHolder && out.Scan() {
				if out.Text() == "started" {
					n++
					started <- nil
				}
			}
			if n < recoveryKeysPerHolder {
				started <- fmt.Errorf("holder %d ended after %d of %d actions started", h, n, recoveryKeysPerHolder)
			}
		}()
	}
	for i := 0; i < recoveryHolders*recoveryKeysPerHolder; i++ {
		select {
		case err := <-started:
			if err != nil {
				return nil, nil, err
			}
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("the holders' actions did not start: %w", ctx.Err())
		}
	}

	// The kill, and the supervisor's restart at once under the same names.
	killed := time.Now()
	for _, h := range holders {
		_ = h.Process.Signal(syscall.SIGKILL)
	}
	type restarted struct {
		at  time.Duration
		err error
	}
	restarts := make(chan restarted, recoveryHolders)
	for h, cmd := range holders {
		_ = cmd.Wait()
		go func() {
			at, err := restartHolder(url, instanceName(h), killed)
			restarts <- restarted{at, err}
		}()
	}

	// The client's retries, every key at once.
	var executed atomic.Int64
	took = make([]time.Duration, 0, recoveryHolders*recoveryKeysPerHolder)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, recoveryHolders*recoveryKeysPerHolder)
	for _, hk := range keys {
		for _, key := range hk {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					res, err := client.Do(ctx, idempotency.Request{Scope: scope, Key: key, Fingerprint: fp},
						func(ctx context.Context) (idempotency.Response, error) {
							executed.Add(1)
							return response(), nil
						})
					if err == nil && !res.Replayed {
						mu.Lock()
						took = append(took, time.Since(killed))
						mu.Unlock()
						return
					}
					if err == nil || !errors.Is(err, idempotency.ErrInProgress) {
						errs <- fmt.Errorf("retry: %+v %v", res, err)
						return
					}
					select {
					case <-ctx.Done():
						errs <- fmt.Errorf("a key was not freed by the restart: %w", ctx.Err())
						return
					case <-time.After(recoveryRetryEvery):
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, nil, err
	}
	for range holders {
		r := <-restarts
		if r.err != nil {
			return nil, nil, r.err
		}
		ready = append(ready, r.at)
	}
	if n := executed.Load(); n != recoveryHolders*recoveryKeysPerHolder {
		return nil, nil, fmt.Errorf("%d executions for %d keys", n, recoveryHolders*recoveryKeysPerHolder)
	}
	return took, ready, nil
}

func instanceName(h int) string { return "bench-holder-" + strconv.Itoa(h) }

// restartHolder starts holder instance again, checks that it ended the
// dead incarnation's leases, and returns when it said so, since killed.
func restartHolder(url, instance string, killed time.Time) (time.Duration, error) {
	cmd, out, err := recoveryProc("restart", url, instance, nil)
	if err != nil {
		return 0, err
	}
	var line string
	if out.Scan() {
		line = out.Text()
	}
	at := time.Since(killed)
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("restarted %s: %v", instance, err)
	}
	if line != "ready "+strconv.Itoa(recoveryKeysPerHolder) {
		return 0, fmt.Errorf("restarted %s said %q, want %d leases ended", instance, line, recoveryKeysPerHolder)
	}
	return at, nil
}
