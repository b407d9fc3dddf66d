package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/payonce/payonce/cmd/payonce/internal/design"
	"github.com/payonce/payonce/internal/cli"
)

// designFlags are payonce design's flags; q[n] answers question n.
type designFlags struct {
	answers, scan, out, format, service string
	// code is the folder the stack's runnable deliverables go to (--code).
	code    string
	noInput bool
	q       [8]string
	// actions are the --action specs: NAME:fields=a,b:p99=2s.
	actions []string
}

func newDesignCmd() *cobra.Command {
	var o designFlags
	c := &cobra.Command{
		Use:   "design",
		Short: "the idempotency design document of your system, from your answers and a scan of your code",
		Long: `Generates the idempotency design document of your system: the 12 sections
of the reference design tailored to your answers and the 9 deliverables
(action map, payonce's DDL, middleware, fingerprint utility, cleanup job,
test suite skeleton, alert rules, build order, runbook). Seven constraints
(C1..C7) are checked on the document before it is written; a violation
fails the command and names the constraint.

On a terminal in a Go module (a go.mod here) without --scan, it first offers
to scan the module. It then asks what the flags, the answers file and the scan have
not answered, in at most two asks: the output format first, then seven
questions (actions, stack, retry sources and their windows, payment
providers, concurrency, key retention, detection latency) and, for each
action, its significant fields and its p99 duration. The second ask
comes only for what the first left critical and unanswered (actions,
stack), did not understand, or named (new actions' fields and p99).
Whatever is still unanswered is assumed, and the document's Assumptions
box lists every assumption (questions 1-2: a technology-agnostic design).
Without a terminal (or with --no-input) nothing is asked.`,
		Example: `  payonce design
  payonce design --scan . --answers design.yaml --format markdown
  payonce design --actions "POST /orders, notification worker" --stack "Python, Django, MySQL, RabbitMQ" \
      --action orders:fields=cart_id,amount,currency:p99=800ms --action notificationWorker:fields=order_id,template:p99=5s
  payonce design --answers cmd/payonce/internal/design/testdata/checkout.yaml --scan examples/checkout`,
		Args: cli.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			in := c.InOrStdin()
			f, ok := in.(*os.File)
			interactive := ok && term.IsTerminal(int(f.Fd()))
			return runDesign(o, in, c.OutOrStdout(), c.ErrOrStderr(), interactive)
		},
	}
	f := c.Flags()
	f.StringVar(&o.answers, "answers", "", "answers file, YAML or JSON (see cmd/payonce/internal/design/testdata/checkout.yaml)")
	f.StringVar(&o.scan, "scan", "", "inspect the Go code under this directory: routes, payment calls, consumers, cron jobs, and anti-patterns with file:line")
	f.StringVar(&o.out, "out", "", "output file (default docs/idempotency-design.html, or .md)")
	f.StringVar(&o.format, "format", "", "html (default) or markdown")
	f.StringVar(&o.service, "service", "", "the system's name in the title")
	f.StringVar(&o.q[1], "actions", "", "question 1, e.g. \"POST /checkout, charge worker\"")
	f.StringVar(&o.q[2], "stack", "", "question 2: language, framework, database, broker")
	f.StringVar(&o.q[3], "retry-sources", "", "question 3, e.g. \"client retries, queue redelivery\"")
	f.StringVar(&o.q[4], "providers", "", "question 4: stripe, adyen, paypal, bank transfer, none")
	f.StringVar(&o.q[5], "concurrency", "", "question 5, e.g. \"multi-instance, 50000/day\"")
	f.StringVar(&o.q[6], "retention", "", "question 6, e.g. 7d or 72h")
	f.StringVar(&o.q[7], "latency", "", "question 7, e.g. synchronous")
	f.StringArrayVar(&o.actions, "action", nil, "an action's significant fields and p99 (repeatable): NAME:fields=a,b:p99=2s[:effects=email]")
	f.BoolVar(&o.noInput, "no-input", false, "never ask, even on a terminal")
	f.StringVar(&o.code, "code", "", "also write the stack's runnable deliverables (middleware, fingerprint utility, cleanup job, tests) into this folder")
	_ = c.MarkFlagFilename("answers", "yaml", "yml", "json")
	_ = c.MarkFlagDirname("scan")
	_ = c.MarkFlagDirname("code")
	_ = c.MarkFlagFilename("out", "html", "htm", "md")
	cli.CompleteWords(c, "format", "html", "markdown")
	return c
}

