package layout

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// compiledMarker precedes a README Go snippet that an example file runs:
// <!-- compiled: path/to/example_test.go -->.
var compiledMarker = regexp.MustCompile(`^<!-- compiled: (\S+) -->$`)

// codeLine is a snippet line as compared: no comment, single spaces.
func codeLine(line string) string {
	if i := strings.Index(line, "//"); i >= 0 && !strings.Contains(line[:i], "\"") && !strings.Contains(line[:i], "`") {
		line = line[:i]
	} else if i := strings.Index(line, " // "); i >= 0 {
		line = line[:i]
	}
	return strings.Join(strings.Fields(line), " ")
}

// Every README Go snippet marked "compiled" is code of the example it
// names: its lines, comments aside, appear in that file in the same order
// (the example may have more lines between them: error checks, a test
// server). The example compiles and checks its output, so the snippet
// compiles as printed and does what the README says.
func TestReadmeSnippetsAreInTheirExamples(t *testing.T) {
	t.Parallel()
	r := root(t)
	readme, err := os.ReadFile(filepath.Join(r, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(readme), "\n")
	checked := 0
	for i := 0; i < len(lines); i++ {
		m := compiledMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "```go" {
			t.Errorf("README.md:%d: a compiled marker must be followed by a ```go block", i+1)
			continue
		}
		src, err := os.ReadFile(filepath.Join(r, m[1]))
		if err != nil {
			t.Errorf("README.md:%d: %v", i+1, err)
			continue
		}
		var code []string
		for _, l := range strings.Split(string(src), "\n") {
			if c := codeLine(l); c != "" {
				code = append(code, c)
			}
		}
		at := 0
		for j := i + 2; j < len(lines) && lines[j] != "```"; j++ {
			want := codeLine(lines[j])
			if want == "" {
				continue
			}
			for at < len(code) && code[at] != want {
				at++
			}
			if at == len(code) {
				t.Errorf("README.md:%d: %q is not in %s (after the snippet's earlier lines)", j+1, want, m[1])
				break
			}
			at++
		}
		checked++
	}
	if checked == 0 {
		t.Error("no README snippet is marked <!-- compiled: ... -->")
	}
}
