package design

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Format is the document's output format.
type Format string

// The output formats.
const (
	HTML     Format = "html"
	Markdown Format = "markdown"
)

// ParseFormat reads the answer to the first question: HTML when empty or
// "default", else html or markdown (md).
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "default", "html", "htm":
		return HTML, nil
	case "markdown", "md":
		return Markdown, nil
	}
	return "", fmt.Errorf("format: %q is neither html nor markdown", s)
}

// Answers are the user's answers to the design questions, from a terminal,
// flags or an answers file (YAML or JSON), completed by a [Scan].
type Answers struct {
	// Format is html (default) or markdown.
	Format string `json:"format,omitempty"`
	// Service names the system the document is for.
	Service string `json:"service,omitempty"`
	// Actions are the protected actions (question 1).
	Actions []Action `json:"actions,omitempty"`
	// Stack is the technology stack (question 2).
	Stack Stack `json:"stack,omitempty"`
	// RetrySources (question 3): client_retries, queue_redelivery,
	// webhook_resends, cron_overlap, double_click, lb_replay.
	RetrySources []string `json:"retry_sources,omitempty"`
	// Providers (question 4): stripe, adyen, paypal, bank_transfer; empty
	// when no payments.
	Providers []string `json:"providers,omitempty"`
	// Concurrency (question 5): single, multi-instance or global.
	Concurrency string `json:"concurrency,omitempty"`
	// VolumePerDay is the expected number of protected requests a day,
	// all actions together (part of question 5), for the uniqueness
	// assessment. Default 100000.
	VolumePerDay int64 `json:"volume_per_day,omitempty"`
	// Retention (question 6): how long keys are kept, e.g. "72h" or "7d".
	Retention string `json:"retention,omitempty"`
	// DetectionLatency (question 7): how soon a duplicate must be detected:
	// "synchronous" (in the request, default) or a duration.
	DetectionLatency string `json:"detection_latency,omitempty"`
	// ClientRetryWindow is how long clients retry the same key. Default 24h.
	ClientRetryWindow string `json:"client_retry_window,omitempty"`
	// QueueRedeliveryWindow is how long the broker redelivers. Default 72h.
	QueueRedeliveryWindow string `json:"queue_redelivery_window,omitempty"`
	// WebhookResendWindow is how long the senders of your webhooks resend
	// a delivery. Default: the payment providers' (3 days) when payments
	// are involved, else 72h, stated as an assumption.
	WebhookResendWindow string `json:"webhook_resend_window,omitempty"`

	// actionsFromSpecs: the actions were named by --action specs, which
	// may go on adding them.
	actionsFromSpecs bool
}

// Stack is the answer to question 2.
type Stack struct {
	Language  string `json:"language,omitempty"`
	Framework string `json:"framework,omitempty"`
	Database  string `json:"database,omitempty"`
	Broker    string `json:"broker,omitempty"`
}

// IsGo reports whether the stack is Go (payonce's own code applies).
func (s Stack) IsGo() bool {
	l := strings.ToLower(s.Language)
	return l == "go" || l == "golang"
}

// Known reports whether anything is known of the stack.
func (s Stack) Known() bool { return s.Language != "" || s.Framework != "" || s.Database != "" }

// Action is one protected action.
type Action struct {
	// Name is the action's name in keys (createOrder, charge).
	Name string `json:"name"`
	// Kind is http, consumer, webhook or cron. Default http.
	Kind string `json:"kind,omitempty"`
	// Trigger is the route ("POST /checkout"), queue, topic or schedule.
	Trigger string `json:"trigger,omitempty"`
	// Duration is the action's expected duration, its p99 ("2s"): the
	// lock timeout follows from it. When not answered, 2s is assumed for
	// http and 30s otherwise, and the document says so.
	Duration string `json:"duration,omitempty"`
	// KeySource is client (the caller's Idempotency-Key) or server (derived
	// from identifying fields). Default client for http, server otherwise.
	KeySource string `json:"key_source,omitempty"`
	// IdentifyingFields derive a server key's intent (message id, event id,
	// schedule slot).
	IdentifyingFields []string `json:"identifying_fields,omitempty"`
	// Fields are the significant fields the fingerprint covers: those
	// that make two requests the same intent. When not answered, a payment
	// action is assumed to be payonce's charge (amount, currency,
	// recipient, payment_method) or refund (charge_key, amount); any other
	// action gets no assumed field, and the document says how to choose
	// them.
	Fields []string `json:"fields,omitempty"`
	// Effects are the action's outbound side effects, those outside your
	// database that no transaction can take back ("email to the
	// customer", "push notification", "call to the shipping API").
	Effects []string `json:"effects,omitempty"`
	// Provider is the payment provider the action calls, if any.
	Provider string `json:"provider,omitempty"`
	// Steps of a multi-step action, in order.
	Steps []Step `json:"steps,omitempty"`
	// Location is where a scan found the action (file:line).
	Location string `json:"location,omitempty"`
}

