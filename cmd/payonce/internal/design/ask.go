package design

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Question is one of the design questions: 0 is the output format, 1..7
// the context questions.
type Question struct {
	N        int
	Text     string
	Examples string
	// Critical questions (1, 2) lead to a technology-agnostic design when
	// left unanswered; the others to stated assumptions.
	Critical bool
}

// Questions are the format question then the seven context questions.
var Questions = []Question{
	{0, "Output format: HTML or Markdown? [HTML]", "", false},
	{1, "Which action(s) must be protected?", "e.g. POST /checkout, charge worker, nightly payout cron (comma-separated)", true},
	{2, "Tech stack: language, framework, database, broker?", "e.g. Go, net/http, PostgreSQL, River  |  Python, Django, PostgreSQL, RabbitMQ", true},
	{3, "Where do retries come from?", "e.g. client retries, queue redelivery, webhook resends, cron overlap, double click, load-balancer replay", false},
	{4, "Payments involved? Which providers?", "e.g. Stripe, Adyen, PayPal, bank transfer  |  none", false},
	{5, "Expected concurrency (and volume a day)?", "e.g. single server | multi-instance, 50000/day | globally distributed", false},
	{6, "How long must keys be kept?", "e.g. 24h, 7d, 45d", false},
	{7, "How fast must a duplicate be detected?", "e.g. synchronous (in the request) | within 1s | within 1m", false},
}

// Asker asks the questions on a terminal (or any reader and writer): a
// question left unanswered is asked once more with examples, never a
// third time.
type Asker struct {
	in  *bufio.Reader
	out io.Writer
}

// NewAsker returns an Asker reading answers from in and writing prompts to out.
func NewAsker(in io.Reader, out io.Writer) *Asker {
	return &Asker{in: bufio.NewReader(in), out: out}
}

func (k *Asker) line() (string, bool) {
	s, err := k.in.ReadString('\n')
	s = strings.TrimSpace(s)
	return s, err == nil || s != ""
}

// Ask asks q; an empty answer, or one valid refuses, is asked once more
// with its examples, never a third time. It returns "" when still
// unanswered.
func (k *Asker) Ask(q Question, valid func(string) error) string {
	fmt.Fprintf(k.out, "%s\n> ", q.Text)
	s, ok := k.line()
	if !ok && s == "" {
		return "" // input closed
	}
	reason := "No answer."
	if s != "" {
		err := valid(s)
		if err == nil {
			return s
		}
		reason = fmt.Sprintf("Not understood (%v).", err)
	}
	fmt.Fprintf(k.out, "%s Once more, for example: %s\n> ", reason, q.Examples)
	s, _ = k.line()
	if s != "" && valid(s) != nil {
		fmt.Fprintf(k.out, "Not understood either: taken as unanswered.\n")
		return ""
	}
	return s
}

// Interview asks the questions the answers and the scan have not
// answered, and fills the answers. skip names questions already answered.
// It returns notes on what stays unknown.
func (k *Asker) Interview(a *Answers, skip map[int]bool) ([]string, error) {
	var notes []string
	if a.Format == "" && !skip[0] {
		fmt.Fprintf(k.out, "%s\n> ", Questions[0].Text)
		s, _ := k.line()
		if _, err := ParseFormat(s); err != nil {
			fmt.Fprintf(k.out, "Not understood: HTML (the default) is used.\n")
			s = "html"
		}
		a.Format = s
	}
	for _, q := range Questions[1:] {
		if skip[q.N] || answered(a, q.N) {
			continue
		}
		s := k.Ask(q, func(s string) error { scratch := *a; return ApplyAnswer(&scratch, q.N, s) })
		if s == "" {
			if q.Critical {
				notes = append(notes, fmt.Sprintf("question %d unanswered: technology-agnostic design", q.N))
			} else {
				notes = append(notes, fmt.Sprintf("question %d unanswered: assumption stated in the document", q.N))
			}
			continue
		}
		if err := ApplyAnswer(a, q.N, s); err != nil {
			return notes, err // valid accepted it
		}
	}
	return notes, nil
}

