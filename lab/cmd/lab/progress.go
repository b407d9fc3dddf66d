package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// isTerminal reports whether f is an interactive terminal.
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// progressBar is a long command's progress on a terminal
// (schollz/progressbar): a bar with counts, rate and elapsed time when
// the total is known, a spinner with the count otherwise. Commands draw
// it only when their output is a terminal (isTerminal) and print plain
// lines otherwise.
type progressBar struct {
	w    io.Writer
	what string
	bar  *progressbar.ProgressBar
}

func newProgressBar(w io.Writer, what string, total int64) *progressBar {
	return newProgressBarEvery(w, what, total, 100*time.Millisecond)
}

// newProgressBarEvery redraws at most once per throttle (0: on every
// update, for tests).
func newProgressBarEvery(w io.Writer, what string, total int64, throttle time.Duration) *progressBar {
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
	return &progressBar{w: w, what: what, bar: bar}
}

// update sets the count to done, with a note ("3 batches") after the
// description.
func (p *progressBar) update(done int64, note string) {
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

// finish ends the line, leaving the last state visible.
func (p *progressBar) finish() {
	_ = p.bar.Finish()
	fmt.Fprintln(p.w)
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
