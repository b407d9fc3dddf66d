package payments

import (
	"testing"
	"time"
)

// The creation windows of an attempt's sends.
func TestAttemptWindows(t *testing.T) {
	t.Parallel()
	const (
		day    = 24 * time.Hour
		flight = 30 * time.Second
		m      = 3 * time.Second
	)
	s := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	w := func(from, to time.Time) window { return window{from, to} }
	for _, tc := range []struct {
		name    string
		in      Examined
		perSend bool
		want    []window
	}{
		{"one send", Examined{SentAt: s, LastSentAt: s, Sends: 1}, true,
			[]window{w(s.Add(-m), s.Add(flight+m))}},
		{"a double click", Examined{SentAt: s, LastSentAt: s.Add(time.Second), Sends: 2}, true,
			[]window{w(s.Add(-m), s.Add(time.Second+flight+m))}},
		{"two sends an hour apart", Examined{SentAt: s, LastSentAt: s.Add(time.Hour), Sends: 2}, true,
			[]window{w(s.Add(-m), s.Add(flight+m)), w(s.Add(time.Hour-m), s.Add(time.Hour+flight+m))}},
		{"two sends, one window per lookup", Examined{SentAt: s, LastSentAt: s.Add(time.Hour), Sends: 2}, false,
			[]window{w(s.Add(-m), s.Add(time.Hour+flight+m))}},
		{"three sends: any time between", Examined{SentAt: s, LastSentAt: s.Add(time.Hour), Sends: 3}, true,
			[]window{w(s.Add(-m), s.Add(time.Hour+flight+m))}},
	} {
		got := attemptWindows(tc.in, day, flight, m, tc.perSend)
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %v, want %v", tc.name, got, tc.want)
		}
		for i := range got {
			if !got[i].from.Equal(tc.want[i].from) || !got[i].to.Equal(tc.want[i].to) {
				t.Fatalf("%s: %v, want %v", tc.name, got, tc.want)
			}
		}
	}

	// A resumption past the provider's window counts as a send but sends
	// nothing: the window ends with the provider's (plus 5 minutes, plus
	// the margin).
	old := time.Now().Add(-30 * time.Hour)
	got := attemptWindows(Examined{SentAt: old, LastSentAt: time.Now(), Sends: 2}, day, flight, m, true)
	if len(got) != 1 || !got[0].from.Equal(old.Add(-m)) || !got[0].to.Equal(old.Add(flight+m)) {
		t.Fatalf("past the window: %v", got)
	}
	got = attemptWindows(Examined{SentAt: old, LastSentAt: time.Now(), Sends: 3}, day, flight, m, true)
	if len(got) != 1 || !got[0].to.Equal(old.Add(day+5*time.Minute+m)) {
		t.Fatalf("past the window, three sends: %v", got)
	}
	// The last send not known (recorded before sends were counted): to
	// the end of the provider's window, or now.
	got = attemptWindows(Examined{SentAt: old}, day, flight, m, true)
	if len(got) != 1 || !got[0].from.Equal(old.Add(-m)) || !got[0].to.Equal(old.Add(day+5*time.Minute+m)) {
		t.Fatalf("last send unknown: %v", got)
	}
	// Reopened, not sent since: the intent's whole life, to now.
	before := time.Now()
	got = attemptWindows(Examined{CreatedAt: old}, day, flight, m, true)
	if len(got) != 1 || !got[0].from.Equal(old.Add(-m)) || got[0].to.Before(before.Add(5*time.Minute+m)) {
		t.Fatalf("reopened: %v", got)
	}
}
