package design

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
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
	{3, "Where do retries come from, and for how long?", "e.g. client retries 24h, queue redelivery 3d, webhook resends, cron overlap, double click, load-balancer replay", false},
	{4, "Payments involved? Which providers?", "e.g. Stripe, Adyen, PayPal, bank transfer  |  none", false},
	{5, "Expected concurrency (and volume a day)?", "e.g. single server | multi-instance, 50000/day | globally distributed", false},
	{6, "How long must keys be kept?", "e.g. 24h, 7d, 45d", false},
	{7, "How fast must a duplicate be detected?", "e.g. synchronous (in the request) | within 1m | within 1h", false},
}

// ActionQuestion is asked once per protected action: what makes two
// requests the same intent, and how long the action takes.
const ActionQuestion = "%s: its significant fields (what makes two requests the same intent), then its p99 duration after a semicolon?"

// ActionExamples are ActionQuestion's examples.
const ActionExamples = "e.g. amount, currency, recipient; 3s  |  order_id, template; 500ms  |  ; 2s"

// Asker runs the question protocol on a terminal (or any reader and
// writer): the output format first, then at most two asks, each a group
// of questions answered one line each. The first ask holds every
// question not yet answered; the second, only when needed, asks once
// more what the first left critical and unanswered (the actions, the
// stack) or did not understand, and the fields and duration of actions
// named in the first. What is still unanswered then is assumed, and the
// document lists every assumption.
type Asker struct {
	in  *bufio.Reader
	out io.Writer
}

// NewAsker returns an Asker reading answers from in and writing prompts to out.
func NewAsker(in io.Reader, out io.Writer) *Asker {
	return &Asker{in: bufio.NewReader(in), out: out}
}

func (k *Asker) line() string {
	s, _ := k.in.ReadString('\n')
	return strings.TrimSpace(s)
}

// prompt is one question of an ask: its text, examples, and what to do
// with the answer (an error: not understood).
type prompt struct {
	n        int // 0..7 for the questions, -1 for an action's details
	action   string
	text     string
	examples string
	apply    func(string) error
}

// ask asks a group of prompts, one line each. It returns the prompts left
// unanswered and those not understood (with the reason).
func (k *Asker) ask(round int, ps []prompt) (empty []prompt, bad map[int]error) {
	bad = map[int]error{}
	fmt.Fprintf(k.out, "\nAsk %d of 2: %d question(s), one line each. Enter leaves one unanswered: it is then assumed, and the document lists the assumption.\n", round, len(ps))
	for i, q := range ps {
		fmt.Fprintf(k.out, "%s\n  (%s)\n> ", q.text, q.examples)
		s := k.line()
		if s == "" {
			empty = append(empty, q)
			continue
		}
		if err := q.apply(s); err != nil {
			fmt.Fprintf(k.out, "Not understood (%v).\n", err)
			bad[i] = err
		}
	}
	return empty, bad
}

// Offer asks a yes/no question before the interview; an empty answer is
// yes, an answer starting with n is no.
func (k *Asker) Offer(question string) bool {
	fmt.Fprintf(k.out, "%s [Y/n]\n> ", question)
	s := strings.ToLower(k.line())
	return !strings.HasPrefix(s, "n")
}

// Interview asks what the answers and the scan have not answered and
// fills the answers, in at most two asks (see [Asker]). skip names
// questions already answered. It returns notes on what stays unanswered.
func (k *Asker) Interview(a *Answers, skip map[int]bool) ([]string, error) {
	fmt.Fprintln(k.out, "payonce design: the output format first, then at most two asks.")
	question := func(q Question) prompt {
		return prompt{n: q.N, text: q.Text, examples: q.Examples, apply: func(s string) error {
			scratch := *a
			scratch.Actions = append([]Action(nil), a.Actions...)
			if err := ApplyAnswer(&scratch, q.N, s); err != nil {
				return err
			}
			return ApplyAnswer(a, q.N, s)
		}}
	}
	details := func(i int) prompt {
		name := a.Actions[i].Name
		return prompt{n: -1, action: name, text: fmt.Sprintf(ActionQuestion, name), examples: ActionExamples,
			apply: func(s string) error { return ApplyActionDetails(&a.Actions[i], s) }}
	}
	needsDetails := func(x Action) bool { return len(x.Fields) == 0 || x.Duration == "" }

	// Ask 1: the format, the questions not answered, the details of the
	// actions already known.
	var ps []prompt
	if a.Format == "" && !skip[0] {
		ps = append(ps, prompt{n: 0, text: Questions[0].Text, examples: "html or markdown", apply: func(s string) error {
			if _, err := ParseFormat(s); err != nil {
				return err
			}
			a.Format = s
			return nil
		}})
	}
	for _, q := range Questions[1:] {
		if !skip[q.N] && !answered(a, q.N) {
			ps = append(ps, question(q))
		}
	}
	known := len(a.Actions)
	for i := range a.Actions {
		if needsDetails(a.Actions[i]) {
			ps = append(ps, details(i))
		}
	}
	if len(ps) == 0 {
		return nil, nil
	}
	empty, bad := k.ask(1, ps)

	// Ask 2: once more what was critical and unanswered or not
	// understood, and the details of the actions named in ask 1.
	var again []prompt
	for _, q := range empty {
		if q.n >= 1 && Questions[q.n].Critical {
			again = append(again, q)
		}
	}
	for i, q := range ps {
		if bad[i] != nil {
			q.text += fmt.Sprintf(" (once more: %v)", bad[i])
			again = append(again, q)
		}
	}
	for i := known; i < len(a.Actions); i++ {
		if needsDetails(a.Actions[i]) {
			again = append(again, details(i))
		}
	}
	var notes []string
	if len(again) > 0 {
		empty2, bad2 := k.ask(2, again)
		unanswered := append([]prompt(nil), empty2...)
		for i, q := range again {
			if bad2[i] != nil {
				unanswered = append(unanswered, q)
			}
		}
		// Actions named in ask 2 are not asked about: assumed.
		for _, q := range unanswered {
			notes = append(notes, unansweredNote(q))
		}
		if len(unanswered) > 0 {
			fmt.Fprintf(k.out, "Two asks done: %d question(s) unanswered, each stated as an assumption in the document.\n", len(unanswered))
		}
	}
	for _, q := range empty {
		if q.n == -1 || (q.n >= 1 && !Questions[q.n].Critical) {
			notes = append(notes, unansweredNote(q))
		}
	}
	return notes, nil
}

