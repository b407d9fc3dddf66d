// Package browser loads a generated HTML page (the design document, the
// divergence report) in headless Chromium
// through the Chrome DevTools Protocol (chromedp): it records every
// network request the page makes, checks that every table-of-contents link
// resolves, and takes a full-page screenshot.
package browser

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// ErrNoChromium: no Chromium binary was found.
var ErrNoChromium = errors.New("browser: no chromium binary (install Debian's chromium, see .ci/run)")

// Find returns the path of a Chromium binary.
func Find() (string, error) {
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", ErrNoChromium
}

// Result is what loading the document showed.
type Result struct {
	// Requests are the URLs of every request other than the document's
	// own file:// load (an empty list: zero network requests).
	Requests []string
	// Links is the number of TOC links; Unresolved those whose target
	// does not exist or was not scrolled to.
	Links      int
	Unresolved []string
	// Title is the rendered document's title; Sections its <section> count.
	Title    string
	Sections int
	PNG      []byte
}

// Load opens the HTML file at path in headless Chromium.
func Load(ctx context.Context, path string, screenshot bool) (*Result, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	// One Chromium at a time on this machine: several test binaries load
	// pages in parallel, and a few Chromiums beside a loaded test run
	// starve each other past any deadline.
	unlock, err := lockMachine(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	profile, err := os.MkdirTemp("", "payonce-chromium-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(profile)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelA := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	tctx, cancelT := context.WithTimeout(bctx, 3*time.Minute)
	defer cancelT()

	res := &Result{}
	var mu sync.Mutex
	url := "file://" + abs
	chromedp.ListenTarget(tctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			mu.Lock()
			if e.Request.URL != url {
				res.Requests = append(res.Requests, e.Request.URL)
			}
			mu.Unlock()
		}
	})
	var hrefs []string
	err = chromedp.Run(tctx,
		network.Enable(),
		chromedp.Navigate(url),
		chromedp.WaitReady("footer", chromedp.ByQuery),
		chromedp.Title(&res.Title),
		chromedp.Evaluate(`document.querySelectorAll("section").length`, &res.Sections),
		chromedp.Evaluate(`Array.from(document.querySelectorAll("nav.toc a")).map(a => a.getAttribute("href"))`, &hrefs),
	)
	if err != nil {
		return nil, fmt.Errorf("browser: %w", err)
	}
	res.Links = len(hrefs)
	for _, h := range hrefs {
		var ok bool
		id := strings.TrimPrefix(h, "#")
		// Follow the link as a reader would: the target must exist and the
		// page must scroll to it.
		js := fmt.Sprintf(`(() => { window.scrollTo(0, 0); const a = document.querySelector('nav.toc a[href=%q]'); a.click();
			const t = document.getElementById(%q); if (!t || location.hash !== %q) return false;
			const r = t.getBoundingClientRect(); return r.top < window.innerHeight && r.bottom > 0; })()`, h, id, h)
		if err := chromedp.Run(tctx, chromedp.Evaluate(js, &ok)); err != nil || !ok {
			res.Unresolved = append(res.Unresolved, h)
		}
	}
	if screenshot {
		if err := chromedp.Run(tctx, chromedp.Evaluate(`window.scrollTo(0,0); history.replaceState(null, "", location.pathname)`, nil),
			chromedp.FullScreenshot(&res.PNG, 100)); err != nil {
			return nil, fmt.Errorf("browser: screenshot: %w", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return res, nil
}

// lockMachine takes a lock file shared by every process of this machine
// (flock: released when the process dies), waiting for ctx.
func lockMachine(ctx context.Context) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "payonce-chromium.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("browser: lock file: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("browser: lock file: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
