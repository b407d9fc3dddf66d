// Command designshot loads a generated design document in headless
// Chromium, checks it (zero network requests, every TOC link resolves)
// and writes a screenshot: make design-screenshot.
//
//	go run ./lab/cmd/designshot docs/idempotency-design.html docs/idempotency-design.png
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/payonce/payonce/lab/internal/browser"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: designshot DOC.html OUT.png")
		os.Exit(2)
	}
	res, err := browser.Load(context.Background(), os.Args[1], true)
	if err != nil {
		fmt.Fprintln(os.Stderr, "designshot:", err)
		os.Exit(1)
	}
	if len(res.Requests) > 0 || len(res.Unresolved) > 0 {
		fmt.Fprintf(os.Stderr, "designshot: %d network requests %q, unresolved links %q\n", len(res.Requests), res.Requests, res.Unresolved)
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[2], res.PNG, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "designshot:", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %q rendered, %d sections, %d TOC links resolve, 0 network requests; screenshot %s\n", os.Args[1], res.Title, res.Sections, res.Links, os.Args[2])
}
