package design

import (
	"fmt"
	"os"
	"path/filepath"
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
	// Duration is the action's p99 duration ("2s"). Default 2s for http,
	// 30s otherwise.
	Duration string `json:"duration,omitempty"`
	// KeySource is client (the caller's Idempotency-Key) or server (derived
	// from identifying fields). Default client for http, server otherwise.
	KeySource string `json:"key_source,omitempty"`
	// IdentifyingFields derive a server key's intent (message id, event id,
	// schedule slot).
	IdentifyingFields []string `json:"identifying_fields,omitempty"`
	// Fields are the significant fields the fingerprint covers.
	Fields []string `json:"fields,omitempty"`
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
