package main

import (
	"bytes"
	"go/token"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const fixtures = "github.com/payonce/payonce/lab/cmd/fpcheck/testdata/"

// Each fixture line that must be reported carries a want comment with a
// regexp; fpcheck must report exactly those lines, each matching.
var wantRE = regexp.MustCompile("// want `([^`]*)`")

func TestFixtures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		target   string
		patterns []string
		min      int // findings expected at least: the fixtures are not empty
	}{
		{"idempotency.Fingerprint", fpPkg, []string{"./testdata/bad", "./testdata/good", "./testdata/rows", "./testdata/cross"}, 45},
		{"a broken Equal", fixtures + "brokenequal", []string{"./testdata/brokenequal", "./testdata/usesbroken"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fset := token.NewFileSet()
			pkgs, err := load(fset, ".", tc.patterns)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]*regexp.Regexp{} // file:line -> message
			for _, p := range pkgs {
				for _, f := range p.files {
					for _, cg := range f.Comments {
						for _, c := range cg.List {
							if m := wantRE.FindStringSubmatch(c.Text); m != nil {
								pos := fset.Position(c.Pos())
								want[pos.Filename+":"+strconv.Itoa(pos.Line)] = regexp.MustCompile(m[1])
							}
						}
					}
				}
			}
			if len(want) < tc.min {
				t.Fatalf("found %d want comments in the fixtures, expected at least %d", len(want), tc.min)
			}
			got := check(fset, pkgs, tc.target)
			seen := map[string]bool{}
			for _, f := range got {
				at := f.pos.Filename + ":" + strconv.Itoa(f.pos.Line)
				re, ok := want[at]
				switch {
				case !ok:
					t.Errorf("unexpected: %s", f)
				case seen[at]:
					t.Errorf("reported twice: %s", f)
				case !re.MatchString(f.msg):
					t.Errorf("%s: message does not match %q", f, re)
				case !strings.HasSuffix(f.msg, "; "+fix) && !strings.HasSuffix(f.msg, "; compare the bytes with it, constant time"):
					t.Errorf("%s: does not name the fix", f)
				}
				seen[at] = true
			}
			for at, re := range want {
				if !seen[at] {
					t.Errorf("missed %s: want %q", at, re)
				}
			}
		})
	}
}

// The command's own output: file:line:col, the fix, a count, exit 1. What
// a field holds is learnt from the packages checked: rows fills FP.
func TestRunReportsAndFails(t *testing.T) {
	var out bytes.Buffer
	code := run([]string{"./testdata/rows", "./testdata/cross"}, fpPkg, &out)
	want := "testdata/cross/cross.go:9:14: == on a fingerprint held as string is not constant time; use Fingerprint.Equal, constant time\n" +
		"fpcheck: 1 fingerprint comparison(s) not in constant time\n"
	if code != 1 || out.String() != want {
		t.Fatalf("exit %d, output:\n%s\nwant exit 1, output:\n%s", code, out.String(), want)
	}
	out.Reset()
	if code := run([]string{"./testdata/good"}, fpPkg, &out); code != 0 || out.Len() != 0 {
		t.Fatalf("good: exit %d, output:\n%s", code, out.String())
	}
}