func unansweredNote(q prompt) string {
	switch {
	case q.n == 0:
		return "format unanswered: HTML (the default)"
	case q.n == -1:
		return fmt.Sprintf("action %s: fields or p99 unanswered: assumption stated in the document", q.action)
	case Questions[q.n].Critical:
		return fmt.Sprintf("question %d unanswered: technology-agnostic design", q.n)
	}
	return fmt.Sprintf("question %d unanswered: assumption stated in the document", q.n)
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

var windowRe = regexp.MustCompile(`\(?\b(\d+(?:\.\d+)?(?:ms|s|m|h|d))\)?\s*$`)

func or(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

var latencyRe = regexp.MustCompile(`(\d+(?:\.\d+)?)\s*(ms|s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|d|days?)\b`)

// ParseLatency reads the answer to question 7: synchronous (in the
// request: "synchronous", "sync", "in the request", "immediately", "0"),
// or a duration the detection may take ("within 1m", "5 minutes", "1h").
func ParseLatency(s string) (sync bool, d time.Duration, err error) {
	ls := strings.ToLower(strings.TrimSpace(s))
	switch {
	case ls == "" || ls == "0" || strings.Contains(ls, "sync") || strings.Contains(ls, "request") || strings.Contains(ls, "immediate"):
		return true, 0, nil
	}
	m := latencyRe.FindStringSubmatch(ls)
	if m == nil {
		return false, 0, fmt.Errorf("detection latency %q: want synchronous or a duration such as within 1m", s)
	}
	unit := map[byte]string{'m': "m", 's': "s", 'h': "h", 'd': "d"}[m[2][0]]
	if strings.HasPrefix(m[2], "ms") {
		unit = "ms"
	}
	d, err = ParseDuration(m[1] + unit)
	if err != nil {
		return false, 0, fmt.Errorf("detection latency %q: %w", s, err)
	}
	return false, d, nil
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
			// An optional window: "client retries 48h", "queue redelivery (7d)".
			var window string
			if m := windowRe.FindStringSubmatch(lp); m != nil {
				if _, err := ParseDuration(m[1]); err != nil {
					return fmt.Errorf("retry source %q: %w", p, err)
				}
				window = m[1]
			}
			var src string
			switch {
			case strings.Contains(lp, "client"):
				src, a.ClientRetryWindow = "client_retries", or(window, a.ClientRetryWindow)
			case strings.Contains(lp, "queue") || strings.Contains(lp, "redeliver"):
				src, a.QueueRedeliveryWindow = "queue_redelivery", or(window, a.QueueRedeliveryWindow)
			case strings.Contains(lp, "webhook"):
				src, a.WebhookResendWindow = "webhook_resends", or(window, a.WebhookResendWindow)
			case strings.Contains(lp, "cron"):
				src = "cron_overlap"
			case strings.Contains(lp, "click"):
				src = "double_click"
			case strings.Contains(lp, "load") || strings.Contains(lp, "lb"):
				src = "lb_replay"
			default:
				return fmt.Errorf("retry source %q not recognised", p)
			}
			if !slices.Contains(a.RetrySources, src) {
				a.RetrySources = append(a.RetrySources, src)
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
		if _, _, err := ParseLatency(s); err != nil {
			return err
		}
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
