package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// IsTerminal reports whether f is an interactive terminal.
func IsTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// ProgressBar is a long command's progress on a terminal
// (schollz/progressbar): a bar with counts, rate and elapsed time when
// the total is known, a spinner with the count otherwise. Commands draw
// it only when their output is a terminal (IsTerminal) and print plain
// lines otherwise.
type ProgressBar struct {
	w    io.Writer
	what string
	bar  *progressbar.ProgressBar
}

// NewProgressBar draws what's progress to w, redrawing at most a few times
// a second.
func NewProgressBar(w io.Writer, what string, total int64) *ProgressBar {
	return NewProgressBarEvery(w, what, total, 100*time.Millisecond)
}

// NewProgressBarEvery redraws at most once per throttle (0: on every
// update, for tests).
func NewProgressBarEvery(w io.Writer, what string, total int64, throttle time.Duration) *ProgressBar {
	if total <= 0 {
		total = -1 // unknown: a spinner
	}
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(throttle),
		progressbar.OptionSetRenderBlankState(true),
		// The total is an estimate taken at the start: records that
		// expire meanwhile can push the count past it.
		progressbar.OptionSetPredictTime(false),
	)
	return &ProgressBar{w: w, what: what, bar: bar}
}

// Update sets the count to done, with a note ("3 batches") after the
// description.
func (p *ProgressBar) Update(done int64, note string) {
	desc := p.what
	if note != "" {
		desc += ", " + note
	}
	p.bar.Describe(desc)
	if max := p.bar.GetMax64(); max > 0 && done > max {
		p.bar.ChangeMax64(done)
	}
	_ = p.bar.Set64(done)
}

// SetTotal changes the total once it is known.
func (p *ProgressBar) SetTotal(total int64) { p.bar.ChangeMax64(total) }

// Finish ends the line, leaving the last state visible.
func (p *ProgressBar) Finish() {
	_ = p.bar.Finish()
	fmt.Fprintln(p.w)
}

// GroupDigits writes n with thousands separators: 1234567 -> "1,234,567".
func GroupDigits(n int64) string {
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