func answered(a *Answers, n int) bool {
	switch n {
	case 1:
		return len(a.Actions) > 0
	case 2:
		return a.Stack.Known()
	case 3:
		return len(a.RetrySources) > 0
	case 4:
		return len(a.Providers) > 0
	case 5:
		return a.Concurrency != ""
	case 6:
		return a.Retention != ""
	case 7:
		return a.DetectionLatency != ""
	}
	return false
}

var volumeRe = regexp.MustCompile(`(\d[\d_,]*)\s*(k)?\s*(/|per|a)\s*day`)

// ApplyAnswer reads a free-text answer to question n (1..7) into a.
func ApplyAnswer(a *Answers, n int, s string) error {
	ls := strings.ToLower(s)
	parts := splitList(s)
	switch n {
	case 1:
		for _, p := range parts {
			act := Action{Name: actionName("", p), Trigger: p, Kind: "http"}
			lp := strings.ToLower(p)
			switch {
			case strings.Contains(lp, "webhook"):
				act.Kind = "webhook"
			case strings.Contains(lp, "cron") || strings.Contains(lp, "nightly") || strings.Contains(lp, "schedule"):
				act.Kind = "cron"
			case strings.Contains(lp, "worker") || strings.Contains(lp, "consumer") || strings.Contains(lp, "queue") || strings.Contains(lp, "job"):
				act.Kind = "consumer"
			}
			a.Actions = append(a.Actions, act)
		}
	case 2:
		fields := []*string{&a.Stack.Language, &a.Stack.Framework, &a.Stack.Database, &a.Stack.Broker}
		for i, p := range parts {
			if i < len(fields) {
				*fields[i] = p
			}
		}
	case 3:
		for _, p := range parts {
			lp := strings.ToLower(p)
			switch {
			case strings.Contains(lp, "client"):
				a.RetrySources = append(a.RetrySources, "client_retries")
			case strings.Contains(lp, "queue") || strings.Contains(lp, "redeliver"):
				a.RetrySources = append(a.RetrySources, "queue_redelivery")
			case strings.Contains(lp, "webhook"):
				a.RetrySources = append(a.RetrySources, "webhook_resends")
			case strings.Contains(lp, "cron"):
				a.RetrySources = append(a.RetrySources, "cron_overlap")
			case strings.Contains(lp, "click"):
				a.RetrySources = append(a.RetrySources, "double_click")
			case strings.Contains(lp, "load") || strings.Contains(lp, "lb"):
				a.RetrySources = append(a.RetrySources, "lb_replay")
			default:
				return fmt.Errorf("retry source %q not recognised", p)
			}
		}
	case 4:
		if ls == "none" || ls == "no" {
			return nil
		}
		for _, p := range parts {
			k := providerKey(p)
			if _, ok := providerFacts[k]; !ok {
				return fmt.Errorf("provider %q not recognised", p)
			}
			a.Providers = append(a.Providers, k)
		}
	case 5:
		switch {
		case strings.Contains(ls, "global"):
			a.Concurrency = "global"
		case strings.Contains(ls, "single"):
			a.Concurrency = "single"
		default:
			a.Concurrency = "multi-instance"
		}
		if m := volumeRe.FindStringSubmatch(ls); m != nil {
			v, err := strconv.ParseInt(strings.NewReplacer("_", "", ",", "").Replace(m[1]), 10, 64)
			if err == nil {
				if m[2] == "k" {
					v *= 1000
				}
				a.VolumePerDay = v
			}
		}
	case 6:
		if _, err := ParseDuration(s); err != nil {
			return err
		}
		a.Retention = s
	case 7:
		a.DetectionLatency = s
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' || r == '|' }) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
