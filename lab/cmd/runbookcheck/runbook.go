package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// block is one command block of the runbook marked for execution: a
// fenced code block whose info string is "sh runbook" or "sql runbook",
// with the expectations written in HTML comments right after it:
//
//	<!-- expect: TEXT -->     the block's output contains TEXT
//	<!-- expect-exit: N -->   the block exits N (default 0)
type block struct {
	lang    string // "sh" or "sql"
	line    int    // line of the opening fence, 1-based
	body    string
	expect  []string
	exit    int
	heading string // the section it belongs to
}

func (b block) String() string {
	first, _, _ := strings.Cut(strings.TrimSpace(b.body), "\n")
	if len(first) > 70 {
		first = first[:67] + "..."
	}
	return fmt.Sprintf("runbook.md:%d %s: %s", b.line, b.lang, first)
}

var (
	fenceRe  = regexp.MustCompile("^(```+)\\s*(.*)$")
	expectRe = regexp.MustCompile(`^<!-- expect(-exit)?: (.*) -->$`)
)

// parseRunbook returns the blocks of path marked for execution, in order.
// Other code blocks (examples for the reader: Go, unmarked shell) are
// skipped. A marked block without a closing fence, an expect comment
// that follows no marked block, or a malformed exit code is an error.
func parseRunbook(path string) ([]block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out     []block
		cur     *block
		fence   string
		inOther bool
		last    *block // the marked block just closed, awaiting expectations
		heading string
		n       int
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case cur != nil:
			if strings.TrimSpace(line) == fence {
				out = append(out, *cur)
				last, cur = &out[len(out)-1], nil
				continue
			}
			cur.body += line + "\n"
			continue
		case inOther:
			if strings.TrimSpace(line) == fence {
				inOther = false
			}
			continue
		}
		if m := expectRe.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			if last == nil {
				return nil, fmt.Errorf("%s:%d: expectation %q follows no runbook block", path, n, m[2])
			}
			if m[1] == "-exit" {
				code, err := strconv.Atoi(strings.TrimSpace(m[2]))
				if err != nil || code < 0 || code > 255 {
					return nil, fmt.Errorf("%s:%d: expect-exit wants an exit code, got %q", path, n, m[2])
				}
				last.exit = code
			} else {
				last.expect = append(last.expect, m[2])
			}
			continue
		}
		last = nil
		if strings.HasPrefix(line, "## ") {
			heading = strings.TrimPrefix(line, "## ")
		}
		m := fenceRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		fence = m[1]
		info := strings.Fields(m[2])
		if len(info) >= 2 && info[1] == "runbook" {
			if info[0] != "sh" && info[0] != "sql" {
				return nil, fmt.Errorf("%s:%d: runbook blocks are sh or sql, got %q", path, n, info[0])
			}
			cur = &block{lang: info[0], line: n, heading: heading}
			continue
		}
		inOther = true
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: runbook block is never closed", path, cur.line)
	}
	if inOther {
		return nil, fmt.Errorf("%s: a code block is never closed", path)
	}
	return out, nil
}

// alertRe matches the alert names the runbook cites, in backquotes.
var alertRe = regexp.MustCompile("`((?:Idempotency|Payments|Reconcile|Saga|Inbox)[A-Z][A-Za-z]+)`")

// checkReferences keeps the runbook from drifting from what it names:
// every alert it cites must be defined in one of ruleFiles, and every
// divergence kind the reconciler reports must be in its table.
func checkReferences(runbook string, ruleFiles []string, kinds []string) error {
	doc, err := os.ReadFile(runbook)
	if err != nil {
		return err
	}
	var rules strings.Builder
	for _, f := range ruleFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		rules.Write(b)
	}
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert:\s*(\S+)`).FindAllStringSubmatch(rules.String(), -1) {
		defined[m[1]] = true
	}
	var missing []string
	seen := map[string]bool{}
	for _, m := range alertRe.FindAllStringSubmatch(string(doc), -1) {
		if !defined[m[1]] && !seen[m[1]] {
			missing = append(missing, m[1])
		}
		seen[m[1]] = true
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s cites alerts that no deploy/monitoring/*.rules.yml defines: %s", runbook, strings.Join(missing, ", "))
	}
	for _, k := range kinds {
		if !strings.Contains(string(doc), "| `"+k+"` |") {
			return fmt.Errorf("%s: the divergence kind %q has no row in the table of kinds", runbook, k)
		}
	}
	return nil
}
