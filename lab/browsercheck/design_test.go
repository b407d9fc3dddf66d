package browsercheck

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/payonce/payonce/lab/internal/browser"
)

// TestDesignBrowser renders the checkout design, written by the operator
// CLI as a user runs it (payonce design), in headless Chromium: it renders
// every section, makes zero network requests, and every TOC link
// resolves. .ci/run installs chromium.
func TestDesignBrowser(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exe := filepath.Join(dir, "payonce")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/payonce/payonce/cmd/payonce").CombinedOutput(); err != nil {
		t.Fatalf("go build payonce: %v\n%s", err, out)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "design.html")
	cmd := exec.Command(exe, "design", "--no-input",
		"--answers", filepath.Join(root, "cmd/payonce/internal/design/testdata/checkout.yaml"),
		"--scan", filepath.Join(root, "examples/checkout"), "--out", path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("payonce design: %v\n%s", err, out)
	}
	html, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sections := len(regexp.MustCompile(`<section id="`).FindAll(html, -1))
	if sections == 0 {
		t.Fatalf("the document has no section:\n%.500s", html)
	}
	res, err := browser.Load(context.Background(), path, true)
	if errors.Is(err, browser.ErrNoChromium) {
		t.Skip(err) // make test's .ci/run installs it
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Sections != sections {
		t.Errorf("rendered %d sections, the document has %d", res.Sections, sections)
	}
	if len(res.Requests) != 0 {
		t.Errorf("the document made network requests: %q", res.Requests)
	}
	if res.Links != sections || len(res.Unresolved) != 0 {
		t.Errorf("%d TOC links for %d sections, unresolved: %q", res.Links, sections, res.Unresolved)
	}
	if len(res.PNG) < 8 || string(res.PNG[1:4]) != "PNG" {
		t.Error("no PNG screenshot")
	}
	if res.Title == "" {
		t.Error("no title rendered")
	}
}
