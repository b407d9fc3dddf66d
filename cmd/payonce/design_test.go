package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/term"

	"github.com/payonce/payonce/internal/cli"
)

// designCLI runs payonce design with args on the given streams, through
// the CLI's command tree: it asks its questions when stdin is a terminal.
func designCLI(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	root := newRoot()
	root.SetArgs(append([]string{"design"}, args...))
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.Execute()
}

func TestDesignAnswersFileBothFormats(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, f := range []struct{ format, out, marker string }{
		{"html", "d.html", "<!DOCTYPE html>"},
		{"markdown", "d.md", "## 1. Action analysis"},
	} {
		var stdout, stderr bytes.Buffer
		out := filepath.Join(dir, f.out)
		err := designCLI([]string{"--answers", "internal/design/testdata/checkout.yaml", "--scan", "../../examples/checkout",
			"--format", f.format, "--out", out}, strings.NewReader(""), &stdout, &stderr)
		if err != nil {
			t.Fatalf("%s: %v\n%s", f.format, err, stderr.String())
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte(f.marker)) && !bytes.Contains(b, []byte(f.marker)) {
			t.Errorf("%s: %q missing", f.format, f.marker)
		}
		if !strings.Contains(stdout.String(), "key decisions:") || !strings.Contains(stdout.String(), "retention 45d") {
			t.Errorf("%s: no summary of the key decisions:\n%s", f.format, stdout.String())
		}
		if !regexp.MustCompile(`service/service\.go:\d+: route: POST /checkout\n`).MatchString(stderr.String()) {
			t.Errorf("%s: the scan did not report the checkout route:\n%s", f.format, stderr.String())
		}
	}
}

// TestDesignRefusesConstraintViolation: an action longer than the
// retention cannot get a lock timeout between the two: C3, nothing written.
func TestDesignRefusesConstraintViolation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ans := filepath.Join(dir, "a.json")
	os.WriteFile(ans, []byte(`{"stack":{"language":"Go"},"retention":"7d","actions":[{"name":"export","kind":"cron","duration":"10d"}]}`), 0o644)
	out := filepath.Join(dir, "d.html")
	err := designCLI([]string{"--answers", ans, "--out", out}, strings.NewReader(""), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "constraint C3") {
		t.Fatalf("want a C3 violation, got %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Error("a document breaking C3 was written")
	}
}

// TestDesignInteractivePTY runs payonce design on a pseudo-terminal: the
// format, a question left unanswered then answered, one left unanswered
// twice (an assumption, never a third asking).
func TestDesignInteractivePTY(t *testing.T) {
	t.Parallel()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if !term.IsTerminal(int(tty.Fd())) {
		t.Fatal("the pty's slave is not a terminal")
	}
	var mu sync.Mutex
	var screen bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 4096)
		for {
			n, err := ptmx.Read(b)
			mu.Lock()
			screen.Write(b[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	answers := []string{
		"n", // cmd/payonce is a Go module: the scan offered is declined
		// ask 1: the format first, then the seven questions
		"markdown",
		"POST /checkout, charge worker",
		"Go, net/http, PostgreSQL, River",
		"carrier pigeons", // Q3: not understood, asked once more
		"stripe, paypal",
		"multi-instance, 20000/day",
		"7d",
		"synchronous",
		// ask 2: Q3 again, then each action's fields and p99
		"",                                 // Q3: still unanswered: an assumption
		"amount, currency, recipient; 20s", // checkout
		"",                                 // charge: assumed
	}
	go func() {
		for _, a := range answers {
			ptmx.Write([]byte(a + "\n"))
			time.Sleep(5 * time.Millisecond)
		}
	}()
	out := filepath.Join(t.TempDir(), "design.out")
	var stderr bytes.Buffer
	err = designCLI([]string{"--out", out}, tty, tty, &stderr) // stdin a terminal: the interview
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## 1. Action analysis", "{scope}_checkout_{intent}", "{scope}_charge_{intent}", "raised from the stated 7d",
		"PayPal-Request-Id", "Retry sources not stated", "p99 of charge assumed 30s", "Significant fields of charge not answered",
		"| checkout | amount, currency, recipient |", "3x the stated p99 (20s)"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("document lacks %q", want)
		}
	}
	if bytes.Contains(b, []byte("p99 of checkout")) {
		t.Error("the answered p99 of checkout is listed as an assumption")
	}
	tty.Close() // the reader drains what the command wrote, then ends
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	mu.Lock()
	s := screen.String()
	mu.Unlock()
	if strings.Count(s, "Ask 1 of 2") != 1 || strings.Count(s, "Ask 2 of 2") != 1 || strings.Contains(s, "Ask 3") {
		t.Errorf("want two asks, no third:\n%s", s)
	}
	if n := strings.Count(s, "Where do retries come from"); n != 2 || !strings.Contains(s, "(once more: retry source \"carrier pigeons\" not recognised)") {
		t.Errorf("question 3 asked %d times, want twice, the second with the reason:\n%s", n, s)
	}
	if !strings.Contains(s, "key decisions:") {
		t.Errorf("no summary on the terminal:\n%s", s)
	}
	if !strings.Contains(s, "This directory is a Go module (go.mod). Scan it") || strings.Contains(stderr.String(), "scan of .") {
		t.Errorf("the scan of the module here was not offered, or ran though declined:\n%s", s)
	}
	if !strings.Contains(stderr.String(), "question 3 unanswered") || !strings.Contains(stderr.String(), "action charge: fields or p99 unanswered") || t.Failed() {
		t.Log(s)
		t.Errorf("stderr: %s", stderr.String())
	}
}