// runDesign is payonce design with its streams; interactive says whether
// stdin is a terminal.
func runDesign(o designFlags, stdin io.Reader, stdout, stderr io.Writer, interactive bool) error {
	var a design.Answers
	if o.answers != "" {
		f, err := design.LoadAnswers(o.answers)
		if err != nil {
			return cli.Usage("design: --answers: " + err.Error())
		}
		a = *f
	}
	if o.format != "" {
		if _, err := design.ParseFormat(o.format); err != nil {
			return cli.Usage("design: --" + err.Error())
		}
		a.Format = o.format
	}
	if o.service != "" {
		a.Service = o.service
	}
	for n := 1; n <= 7; n++ {
		if v := o.q[n]; v != "" {
			if err := design.ApplyAnswer(&a, n, v); err != nil {
				return cli.Usage(fmt.Sprintf("design: question %d: %v", n, err))
			}
		}
	}
	var asker *design.Asker
	if interactive && !o.noInput {
		asker = design.NewAsker(stdin, stdout)
		// A Go module here: offer to scan it (go/parser only, no build).
		if _, err := os.Stat("go.mod"); err == nil && o.scan == "" && asker.Offer("This directory is a Go module (go.mod). Scan it for routes, payment calls, consumers, cron jobs and anti-patterns (file:line)?") {
			o.scan = "."
		}
	}
	var findings []design.Finding
	skip := map[int]bool{}
	if o.scan != "" {
		if st, err := os.Stat(o.scan); err != nil || !st.IsDir() {
			return cli.Usage(fmt.Sprintf("design: --scan %q is not a directory: give the root of the Go code to inspect (e.g. --scan .)", o.scan))
		}
		res, err := design.Scan(o.scan)
		if err != nil {
			return err
		}
		fmt.Fprint(stderr, res.Report())
		skip = res.Apply(&a)
		findings = res.AntiPatterns
		if a.Service == "" {
			a.Service = filepath.Base(filepath.Clean(o.scan))
		}
	}
	// After the scan: --action may name the actions it found.
	for _, spec := range o.actions {
		if err := design.ApplyActionSpec(&a, spec); err != nil {
			return cli.Usage("design: " + err.Error())
		}
	}
	if interactive && !o.noInput {
		if o.out != "" && a.Format == "" {
			switch strings.ToLower(filepath.Ext(o.out)) {
			case ".md":
				a.Format = "markdown"
			case ".html", ".htm":
				a.Format = "html"
			}
		}
		notes, err := asker.Interview(&a, skip)
		if err != nil {
			return err
		}
		for _, n := range notes {
			fmt.Fprintln(stderr, "design:", n)
		}
	}
	d, err := design.Build(a, findings, time.Now())
	if err != nil {
		return cli.Usage("design: " + err.Error())
	}
	var kit *design.Kit
	if o.code != "" {
		if kit = design.KitOf(d); kit == nil {
			kit = design.GoKit(d)
		}
		if kit == nil {
			return cli.Usage(fmt.Sprintf("design: --code: no runnable kit for the stack %q: kits exist for %s, and for Go",
				strings.Join(nonEmpty(a.Stack.Language, a.Stack.Framework, a.Stack.Database), ", "), strings.Join(design.KitStacks(), ", ")))
		}
	}
	doc, err := design.Render(d)
	if err != nil {
		return err
	}
	if err := design.Check(d, doc); err != nil {
		return fmt.Errorf("design: the document was not written: %w", err)
	}
	path := o.out
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
	if kit != nil {
		if err := design.WriteKit(kit, o.code); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "code: %d files of the %s kit in %s; run its tests with: %s\n", len(kit.Files()), kit.Stack, o.code, kit.Run)
	}
	fmt.Fprint(stdout, design.Summary(d, path))
	return nil
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
