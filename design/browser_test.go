package design

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/payonce/payonce/internal/browser"
)

// TestDesignBrowser renders the checkout design in headless Chromium: it
// renders every section, makes zero network requests, and every TOC link
// resolves. Skipped when no chromium is installed (.ci/run installs it).
func TestDesignBrowser(t *testing.T) {
	t.Parallel()
	if _, err := browser.Find(); err != nil {
		t.Skip(err)
	}
	_, out := checkoutDoc(t, HTML)
	path := filepath.Join(t.TempDir(), "design.html")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := browser.Load(context.Background(), path, true)
	if errors.Is(err, browser.ErrNoChromium) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Sections != len(SectionIDs) {
		t.Errorf("rendered %d sections, want %d", res.Sections, len(SectionIDs))
	}
	if len(res.Requests) != 0 {
		t.Errorf("the document made network requests: %q", res.Requests)
	}
	if res.Links != len(SectionIDs) || len(res.Unresolved) != 0 {
		t.Errorf("%d TOC links, unresolved: %q", res.Links, res.Unresolved)
	}
	if len(res.PNG) < 8 || string(res.PNG[1:4]) != "PNG" {
		t.Error("no PNG screenshot")
	}
	if res.Title == "" {
		t.Error("no title rendered")
	}
}