// TestDesignOffersScanOfModule: on a terminal in a Go module, without
// --scan, payonce design offers to scan it; accepted, the scan runs.
func TestDesignOffersScanOfModule(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	o := designFlags{answers: "internal/design/testdata/checkout.yaml", out: filepath.Join(t.TempDir(), "d.md"), format: "markdown"}
	if err := runDesign(o, strings.NewReader("\n"), &stdout, &stderr, true); err != nil { // Enter: yes
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "This directory is a Go module (go.mod). Scan it") || !strings.Contains(stderr.String(), "scan of .:") {
		t.Errorf("the scan was not offered or not run:\n%s\n%s", stdout.String(), stderr.String())
	}
}

// TestDesignFlagsOnly: every answer from flags, no file, no terminal.
func TestDesignFlagsOnly(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "x.md")
	var stdout bytes.Buffer
	err := designCLI([]string{"--format", "md", "--out", out, "--actions", "POST /orders, refund worker",
		"--stack", "Go, chi, PostgreSQL, NATS", "--retry-sources", "client retries, queue redelivery",
		"--providers", "stripe", "--concurrency", "global, 1000000/day", "--retention", "2d", "--latency", "synchronous"},
		strings.NewReader(""), &stdout, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	for _, want := range []string{"{scope}_orders_{intent}", "{scope}_refund_{intent}", "Globally distributed", "raised from the stated 2d", "Idempotency-Key"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("document lacks %q", want)
		}
	}
	if bytes.Contains(b, []byte("not stated")) {
		t.Error("an assumption was made although every question was answered by flags")
	}
	err = designCLI([]string{"--providers", "venmo", "--out", out}, strings.NewReader(""), io.Discard, io.Discard)
	if !errors.As(err, new(cli.UsageError)) {
		t.Errorf("unknown provider: want a usage error, got %v", err)
	}
}

// TestDesignActionFlag: --action gives an action's significant fields,
// p99 and outbound effects; what it leaves out is an assumption the
// document lists; a bad spec is a usage error naming what is wrong.
func TestDesignActionFlag(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "x.md")
	base := []string{"--format", "md", "--out", out, "--actions", "POST /orders, notification worker",
		"--stack", "Python, Django, MySQL, RabbitMQ", "--retry-sources", "client retries 48h, queue redelivery 3d",
		"--providers", "none", "--concurrency", "multi-instance, 5000/day", "--retention", "3d", "--latency", "synchronous"}
	err := designCLI(append(base, "--action", "orders:fields=cart_id,amount:p99=20s", "--action", "notification:p99=5s:effects=email to the customer"),
		strings.NewReader(""), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	for _, want := range []string{"| orders | cart_id, amount |", "3x the stated p99 (20s)", "Significant fields of notification not answered"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("document lacks %q", want)
		}
	}
	for _, bad := range []string{"p99 of orders", "p99 of notification", "fields of orders", "amount, currency, recipient"} {
		if bytes.Contains(b, []byte(bad)) {
			t.Errorf("document has %q", bad)
		}
	}
	for spec, want := range map[string]string{
		"refund:p99=2s":         "no action of that name; the actions are orders, notification",
		"orders:fields=sent_at": `field "sent_at" is volatile`,
		"orders:p99=fast":       `duration "fast"`,
		"orders:colour=blue":    `unknown "colour"`,
		"orders":                "nothing given",
		"orders:fields=a b,c":   `field "a b"`,
	} {
		err := designCLI(append(base, "--action", spec), strings.NewReader(""), io.Discard, io.Discard)
		if !errors.As(err, new(cli.UsageError)) || !strings.Contains(err.Error(), want) {
			t.Errorf("--action %s: want a usage error with %q, got %v", spec, want, err)
		}
	}
}

// A --scan that is not a directory is a usage error naming the flag.
func TestDesignScanNotADirectory(t *testing.T) {
	t.Parallel()
	out, code := run(t, nil, "design", "--no-input", "--answers", "internal/design/testdata/checkout.yaml", "--scan", "/nonexistent-dir", "--out", t.TempDir()+"/d.html")
	if code != 2 || !strings.Contains(out, "--scan") {
		t.Fatalf("design --scan /nonexistent-dir: exit %d, want 2 naming --scan\n%s", code, out)
	}
}
