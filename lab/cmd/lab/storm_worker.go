package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// workerPackage is the demo's worker program: the checkout example's
// service as a process of its own (see its package doc). It is built for
// each storm rather than linked into payonce, so that the operator CLI
// carries no example code.
const workerPackage = "github.com/payonce/payonce/lab/cmd/lab/internal/stormworker"

// buildWorker builds the worker program into a temporary directory, with
// the race detector when payonce itself runs under it (the tests), and
// returns its path and a function that removes it. It needs the Go
// toolchain and payonce's source tree, as make demo has them.
func buildWorker(ctx context.Context) (exe string, clean func(), err error) {
	return buildProgram(ctx, workerPackage)
}

// buildProgram builds pkg (a main package of payonce's tree) as
// buildWorker does.
func buildProgram(ctx context.Context, pkg string) (exe string, clean func(), err error) {
	return build(ctx, pkg, raceEnabled)
}

// build builds pkg (a main package of payonce's tree or of a module it
// requires, such as a tool), with the race detector if race.
func build(ctx context.Context, pkg string, race bool) (exe string, clean func(), err error) {
	dir, err := os.MkdirTemp("", "payonce-demo-")
	if err != nil {
		return "", nil, err
	}
	clean = func() { _ = os.RemoveAll(dir) }
	exe = filepath.Join(dir, filepath.Base(pkg))
	args := []string{"build", "-o", exe}
	if race {
		args = append(args, "-race")
	}
	out, err := exec.CommandContext(ctx, "go", append(args, pkg)...).CombinedOutput()
	if err != nil {
		clean()
		return "", nil, fmt.Errorf("building the demo's worker (%s) needs the Go toolchain and payonce's source tree "+
			"(run make demo from it): %v\n%s", pkg, err, out)
	}
	return exe, clean, nil
}

// worker runs the checkout service as a child process on a fixed address.
type worker struct {
	// exe is the worker program (buildWorker).
	exe  string
	env  []string
	addr string
	// stderr receives the worker's logs; nil: payonce's stderr.
	stderr   io.Writer
	mu       sync.Mutex
	cmd      *exec.Cmd
	restarts int
}

func (w *worker) start() error {
	cmd := exec.Command(w.exe)
	cmd.Env = append(os.Environ(), w.env...)
	cmd.Env = append(cmd.Env, "ADDR="+w.addr)
	cmd.Stderr = os.Stderr
	if w.stderr != nil {
		cmd.Stderr = w.stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "worker: listening on ") {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = cmd.Wait()
			return errors.New("the worker exited before listening")
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		return errors.New("the worker did not listen within 60s")
	}
	w.mu.Lock()
	w.cmd = cmd
	w.mu.Unlock()
	return nil
}

// crash kills the worker with SIGKILL mid-flight and starts a new one.
func (w *worker) crash() error {
	return w.killFor(time.Second) // down for a second: requests and webhooks meanwhile fail
}

// killFor kills the worker with SIGKILL, leaves it down for down, and
// starts a new one.
func (w *worker) killFor(down time.Duration) error {
	w.mu.Lock()
	cmd := w.cmd
	w.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	_ = cmd.Wait()
	w.restarts++
	time.Sleep(down)
	return w.start()
}

// stop stops the worker (SIGTERM) and waits for it to exit; once
// stopped, it does nothing.
func (w *worker) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd != nil {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		_ = w.cmd.Wait()
		w.cmd = nil
	}
}

// freeAddr is a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	port, err := freePort()
	return fmt.Sprintf("127.0.0.1:%d", port), err
}

// withMaxConns is the database URL u with its pool's size set to n
// (pgxpool's pool_max_conns).
func withMaxConns(u string, n int) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + "pool_max_conns=" + strconv.Itoa(n)
}

// appendEnv appends vars to env, as NAME=value.
func appendEnv(env []string, vars map[string]string) []string {
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}
