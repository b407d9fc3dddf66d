package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// isTerminal reports whether f is an interactive terminal: a character
// device other than the null device. (The module has no terminal package;
// /dev/null, which a process started without a stdin gets, is the one
// character device that commonly stands in for a terminal and must not.)
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}

// progressBar redraws one line on a terminal: a bar when the total is
// known, a plain counter otherwise.
type progressBar struct {
	w     io.Writer
	what  string // "records deleted"
	total int64  // <= 0: unknown
	start time.Time
	width int // of the bar, in cells
}

func newProgressBar(w io.Writer, what string, total int64) *progressBar {
	return &progressBar{w: w, what: what, total: total, start: time.Now(), width: 30}
}

// update redraws the line with done units and a note ("3 batches").
func (p *progressBar) update(done int64, note string) {
	fmt.Fprint(p.w, "\r"+p.line(done, note, time.Since(p.start))+"\x1b[K")
}

// finish ends the line, leaving the last state visible.
func (p *progressBar) finish() { fmt.Fprintln(p.w) }

func (p *progressBar) line(done int64, note string, elapsed time.Duration) string {
	tail := fmt.Sprintf("%s %s", groupDigits(done), p.what)
	if note != "" {
		tail += ", " + note
	}
	tail += ", " + elapsed.Round(100*time.Millisecond).String()
	if p.total <= 0 {
		return tail
	}
	// The total is an estimate taken at the start: records that expire
	// meanwhile can push done past it.
	frac := min(float64(done)/float64(p.total), 1)
	full := int(frac * float64(p.width))
	bar := strings.Repeat("#", full) + strings.Repeat(".", p.width-full)
	return fmt.Sprintf("[%s] %3d%%  %s of ~%s", bar, int(frac*100), groupDigits(done), groupDigits(p.total)) +
		strings.TrimPrefix(tail, groupDigits(done))
}

// groupDigits writes n with thousands separators: 1234567 -> "1,234,567".
func groupDigits(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
