package cli

import (
	"strings"
	"testing"
)

func TestLevenshtein(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"limit", "limit", 0}, {"lmit", "limit", 1}, {"olderthan", "older-than", 1},
		{"kitten", "sitting", 3}, {"nope", "help", 4},
	} {
		if got := Levenshtein(tc.a, tc.b); got != tc.want {
			t.Errorf("Levenshtein(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestProgressBar(t *testing.T) {
	t.Parallel()
	var buf strings.Builder
	p := NewProgressBarEvery(&buf, "records deleted", 10000, 0)
	p.Update(4500, "5 batch(es)")
	if got := buf.String(); !strings.Contains(got, "45%") || !strings.Contains(got, "4500/10000") ||
		!strings.Contains(got, "records deleted, 5 batch(es)") {
		t.Fatalf("bar: %q", got)
	}
	// Past the estimate (records expired meanwhile): the total follows.
	buf.Reset()
	p.Update(12000, "")
	p.Finish()
	if got := buf.String(); !strings.Contains(got, "100%") || !strings.Contains(got, "12000/12000") || !strings.HasSuffix(got, "\n") {
		t.Fatalf("bar past its estimate: %q", got)
	}
	buf.Reset()
	p = NewProgressBarEvery(&buf, "records deleted", 0, 0)
	p.Update(1234567, "")
	if got := buf.String(); !strings.Contains(got, "records deleted") || !strings.Contains(got, "1234567") {
		t.Fatalf("counter: %q", got)
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", -12345: "-12,345"} {
		if got := GroupDigits(n); got != want {
			t.Errorf("GroupDigits(%d) = %q, want %q", n, got, want)
		}
	}
}
