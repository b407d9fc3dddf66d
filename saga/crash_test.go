package saga_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/internal/crashpoint"
	"github.com/payonce/payonce/saga"
)

// The crash matrix: a child process (this test binary, re-executed) runs
// the checkout saga and is killed with SIGKILL just before or just after
// the commit that records one step's (or one compensation's) outcome.
// Then either the client retries, or only Recover runs: both end the saga
// COMPLETED (or ROLLED_BACK when shipping fails), every effect once.

const (
	envCrashPoint  = "PAYONCE_SAGA_CRASH_POINT"
	envCrashKey    = "PAYONCE_SAGA_CRASH_KEY"
	envCrashDB     = "PAYONCE_SAGA_CRASH_DB"
	envCrashRemote = "PAYONCE_SAGA_CRASH_REMOTE"
	envCrashInput  = "PAYONCE_SAGA_CRASH_INPUT"
)

// crashLease is the child's lease: what the survivors wait for. Seconds, not
// a fraction of one: a holder whose heartbeats go unconfirmed for the lease
// less its margin stops, and on a loaded machine one round trip may take
// most of a second.
const crashLease = 3 * time.Second

const crashSagaKey = "order-crash"

func TestCrashAtStepBoundaries(t *testing.T) {
	t.Parallel()
	type boundary struct {
		call     string // the sub-key whose commit the child dies at
		failShip bool
	}
	var boundaries []boundary
	for _, step := range []string{"reserve", "charge", "ship"} {
		boundaries = append(boundaries, boundary{saga.SubKey(crashSagaKey, step), false})
	}
	boundaries = append(boundaries, boundary{saga.SubKey(crashSagaKey, "ship"), true},
		boundary{saga.CompensationKey(crashSagaKey, "charge"), true},
		boundary{saga.CompensationKey(crashSagaKey, "reserve"), true})

	for _, bd := range boundaries {
		for _, point := range []string{saga.PointBeforeCommit, saga.PointAfterCommit} {
			for _, by := range []string{"retry", "recover"} {
				name := fmt.Sprintf("%s/%s/%s", bd.call, point, by)
				if bd.failShip {
					name = "rollback/" + name
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					b := setup(t, nil)
					in := order{Item: "crate", Amount: 4200, FailShip: bd.failShip}
					crashChildAt(t, b, point, bd.call, in)
					if s := b.state(t, crashSagaKey); s.Status.Final() {
						t.Fatalf("the child finished the saga before its crash point: %s", s.Status)
					}

					p := b.params(crashSagaKey, in)
					var res saga.Result
					var err error
					if by == "retry" {
						res, err = retryUntilFinal(b.orch, p)
					} else {
						recoverUntilFinal(t, b)
						res, err = b.orch.Run(ctx, p)
						if !res.Replayed {
							t.Fatalf("the client after recovery ran the saga again: %+v %v", res, err)
						}
					}
					want, wantEffects := saga.StatusCompleted, completedEffects
					if bd.failShip {
						want, wantEffects = saga.StatusRolledBack, rolledBackEffects
					}
					if res.Status != want || (err == nil) != (want == saga.StatusCompleted) {
						t.Fatalf("outcome: %+v %v, want %s", res, err, want)
					}
					if got := b.effects(t); got != wantEffects {
						t.Fatalf("effects %+v, want %+v", got, wantEffects)
					}
					if s := b.state(t, crashSagaKey); s.Status != want {
						t.Fatalf("stored status %s, want %s", s.Status, want)
					}
				})
			}
		}
	}
}

// crashChildAt runs the saga in a child process that kills itself at
// point for the call with key.
func crashChildAt(t *testing.T, b *bundle, point, key string, in order) {
	t.Helper()
	input, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.count=1")
	cmd.Env = append(os.Environ(), envCrashPoint+"="+point, envCrashKey+"="+key, envCrashDB+"="+b.url,
		envCrashRemote+"="+b.remote.URL(), envCrashInput+"="+string(input))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed at %s of %s: %v\n%s", point, key, err, out)
	}
}

// crashChild is the child's whole life (from TestMain): run the saga,
// die at the crash point.
func crashChild() {
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		os.Exit(3)
	}
	point, key := os.Getenv(envCrashPoint), os.Getenv(envCrashKey)
	pool, err := pgxpool.New(context.Background(), os.Getenv(envCrashDB))
	if err != nil {
		fail("child: %v", err)
	}
	o, err := saga.New(pool, &saga.Config{LockTimeout: crashLease, CompensationBackoff: time.Millisecond})
	if err != nil {
		fail("child: %v", err)
	}
	if err := o.Register(checkout(os.Getenv(envCrashRemote), nil)); err != nil {
		fail("child: %v", err)
	}
	crashpoint.Set(func(p, k string) {
		if p == point && k == key {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	})
	res, err := o.Run(context.Background(), saga.RunParams{Saga: "checkout", Scope: scope, Key: crashSagaKey,
		Input: json.RawMessage(os.Getenv(envCrashInput))})
	fail("child survived its crash point %s of %s: %+v %v", point, key, res, err)
}

// retryUntilFinal retries as an impatient client would, until the saga's
// outcome.
func retryUntilFinal(o *saga.Orchestrator, p saga.RunParams) (saga.Result, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		res, err := o.Run(ctx, p)
		retry := errors.Is(err, idempotency.ErrInProgress) || errors.Is(err, saga.ErrPending)
		if !retry || time.Now().After(deadline) {
			return res, err
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// recoverUntilFinal runs only Recover until the saga is final.
func recoverUntilFinal(t *testing.T, b *bundle) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if _, err := b.orch.Recover(ctx); err != nil {
			t.Fatalf("recover: %v", err)
		}
		if b.state(t, crashSagaKey).Status.Final() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not final 2 minutes after the crash: %+v", b.state(t, crashSagaKey))
		}
		time.Sleep(25 * time.Millisecond)
	}
}