// Step is one step of a multi-step action.
type Step struct {
	Name string `json:"name"`
	// Remote: the step calls another system (a provider, a service).
	Remote bool `json:"remote,omitempty"`
	// Compensation undoes the step (refund, release stock).
	Compensation string `json:"compensation,omitempty"`
	// NonCompensable explains why the step cannot be undone, when it
	// cannot (an email sent, the last step).
	NonCompensable string `json:"non_compensable,omitempty"`
}

// LoadAnswers reads an answers file, YAML or JSON.
func LoadAnswers(path string) (*Answers, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var a Answers
	if err := yaml.UnmarshalStrict(b, &a); err != nil {
		return nil, fmt.Errorf("answers file %s: %w", filepath.Base(path), err)
	}
	return &a, nil
}

// ParseDuration reads a Go duration or a number of days ("7d").
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(d, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("duration %q: want e.g. 7d or 72h", s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("duration %q: want e.g. 7d, 72h or 2s", s)
	}
	return d, nil
}

// human prints a duration the way people write it.
func human(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

// ApplyActionSpec reads one --action flag, NAME[:fields=a,b][:p99=2s]
// [:effects=email,sms], into a: the significant fields, the expected
// duration (p99) and the outbound side effects of the action NAME. NAME
// is an action already named (by --actions, the answers file or a scan);
// when none is named yet, the spec adds it (an http action).
func ApplyActionSpec(a *Answers, spec string) error {
	name, rest, _ := strings.Cut(spec, ":")
	name = strings.TrimSpace(name)
	if name == "" {
		return fmt.Errorf("--action %q: no action name; want NAME:fields=a,b:p99=2s", spec)
	}
	var act *Action
	for i := range a.Actions {
		if a.Actions[i].Name == name {
			act = &a.Actions[i]
		}
	}
	if act == nil {
		if len(a.Actions) > 0 && !a.actionsFromSpecs {
			var names []string
			for _, x := range a.Actions {
				names = append(names, x.Name)
			}
			return fmt.Errorf("--action %s: no action of that name; the actions are %s", name, strings.Join(names, ", "))
		}
		a.Actions = append(a.Actions, Action{Name: name, Kind: "http"})
		a.actionsFromSpecs = true
		act = &a.Actions[len(a.Actions)-1]
	}
	if rest == "" {
		return fmt.Errorf("--action %s: nothing given; want %s:fields=a,b:p99=2s", name, name)
	}
	for _, part := range strings.Split(rest, ":") {
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if !ok || v == "" {
			return fmt.Errorf("--action %s: %q is not key=value; want fields=a,b, p99=2s or effects=email", name, part)
		}
		switch k {
		case "fields":
			fs, err := parseFields(v)
			if err != nil {
				return fmt.Errorf("--action %s: %w", name, err)
			}
			act.Fields = fs
		case "p99", "duration":
			if _, err := ParseDuration(v); err != nil {
				return fmt.Errorf("--action %s: p99: %w", name, err)
			}
			act.Duration = v
		case "effects":
			act.Effects = splitComma(v)
		default:
			return fmt.Errorf("--action %s: unknown %q; want fields, p99 or effects", name, k)
		}
	}
	return nil
}

// ApplyActionDetails reads the interactive answer about one action:
// its significant fields, then its p99 after a semicolon ("amount,
// currency; 3s"). Either part may be left empty.
func ApplyActionDetails(act *Action, s string) error {
	fields, dur, _ := strings.Cut(s, ";")
	fields, dur = strings.TrimSpace(fields), strings.TrimSpace(dur)
	if dur == "" && fields != "" {
		// "3s" alone is a duration, not a field.
		if _, err := ParseDuration(fields); err == nil && !strings.Contains(fields, ",") {
			fields, dur = "", fields
		}
	}
	var fs []string
	if fields != "" {
		var err error
		if fs, err = parseFields(fields); err != nil {
			return err
		}
	}
	if dur != "" {
		if _, err := ParseDuration(dur); err != nil {
			return fmt.Errorf("p99: %w", err)
		}
	}
	if fs != nil {
		act.Fields = fs
	}
	if dur != "" {
		act.Duration = dur
	}
	return nil
}

var fieldName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.\-]*$`)

// parseFields reads a comma-separated list of field names, refusing
// volatile ones (a time, a trace id, the key) with the reason.
func parseFields(s string) ([]string, error) {
	fs := splitComma(s)
	if len(fs) == 0 {
		return nil, fmt.Errorf("fields: none named")
	}
	for _, f := range fs {
		if !fieldName.MatchString(f) {
			return nil, fmt.Errorf("field %q: want a request field name (letters, digits, _ . -), e.g. amount or customer_id", f)
		}
		if isVolatile(f) {
			return nil, fmt.Errorf("field %q is volatile (a time, a trace id or the key): it differs between retries, so it cannot be significant", f)
		}
	}
	return fs, nil
}

func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
