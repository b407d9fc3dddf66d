// Package designkit runs the code that `payonce design --code` writes for
// each stack that has a kit (Python, TypeScript on Node, Java), in the
// stack's own toolchain and test framework, against real servers: a
// generated artifact that does not compile or whose scenario tests fail
// fails make test. The answers files are the design package's
// testdata/stacks; the toolchains are installed by .ci/deps/*.sh (run by
// .ci/run), and a missing one fails the test with the script to run.
package designkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/payonce/payonce/idempotency/dynamostore/dynamotest"
	"github.com/payonce/payonce/idempotency/redisstore/redistest"
)

var (
	buildOnce sync.Once
	payonce   string // the payonce binary built for this test binary
	buildErr  error
	binDir    string
)

// root is the repository's root, from this file's place.
func root(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("designkit: no caller information")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// stops are run after every test, in reverse order: each language's
// servers register their stop here (register with atExit).
var (
	stopsMu sync.Mutex
	stops   []func()
)

// atExit registers f to run once every test has ended.
func atExit(f func()) {
	stopsMu.Lock()
	defer stopsMu.Unlock()
	stops = append(stops, f)
}

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.Stop()
	dynamotest.Stop()
	stopsMu.Lock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	stopsMu.Unlock()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// generate writes the document and the kit of the answers file
// cmd/payonce/internal/design/testdata/stacks/<stack>.yaml into a folder
// of the test's and returns the kit's folder.
func generate(t *testing.T, stack string) string {
	t.Helper()
	return generateFrom(t, filepath.Join(root(t), "cmd", "payonce", "internal", "design", "testdata", "stacks", stack+".yaml"))
}

// generateFrom is generate for the answers file at answers.
func generateFrom(t *testing.T, answers string) string {
	t.Helper()
	r := root(t)
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "designkit-")
		if buildErr != nil {
			return
		}
		payonce = filepath.Join(binDir, "payonce")
		cmd := exec.Command("go", "build", "-o", payonce, ".")
		cmd.Dir = filepath.Join(r, "cmd", "payonce")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = &buildError{err: err, out: string(out)}
		}
	})
	if buildErr != nil {
		t.Fatalf("designkit: building payonce: %v", buildErr)
	}
	dir := t.TempDir()
	kit := filepath.Join(dir, "kit")
	cmd := exec.Command(payonce, "design", "--no-input", "--answers", answers, "--out", filepath.Join(dir, "design.md"), "--format", "markdown", "--code", kit)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("payonce design --code for %s: %v\n%s", filepath.Base(answers), err, out)
	}
	return kit
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// need fails the test unless every program is on PATH, naming the script
// that installs them.
func need(t *testing.T, script string, programs ...string) {
	t.Helper()
	var missing []string
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("designkit: %s not found: run .ci/deps/%s (as root) to install the toolchain", strings.Join(missing, ", "), script)
	}
}

// run runs name with args in dir, with env added to the environment, and
// fails the test with its output when it fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}
