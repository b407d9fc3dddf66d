package design

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// The seven testable constraints of the seed's reference design: a
// document that breaks one would lead its readers to build a system that
// runs an action twice or loses an intent. [Check] may add checks of its
// own under these names; it never drops one.
const (
	// C1: every action with side effects has an idempotency key with a
	// stated source (client-generated, or server-derived from named
	// identifying fields), of the form {scope}_{action}_{intent}, its
	// scope from authentication, with no time component.
	C1 = "C1"
	// C2: every fingerprint names its significant fields: no whole-body
	// fingerprint, no empty field list (unless the Assumptions box says
	// why and what it covers instead), none volatile, and it states what
	// it excludes (timestamps, trace ids, the key itself).
	C2 = "C2"
	// C3: every lock timeout exceeds the action's stated p99 with margin
	// (at least 1.5x), and is below the retention.
	C3 = "C3"
	// C4: retention covers the longest retry horizon (client, queue,
	// webhook, provider).
	C4 = "C4"
	// C5: every external call carries a deterministic provider reference
	// derived from the key (no random or time part): provider calls and
	// outbound messages alike.
	C5 = "C5"
	// C6: every multi-step action has a compensation per step (or an
	// explicit non-compensable note): a resumable state machine.
	C6 = "C6"
	// C7: all 12 sections and all 9 deliverables are present and
	// non-empty, in the rendered document too.
	C7 = "C7"
)

// lockMargin is how far a lock timeout must exceed the p99 (C3): a lease
// equal to the p99 ends under one slow holder in a hundred.
const lockMargin = 1.5

// Constraints describes C1..C7 for people.
var Constraints = map[string]string{
	C1: "every action with side effects has an idempotency key with a stated source (client or server, from named fields), {scope}_{action}_{intent}, its scope from authentication and no time component",
	C2: "every fingerprint names its significant fields (no whole-body fingerprint, no empty field list unless the Assumptions box says why) and excludes volatile fields (timestamps, trace ids, the key itself)",
	C3: "every lock timeout exceeds the action's p99 (stated, or assumed in the Assumptions box) with margin (at least 1.5x) and is below retention",
	C4: "retention covers the longest retry horizon (client, queue, webhook, provider)",
	C5: "every external call carries a deterministic provider reference derived from the key",
	C6: "every multi-step action has a compensation per step (or an explicit non-compensable note): a resumable state machine",
	C7: "all 12 sections and all 9 deliverables are present and non-empty",
}

// ConstraintRow is one constraint as the document lists it.
type ConstraintRow struct{ ID, Text string }

// ConstraintList is C1..C7 in order, for the document's own list.
func (d *Document) ConstraintList() []ConstraintRow {
	var out []ConstraintRow
	for _, c := range []string{C1, C2, C3, C4, C5, C6, C7} {
		out = append(out, ConstraintRow{c, Constraints[c]})
	}
	return out
}

// Violation is a broken constraint.
type Violation struct {
	Constraint string
	Detail     string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("constraint %s violated (%s): %s", v.Constraint, Constraints[v.Constraint], v.Detail)
}

var timeish = regexp.MustCompile(`(?i)\{[^}]*(time|date|now|ts|epoch|unix|clock)[^}]*\}|\d{4}-\d{2}-\d{2}|_1\d{9}(\d{3})?(_|$)`)
var emptySum = regexp.MustCompile(`NewFingerprint\(\)\.\s*Sum\(\)`)

// stated reports whether an assumption about the action named is listed,
// with its reason, in the document's Assumptions box.
func stated(d *Document, assumption, action string) bool {
	if assumption == "" || !strings.Contains(assumption, action) || !strings.Contains(assumption, "not answered") {
		return false
	}
	for _, s := range d.Assumptions {
		if s == assumption {
			return true
		}
	}
	return false
}

var randomish = regexp.MustCompile(`(?i)(uuid\.new|uuidv4|random|rand\(|now|time)`)

