package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/payonce/payonce/cmd/payonce/internal/design"
)

const designUsage = `Usage: payonce design [--answers FILE] [--scan DIR] [--out PATH] [flags]

Generates the idempotency design document of your system: the 12 sections
of the reference design tailored to your answers and the 9 deliverables
(action map, payonce's DDL, middleware, fingerprint utility, cleanup job,
test suite skeleton, alert rules, build order, runbook). Seven constraints
(C1..C7) are checked on the document before it is written; a violation
fails the command and names the constraint.

On a terminal it asks what the flags, the answers file and the scan have
not answered: the output format, then seven questions (actions, stack,
retry sources, payment providers, concurrency, key retention, detection
latency). A question left unanswered is asked once more with examples;
then questions 1-2 give a technology-agnostic design, 3-7 a stated
assumption. Without a terminal (or with --no-input) nothing is asked.

Flags:
  --answers FILE       answers file, YAML or JSON (see cmd/payonce/internal/design/testdata/checkout.yaml)
  --scan DIR           inspect the Go code under DIR: routes, payment calls,
                       consumers, cron jobs, and anti-patterns with file:line
  --out PATH           output file (default docs/idempotency-design.html, or .md)
  --format F           html (default) or markdown
  --service NAME       the system's name in the title
  --actions LIST       question 1, e.g. "POST /checkout, charge worker"
  --stack LIST         question 2: language, framework, database, broker
  --retry-sources LIST question 3, e.g. "client retries, queue redelivery"
  --providers LIST     question 4: stripe, adyen, paypal, bank transfer, none
  --concurrency S      question 5, e.g. "multi-instance, 50000/day"
  --retention D        question 6, e.g. 7d or 72h
  --latency S          question 7, e.g. synchronous
  --no-input           never ask, even on a terminal

Examples:
  payonce design
  payonce design --scan . --answers design.yaml --format markdown
  payonce design --answers cmd/payonce/internal/design/testdata/checkout.yaml --scan examples/checkout
`

func runDesign(args []string) error {
	return designMain(args, os.Stdin, os.Stdout, os.Stderr, term.IsTerminal(int(os.Stdin.Fd())))
}

// designMain is payonce design with its streams; interactive says whether
// stdin is a terminal.
func designMain(args []string, stdin io.Reader, stdout, stderr io.Writer, interactive bool) error {
	fs := flag.NewFlagSet("design", flag.ContinueOnError)
	answersFile := fs.String("answers", "", "")
	scanDir := fs.String("scan", "", "")
	out := fs.String("out", "", "")
	format := fs.String("format", "", "")
	service := fs.String("service", "", "")
	noInput := fs.Bool("no-input", false, "")
	qflags := map[int]*string{
		1: fs.String("actions", "", ""), 2: fs.String("stack", "", ""), 3: fs.String("retry-sources", "", ""),
		4: fs.String("providers", "", ""), 5: fs.String("concurrency", "", ""), 6: fs.String("retention", "", ""),
		7: fs.String("latency", "", ""),
	}
	pos, err := parseFlags(fs, designUsage, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("design: unexpected argument %q (see payonce design --help)", pos[0])}
	}
	var a design.Answers
	if *answersFile != "" {
		f, err := design.LoadAnswers(*answersFile)
		if err != nil {
			return usageError{"design: " + err.Error()}
		}
		a = *f
	}
	if *format != "" {
		if _, err := design.ParseFormat(*format); err != nil {
			return usageError{"design: --" + err.Error()}
		}
		a.Format = *format
	}
	if *service != "" {
		a.Service = *service
	}
	for n := 1; n <= 7; n++ {
		if v := *qflags[n]; v != "" {
			if err := design.ApplyAnswer(&a, n, v); err != nil {
				return usageError{fmt.Sprintf("design: question %d: %v", n, err)}
			}
		}
	}
	var findings []design.Finding
	skip := map[int]bool{}
	if *scanDir != "" {
		res, err := design.Scan(*scanDir)
		if err != nil {
			return err
		}
		fmt.Fprint(stderr, res.Report())
		skip = res.Apply(&a)
		findings = res.AntiPatterns
		if a.Service == "" {
			a.Service = filepath.Base(filepath.Clean(*scanDir))
		}
	}
	if interactive && !*noInput {
		if *out != "" && a.Format == "" {
			switch strings.ToLower(filepath.Ext(*out)) {
			case ".md":
				a.Format = "markdown"
			case ".html", ".htm":
				a.Format = "html"
			}
		}
		notes, err := design.NewAsker(stdin, stdout).Interview(&a, skip)
		if err != nil {
			return err
		}
		for _, n := range notes {
			fmt.Fprintln(stderr, "design:", n)
		}
	}
	d, err := design.Build(a, findings, time.Now())
	if err != nil {
		return usageError{"design: " + err.Error()}
	}
	doc, err := design.Render(d)
	if err != nil {
		return err
	}
	if err := design.Check(d, doc); err != nil {
		return fmt.Errorf("design: the document was not written: %w", err)
	}
	path := *out
	if path == "" {
		path = "docs/idempotency-design.html"
		if d.Format == design.Markdown {
			path = "docs/idempotency-design.md"
		}
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		return err
	}
	fmt.Fprint(stdout, design.Summary(d, path))
	return nil
}
