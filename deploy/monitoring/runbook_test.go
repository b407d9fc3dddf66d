package monitoring_test

import (
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/payonce/payonce/deploy/monitoring"
)

// Every alert an operator can be paged by is named in the runbook, where
// the text says what it means and what to do.
func TestEveryAlertIsInTheRunbook(t *testing.T) {
	runbook, err := os.ReadFile("../../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	alert := regexp.MustCompile(`(?m)^\s*- alert:\s*(\S+)\s*$`)
	files, err := fs.Glob(monitoring.Rules, "*.rules.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("rule files: %v %v", files, err)
	}
	n := 0
	for _, f := range files {
		b, err := fs.ReadFile(monitoring.Rules, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range alert.FindAllSubmatch(b, -1) {
			n++
			if name := string(m[1]); !strings.Contains(string(runbook), "`"+name+"`") {
				t.Errorf("%s: alert %s is not named in docs/runbook.md", f, name)
			}
		}
	}
	if n < 40 {
		t.Fatalf("found %d alerts, want every rule file's (over 40)", n)
	}
}