// Check verifies C1..C7 on a document and its rendering. It returns every
// violation found, joined; each is a *[Violation].
func Check(d *Document, rendered []byte) error {
	var errs []error
	bad := func(c, f string, a ...any) { errs = append(errs, &Violation{c, fmt.Sprintf(f, a...)}) }
	if len(d.Actions) == 0 {
		bad(C1, "no protected action")
	}
	for _, x := range d.Actions {
		if !strings.HasPrefix(x.KeyFormat, "{scope}_") || !strings.HasSuffix(x.KeyFormat, "_{intent}") || x.Name == "" || !strings.Contains(x.KeyFormat, "_"+x.Name+"_") {
			bad(C1, "action %q: key format %q is not {scope}_%s_{intent}", x.Name, x.KeyFormat, x.Name)
		}
		if timeish.MatchString(x.KeyFormat) || timeish.MatchString(x.KeyExample) {
			bad(C1, "action %q: key %q has a time component", x.Name, x.KeyFormat)
		}
		for _, f := range x.IdentifyingFields {
			if strings.Contains(strings.ToLower(f), "now") || strings.Contains(strings.ToLower(f), "current time") {
				bad(C1, "action %q: the intent is derived from %q, a time that varies between retries", x.Name, f)
			}
		}
		switch {
		case x.KeySource != "client" && x.KeySource != "server":
			bad(C1, "action %q: its key has no stated source (%q is neither client nor server)", x.Name, x.KeySource)
		case x.KeySource == "server" && len(x.IdentifyingFields) == 0:
			bad(C1, "action %q: its server-derived key names no identifying field to derive it from", x.Name)
		}
		if !strings.Contains(x.ScopeFrom, "authenticat") && !strings.Contains(x.ScopeFrom, "tenant") {
			bad(C1, "action %q: scope %q is not taken from authentication", x.Name, x.ScopeFrom)
		}
		if float64(x.LockTimeout) < lockMargin*float64(x.DurationD) {
			bad(C3, "action %q: lock timeout %s does not exceed its p99 %s with margin (at least %.1fx)", x.Name, x.LockTimeout, x.DurationD, lockMargin)
		}
		if x.LockTimeout >= d.Retention {
			bad(C3, "action %q: lock timeout %s is not below retention %s", x.Name, x.LockTimeout, d.Retention)
		}
		if x.Provider != "" && len(x.Refs) == 0 {
			bad(C5, "action %q calls %s with no provider reference", x.Name, x.Provider)
		}
		for _, r := range x.Refs {
			if !r.Derived || !strings.Contains(r.Value, "{key}") || randomish.MatchString(r.Value) {
				bad(C5, "action %q: %s reference %q is not derived deterministically from the key", x.Name, r.Provider, r.Value)
			}
		}
		if len(x.Fields) == 0 && !stated(d, x.FieldsAssumption, x.Name) {
			bad(C2, "action %q: fingerprint names no field, and no assumption in the Assumptions box says so with the reason", x.Name)
		}
		if x.FieldsAssumption != "" && !stated(d, x.FieldsAssumption, x.Name) {
			bad(C2, "action %q: its fields were assumed but the Assumptions box does not say so", x.Name)
		}
		if x.DurationAssumption != "" && !stated(d, x.DurationAssumption, x.Name) {
			bad(C3, "action %q: its lock timeout follows from an assumed p99 that the Assumptions box does not list", x.Name)
		}
		for _, f := range x.Fields {
			if isVolatile(f) {
				bad(C2, "action %q: fingerprint covers the volatile field %q", x.Name, f)
			}
		}
		ex := strings.ToLower(strings.Join(x.Excluded, " "))
		for _, must := range []string{"timestamp", "trace", "key"} {
			if !strings.Contains(ex, must) {
				bad(C2, "action %q: fingerprint does not state that it excludes %s", x.Name, must)
			}
		}
		if len(x.Outbound) > 0 && !strings.Contains(x.Delivery, "{key}_") {
			bad(C5, "action %q: its outbound effect (%s) carries no dedup id derived from the key", x.Name, strings.Join(x.Outbound, ", "))
		}
		if x.MultiStep() {
			for _, s := range x.Steps {
				if strings.TrimSpace(s.Compensation) == "" && strings.TrimSpace(s.NonCompensable) == "" {
					bad(C6, "action %q: step %q has neither a compensation nor a non-compensable note", x.Name, s.Name)
				}
			}
		}
	}
	for _, h := range d.Horizons {
		if d.Retention < h.Window {
			bad(C4, "retention %s is shorter than %s (%s)", human(d.Retention), h.Source, human(h.Window))
		}
	}
	for _, p := range d.Providers {
		if p.WindowD > d.Retention {
			bad(C4, "retention %s is shorter than %s's window (%s)", human(d.Retention), p.Name, human(p.WindowD))
		}
	}
	if rendered != nil {
		// The generated Go never fingerprints the whole body (an empty
		// Fields) nor builds a fingerprint of no field (Sum errors).
		if bytes.Contains(rendered, []byte("Fields: []string{}")) {
			bad(C2, "the generated code has Fields: []string{}: a whole-body fingerprint")
		}
		if emptySum.Match(rendered) {
			bad(C2, "the generated code sums a fingerprint of no field: it errors at run time")
		}
	}
	have := map[string]Section{}
	for _, s := range d.Sections {
		have[s.ID] = s
	}
	for _, id := range SectionIDs {
		s, ok := have[id]
		switch {
		case !ok:
			bad(C7, "section %s is missing", id)
		case len(s.Blocks) == 0:
			bad(C7, "section %s (%s) is empty", id, s.Title)
		case rendered != nil && !bytes.Contains(rendered, []byte(`id="`+id+`"`)):
			bad(C7, "section %s is not in the rendered document", id)
		}
	}
	return errors.Join(errs...)
}

// Violated returns the constraints err names, in order.
func Violated(err error) []string {
	var out []string
	seen := map[string]bool{}
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if v, ok := e.(*Violation); ok && !seen[v.Constraint] {
			seen[v.Constraint] = true
			out = append(out, v.Constraint)
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
	return out
}

// Summary is the short account of the key decisions printed on the
// terminal after the document is written.
func Summary(d *Document, path string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "wrote %s (%s): 12 sections, 9 deliverables, constraints C1-C7 hold\n", path, d.Format)
	fmt.Fprintf(&b, "key decisions:\n")
	for _, x := range d.Actions {
		fmt.Fprintf(&b, "  %-12s key %s (%s-generated), lock timeout %s (duration %s)", x.Name, x.KeyFormat, x.KeySource, human(x.LockTimeout), human(x.DurationD))
		if len(x.Refs) > 0 {
			var ps []string
			for _, r := range x.Refs {
				ps = append(ps, r.Provider)
			}
			fmt.Fprintf(&b, ", provider refs derived for %s", strings.Join(ps, ", "))
		}
		if x.MultiStep() {
			fmt.Fprintf(&b, ", saga of %d steps", len(x.Steps))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "  retention %s: %s\n", human(d.Retention), d.RetentionReason)
	if d.Agnostic {
		b.WriteString("  stack unknown: technology-agnostic design; its code needs adaptation\n")
	}
	if len(d.Assumptions) > 0 {
		fmt.Fprintf(&b, "  %d assumptions stated in the document\n", len(d.Assumptions))
	}
	if len(d.Findings) > 0 {
		fmt.Fprintf(&b, "  %d anti-patterns found in the scanned code (section 9)\n", len(d.Findings))
	}
	return b.String()
}
