package main

import (
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The test binary is the CLI when PAYONCE_CLI_MAIN=1, so that commands
// run as real processes.
func TestMain(m *testing.M) {
	if os.Getenv("PAYONCE_CLI_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// cli runs the CLI as a process and returns its output and exit code.
func cli(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	return cliProcess(t, nil, env, args...)
}

// cliProcess is cli with stdin read from stdin (nil: the null device).
func cliProcess(t *testing.T, stdin io.Reader, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "PAYONCE_CLI_MAIN=1"), env...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		t.Fatalf("payonce %v: %v", args, err)
	}
	return string(out), 0
}

func TestUsage(t *testing.T) {
	t.Parallel()
	if out, code := cli(t, nil, "nope"); code != 2 || !strings.Contains(out, "unknown command") {
		t.Fatalf("unknown command: exit %d\n%s", code, out)
	}
}

// Shell completion comes from cobra: a script per shell, and the
// commands' first arguments.
func TestCompletion(t *testing.T) {
	t.Parallel()
	if out, code := cli(t, nil, "completion", "bash"); code != 0 || !strings.Contains(out, "__start_payonce") {
		t.Fatalf("completion bash: exit %d\n%.300s", code, out)
	}
	out, code := cli(t, nil, "__complete", "migrate", "")
	if code != 0 || !strings.Contains(out, "up\nstatus\nprint\n") {
		t.Fatalf("completing migrate: exit %d\n%s", code, out)
	}
	if out, code := cli(t, nil, "__complete", "rep"); code != 0 || !strings.Contains(out, "report") {
		t.Fatalf("completing a command: exit %d\n%s", code, out)
	}
	if out, code := cli(t, nil, "help", "prune"); code != 0 || !strings.HasPrefix(out, "Usage: payonce prune") {
		t.Fatalf("help prune: exit %d\n%s", code, out)
	}
	if out, code := cli(t, nil, "help", "nope"); code != 2 || !strings.Contains(out, `no help for "nope"`) {
		t.Fatalf("help nope: exit %d\n%s", code, out)
	}
}
