// Package clitest runs a program's commands as real processes in its
// tests: the test binary is the program when an environment variable says
// so (TestMain), and Run starts it with the arguments to test.
package clitest

import (
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Program is a command-line program whose test binary is the program when
// Env is "1" (PAYONCE_CLI_MAIN for payonce).
type Program struct {
	Name string // for failures: "payonce"
	Env  string
}

// TestMain runs main, in place of the tests, in a process that Command
// started.
func (p Program) TestMain(m *testing.M, main func()) {
	if os.Getenv(p.Env) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Command is the program run with args, env added to the test's
// environment.
func (p Program) Command(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), p.Env+"=1"), env...)
	return cmd
}

// Run runs the program with args, stdin read from stdin (nil: the null
// device), and returns its output (stdout and stderr) and exit code.
func (p Program) Run(t testing.TB, stdin io.Reader, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := p.Command(env, args...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		t.Fatalf("%s %v: %v", p.Name, args, err)
	}
	return string(out), 0
}

// QuickExit is env with GORACE's atexit_sleep_ms=0 added: it spares each
// process the race detector's one-second wait at a successful exit,
// keeping the other options.
func QuickExit(env []string) []string {
	return append(env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
}
