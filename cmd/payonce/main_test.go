package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/payonce/payonce/internal/cli/clitest"
)

// payonce is the test binary, run as the CLI so that commands run as real
// processes.
var payonce = clitest.Program{Name: "payonce", Env: "PAYONCE_CLI_MAIN"}

func TestMain(m *testing.M) { payonce.TestMain(m, main) }

// runCLI runs the CLI as a process and returns its output and exit code.
func runCLI(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	return payonce.Run(t, nil, env, args...)
}

func TestUsage(t *testing.T) {
	t.Parallel()
	if out, code := runCLI(t, nil, "nope"); code != 2 || !strings.Contains(out, `unknown command "nope"`) {
		t.Fatalf("unknown command: exit %d\n%s", code, out)
	}
	if out, code := runCLI(t, nil); code != 2 || !strings.Contains(out, "Usage: payonce COMMAND") || !strings.Contains(out, "no command given") {
		t.Fatalf("no command: exit %d\n%s", code, out)
	}
	if out, code := runCLI(t, nil, "migrate"); code != 2 || !strings.Contains(out, "migrate needs a subcommand: up, status or print") {
		t.Fatalf("migrate without a subcommand: exit %d\n%s", code, out)
	}
}

// A mistyped command or flag is a usage error that names it and, for a
// near miss, what was meant.
func TestSuggestions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stuk"}, `unknown command "stuk" for "payonce"; did you mean stuck?`},
		{[]string{"migrate", "stauts"}, `unknown command "stauts" for "payonce migrate"; did you mean status?`},
		{[]string{"help", "relase"}, `no help for "relase"; did you mean release?`},
		{[]string{"stuck", "--olderthan", "1m"}, "stuck: unknown flag: --olderthan; did you mean --older-than? (see payonce stuck --help)"},
		{[]string{"stuck", "-older-than", "1m"}, "did you mean --older-than?"}, // the standard library's single dash
		{[]string{"prune", "--lim", "5"}, "unknown flag: --lim; did you mean --limit?"},
		{[]string{"release", "usr_1", "usr_1_charge_x", "--Yes"}, "did you mean --yes?"},
		{[]string{"migrate", "up", "--database-uri", "x"}, "migrate up: unknown flag: --database-uri; did you mean --database-url?"},
		{[]string{"report", "--format"}, "report: flag needs an argument: --format"},
	} {
		out, code := runCLI(t, []string{"DATABASE_URL="}, tc.args...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("payonce %q: exit %d, want 2 and %q:\n%s", tc.args, code, tc.want, out)
		}
	}
	// No suggestion for a flag nothing like the command's.
	if out, code := runCLI(t, nil, "stuck", "--nope"); code != 2 || !strings.Contains(out, "unknown flag: --nope (see") {
		t.Errorf("stuck --nope: exit %d\n%s", code, out)
	}
}

// Shell completion comes from cobra: a script per shell, the commands,
// subcommands, flags and flag values.
func TestCompletion(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		if out, code := runCLI(t, nil, "completion", shell); code != 0 || !strings.Contains(out, "payonce") {
			t.Fatalf("completion %s: exit %d\n%.300s", shell, code, out)
		}
	}
	if out, code := runCLI(t, nil, "completion", "bash"); code != 0 || !strings.Contains(out, "__start_payonce") {
		t.Fatalf("completion bash: exit %d\n%.300s", code, out)
	}
	if out, code := runCLI(t, nil, "completion", "tcsh"); code != 2 || !strings.Contains(out, `unknown command "tcsh"`) {
		t.Fatalf("completion tcsh: exit %d\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string // a regexp on the completions, one a line
	}{
		{[]string{"migrate", ""}, "(?m)^up\t.*\nstatus\t.*\nprint\t"},
		{[]string{"rep"}, "(?m)^report\t"},
		{[]string{"stuck", "--ol"}, "(?m)^--older-than\t"},
		{[]string{"migrate", "up", "--data"}, "(?m)^--database-url\t"},
		{[]string{"stuck", "--format", ""}, "(?m)^table\njson\n"},
		{[]string{"report", "--format", "h"}, "(?m)^html\n"},
		{[]string{"help", "mig"}, "(?m)^migrate\t"},
	} {
		out, code := runCLI(t, nil, append([]string{"__complete"}, tc.args...)...)
		if code != 0 || !regexp.MustCompile(tc.want).MatchString(out) {
			t.Errorf("completing %q: exit %d, want %s\n%s", tc.args, code, tc.want, out)
		}
	}
	if out, code := runCLI(t, nil, "help", "prune"); code != 0 || !strings.HasPrefix(out, "Usage: payonce prune") {
		t.Fatalf("help prune: exit %d\n%s", code, out)
	}
	if out, code := runCLI(t, nil, "help", "nope"); code != 2 || !strings.Contains(out, `no help for "nope"`) {
		t.Fatalf("help nope: exit %d\n%s", code, out)
	}
}
